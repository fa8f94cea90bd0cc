"""The sizes of this machine's CPU caches, read from Linux's sysfs, for the decisions of
the lowering that depend on what stays in cache (`winograd_weight_limit`)."""

from __future__ import annotations

import functools
from pathlib import Path

from luminal.compiler.winograd import MAX_WEIGHT_BYTES

SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def _size_bytes(text: str) -> int | None:
    """sysfs's "32768K" / "2M" / "512" as bytes, or None."""
    text = text.strip()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale if digits.isdigit() else None


def last_level_cache_bytes(root: Path = SYSFS_CACHES) -> int | None:
    """The largest data or unified cache CPU 0 reports (the L3 on x86 servers), or None
    where sysfs does not say (not Linux, a container hiding it)."""
    sizes = []
    try:
        for index in root.glob("index*"):
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            size = _size_bytes((index / "size").read_text())
            if size:
                sizes.append(size)
    except OSError:
        return None
    return max(sizes, default=None)


@functools.cache
def winograd_weight_limit() -> int:
    """The largest transformed weights (U) a fused Winograd convolution may read: half the
    last-level cache, so that U stays there while every block of tiles reads it again
    (`compiler/winograd.py`), and never below `MAX_WEIGHT_BYTES` (the limit where the
    cache's size is unknown)."""
    cache = last_level_cache_bytes()
    return max(MAX_WEIGHT_BYTES, cache // 2 if cache else 0)
