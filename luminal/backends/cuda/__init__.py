"""The CUDA backend: CUDA C from the kernel IR, NVRTC and ptxas for PTX and cubins (no GPU
needed), and a `cuda-python` driver-API runtime where a GPU exists."""
