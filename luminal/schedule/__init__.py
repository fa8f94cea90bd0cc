"""The schedule layer, shared by every backend: which nodes get a buffer and which kernel
computes each of the others (`fusion`: one entry point, `plan_fusion`), which
contractions are matrix products and how their axes group (`contraction`), which
consumer a matrix product may absorb (`epilogue`), and where each buffer lives
(`memory`: the static memory plan). Nothing here writes code or knows a device.
"""
