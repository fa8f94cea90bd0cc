"""The CPU backend: generated C kernels built by `toolchain` (gcc, OpenMP, OpenBLAS)."""
