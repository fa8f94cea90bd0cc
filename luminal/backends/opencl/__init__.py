"""The OpenCL backend: kernels of the shared GPU lowering as OpenCL C, run through pyopencl."""
