"""Backends: lower a compiled graph to kernels for one kind of hardware and run them.

Nothing in the layers above imports a backend; users (and the backend registry) do.
"""
