"""OpenCL devices and programs: which device runs, and one program per compiled graph.

A compiled graph's kernels are one OpenCL program, so the driver's build (about a second
on PoCL) is paid once per graph, and not at all when the program is in the disk cache:
`<key>.bin` under `opencl-programs/` in the luminal cache, keyed by the source, the build
options, the device and its driver. The cache follows the CPU kernel cache's trust rules
(`luminal.backends.cpu.cache_location`, `cache_files`): a private directory (0700, files
0600), atomic writes, and a manifest with the binary's SHA-256; a binary that does not
match its manifest (truncated, edited, planted) or that the driver refuses is rebuilt from
source, never loaded.

pyopencl is imported only here and only when asked for, so `import luminal` never needs it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luminal.backends.cpu import cache_files
from luminal.backends.cpu.cache_location import PRIVATE_DIRECTORY, cache_root, is_private
from luminal.errors import CompileError

PROGRAMS = "opencl-programs"
CACHE_FORMAT = "1"
# no fast math: denormals and signed zeros keep their meaning, as on the CPU backend;
# -w: the driver's remarks on generated code are noise to a user
BUILD_OPTIONS = ("-cl-std=CL1.2", "-w")
DEVICE_VARIABLE = "LUMINAL_OPENCL_DEVICE"
INSTALL_HINT = (
    "pip install 'luminal[opencl]' (pyopencl with PoCL, a CPU OpenCL driver), or a vendor "
    "OpenCL driver; on Debian/Ubuntu as root: apt-get install pocl-opencl-icd"
)

_lock = threading.Lock()
_stats = {"builds": 0, "cache_hits": 0}


def _opencl() -> Any:
    """The pyopencl module, or CompileError saying how to install it."""
    try:
        import pyopencl
    except ImportError as error:
        raise CompileError(f"the OpenCL backend needs pyopencl ({error}); {INSTALL_HINT}") from None
    return pyopencl


def pyopencl_installed() -> bool:
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------ devices
@dataclass(frozen=True)
class DeviceInfo:
    """What identifies a device for caches and reports, and what kernels may assume."""

    index: int  # position in `all_devices()`
    platform: str
    name: str
    version: str
    driver: str
    kind: str  # "gpu" | "cpu" | "accelerator" | "other"
    extensions: frozenset[str]
    max_work_group_size: int
    local_mem_bytes: int
    base_addr_align_bytes: int

    @property
    def label(self) -> str:
        return f"{self.platform}: {self.name}"

    @property
    def has_fp16(self) -> bool:
        return "cl_khr_fp16" in self.extensions

    @property
    def identity(self) -> str:
        """Everything that changes the code a driver makes for a source."""
        return "\n".join([self.platform, self.name, self.version, self.driver])

    @property
    def unusable_reason(self) -> str | None:
        """Why this device cannot build programs, known without trying: a PoCL whose LLVM
        does not recognise this CPU names its target "generic", which LLVM then rejects
        ('unknown target CPU'); PyPI's pocl-binary-distribution 3.0 (LLVM 14) does that on
        CPUs newer than 2022."""
        if "PoCL" in self.version and self.version.rstrip().endswith("-generic"):
            return (
                f"{self.label} is PoCL built with an LLVM that does not know this CPU "
                "(target 'generic'), so it cannot build kernels"
            )
        return None


def _kind(cl: Any, device: Any) -> str:
    kind = device.type
    if kind & cl.device_type.GPU:
        return "gpu"
    if kind & cl.device_type.ACCELERATOR:
        return "accelerator"
    if kind & cl.device_type.CPU:
        return "cpu"
    return "other"


@functools.cache
def _all_devices() -> tuple[tuple[Any, DeviceInfo], ...]:
    cl = _opencl()
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD installed: the loader reports no platform
        platforms = []
    for platform in platforms:
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        for device in devices:
            info = DeviceInfo(
                index=len(found),
                platform=platform.name.strip(),
                name=device.name.strip(),
                version=device.version.strip(),
                driver=device.driver_version.strip(),
                kind=_kind(cl, device),
                extensions=frozenset(device.extensions.split()),
                max_work_group_size=int(device.max_work_group_size),
                local_mem_bytes=int(device.local_mem_size),
                base_addr_align_bytes=max(int(device.mem_base_addr_align) // 8, 1),
            )
            found.append((device, info))
    return tuple(found)


def all_devices() -> list[DeviceInfo]:
    """Every OpenCL device the installed drivers offer, in platform order."""
    if not pyopencl_installed():
        return []
    return [info for _, info in _all_devices()]


PREFERENCE = {"gpu": 0, "accelerator": 1, "cpu": 2, "other": 3}


def choose(spec: int | str | None = None) -> tuple[Any, DeviceInfo]:
    """The device to run on: `spec` an index into `all_devices()` or a substring of
    "platform: name"; None: `$LUMINAL_OPENCL_DEVICE`, else the first GPU, accelerator or
    CPU that can build programs. CompileError naming what is missing otherwise."""
    found = _all_devices()
    if not found:
        raise CompileError(f"no OpenCL device found (no driver installed); {INSTALL_HINT}")
    if spec is None:
        spec = os.environ.get(DEVICE_VARIABLE) or None
        if isinstance(spec, str) and spec.isdigit():
            spec = int(spec)
    labels = [info.label for _, info in found]
    if isinstance(spec, int):
        if not 0 <= spec < len(found):
            raise CompileError(f"OpenCL device {spec} does not exist; devices: {labels}")
        return found[spec]
    if isinstance(spec, str):
        matches = [pair for pair in found if spec.lower() in pair[1].label.lower()]
        if not matches:
            raise CompileError(f"no OpenCL device matches {spec!r}; devices: {labels}")
        return matches[0]
    usable = [pair for pair in found if pair[1].unusable_reason is None]
    if not usable:
        reasons = "; ".join(str(info.unusable_reason) for _, info in found)
        raise CompileError(f"no usable OpenCL device: {reasons}; {INSTALL_HINT}")
    return min(usable, key=lambda pair: PREFERENCE[pair[1].kind])


def is_available() -> bool:
    """pyopencl is installed and some device can build programs (cheap: no build)."""
    if not pyopencl_installed():
        return False
    try:
        choose()
    except CompileError:
        return False
    return True


@dataclass
class Device:
    """A chosen device with its context and in-order queue (one per device and process)."""

    cl: Any
    device: Any
    info: DeviceInfo
    context: Any
    queue: Any


_opened: dict[int, Device] = {}


def open_device(spec: int | str | None = None) -> Device:
    """The device `spec` names (see `choose`), with its context and queue."""
    cl = _opencl()
    device, info = choose(spec)
    with _lock:
        opened = _opened.get(info.index)
        if opened is None:
            context = cl.Context(devices=[device])
            opened = Device(cl, device, info, context, cl.CommandQueue(context))
            _opened[info.index] = opened
    return opened


# ------------------------------------------------------------------------------ programs
def _luminal_version() -> str:
    import luminal

    return str(getattr(luminal, "__version__", "unknown"))


def program_key(source: str, info: DeviceInfo, options: tuple[str, ...] = BUILD_OPTIONS) -> str:
    """The cache key of the program built from `source` for this device and driver."""
    sha = hashlib.sha256()
    for part in ("luminal-opencl", CACHE_FORMAT, _luminal_version(), info.identity, *options):
        sha.update(part.encode() + b"\0")
    sha.update(source.encode())
    return sha.hexdigest()


def build_id(info: DeviceInfo) -> str:
    """What a manifest must name: cache format, luminal version, device and driver."""
    return cache_files.sha256_text("\0".join([CACHE_FORMAT, _luminal_version(), info.identity]))


def programs_dir() -> Path:
    """`opencl-programs` under the luminal cache root, private (0700) like the root."""
    directory = cache_root() / PROGRAMS
    try:
        directory.mkdir(mode=PRIVATE_DIRECTORY, exist_ok=True)
        os.chmod(directory, PRIVATE_DIRECTORY)
    except OSError as error:
        raise CompileError(f"cannot create the OpenCL program cache {directory}: {error}") from None
    if not is_private(directory):
        raise CompileError(
            f"the OpenCL program cache {directory} is not private to you (owned by you, mode "
            "0700); remove it and compile again"
        )
    return directory


def stats() -> dict[str, int]:
    """Program builds from source and disk-cache hits in this process (tests, bench)."""
    with _lock:
        return dict(_stats)


def _bump(counter: str) -> None:
    with _lock:
        _stats[counter] += 1


def build_program(device: Device, source: str, cache: bool = True) -> Any:
    """The built program of `source` for `device`: from the disk cache when a verified
    binary is there and the driver accepts it, else built from source (and cached)."""
    cl = device.cl
    key = program_key(source, device.info)
    path = programs_dir() / f"{key}.bin" if cache else None
    if path is not None:
        binary = _verified_binary(path, key, build_id(device.info))
        if binary is not None:
            program = _from_binary(device, binary)
            if program is not None:
                _bump("cache_hits")
                return program
    program = cl.Program(device.context, source)
    try:
        program.build(options=list(BUILD_OPTIONS), devices=[device.device])
    except cl.Error as error:
        raise CompileError(
            f"the OpenCL driver ({device.info.label}, {device.info.driver}) rejected the "
            f"generated program: {error}"
        ) from None
    _bump("builds")
    if path is not None:
        _store(path, key, build_id(device.info), program, source)
    return program


def _verified_binary(path: Path, key: str, build: str) -> bytes | None:
    """The binary's bytes when they hash to what its manifest (naming `key`) records."""
    try:
        manifest = cache_files.Manifest.from_json(cache_files.manifest_path(path).read_bytes())
        data = path.read_bytes()
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if manifest.key != key or manifest.build != build:
        return None
    if hashlib.sha256(data).hexdigest() != manifest.sha256 or len(data) != manifest.size:
        return None
    return data


def _from_binary(device: Device, binary: bytes) -> Any | None:
    """A program from a cached binary, or None when the driver refuses it."""
    cl = device.cl
    try:
        program = cl.Program(device.context, [device.device], [binary])
        program.build(options=list(BUILD_OPTIONS), devices=[device.device])
    except (cl.Error, ValueError):
        return None
    return program


def _store(path: Path, key: str, build: str, program: Any, source: str) -> None:
    binaries = program.get_info(_opencl().program_info.BINARIES)
    if not binaries or not binaries[0]:
        return  # a driver without program binaries: nothing to cache
    try:
        cache_files.write_private(path, bytes(binaries[0]), durable=True)
        cache_files.record(path, key, build, (("source", cache_files.sha256_text(source)),), True)
    except OSError:
        cache_files.unlink(path)  # a cache that cannot be written costs a rebuild, no more
