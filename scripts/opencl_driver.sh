#!/usr/bin/env bash
# Make sure an OpenCL driver that can build kernels is installed (the OpenCL backend's
# tests run on it). PyPI's pocl-binary-distribution (installed with the dev extra) works
# where its LLVM knows the CPU; on newer CPUs it cannot build ("unknown target CPU
# 'generic'"), and Debian's pocl-opencl-icd is installed instead when we are root.
set -euo pipefail
cd "$(dirname "$0")/.."
probe() {
    .venv/bin/python - <<'PY' >/dev/null 2>&1
import pyopencl as cl
from luminal.backends.opencl import toolchain
device = toolchain.open_device()
cl.Program(device.context, "__kernel void k(__global float* a) { a[0] = 1.0f; }").build()
PY
}
if probe; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: no usable OpenCL driver; installing Debian's pocl-opencl-icd" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        pocl-opencl-icd >/dev/null
    probe && exit 0
fi
echo "setup: no OpenCL driver can build kernels here; OpenCL tests will fail." \
    "Install one (as root: apt-get install pocl-opencl-icd), see docs/gpu.md" >&2
exit 0
