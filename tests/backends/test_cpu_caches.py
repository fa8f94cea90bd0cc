"""The CPU cache sizes the lowering reads (`backends/cpu/cpu_caches.py`): sysfs parsed from
a fake tree, and the Winograd weight limit derived from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from luminal.backends.cpu import cpu_caches
from luminal.compiler.winograd import MAX_WEIGHT_BYTES


def _index(root: Path, name: str, kind: str, size: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "type").write_text(kind + "\n")
    (root / name / "size").write_text(size + "\n")


def test_the_largest_data_or_unified_cache_is_the_last_level(tmp_path) -> None:
    _index(tmp_path, "index0", "Data", "48K")
    _index(tmp_path, "index1", "Instruction", "64M")  # not data: ignored however large
    _index(tmp_path, "index2", "Unified", "1024K")
    _index(tmp_path, "index3", "Unified", "32768K")
    assert cpu_caches.last_level_cache_bytes(tmp_path) == 32 << 20


@pytest.mark.parametrize(("text", "size"), [("2M", 2 << 20), ("512", 512), ("1G", 1 << 30)])
def test_sizes_in_sysfs_units(tmp_path, text, size) -> None:
    _index(tmp_path, "index0", "Unified", text)
    assert cpu_caches.last_level_cache_bytes(tmp_path) == size


def test_an_unreadable_or_missing_tree_says_unknown(tmp_path) -> None:
    assert cpu_caches.last_level_cache_bytes(tmp_path / "absent") is None
    _index(tmp_path, "index0", "Unified", "lots")
    assert cpu_caches.last_level_cache_bytes(tmp_path) is None
    (tmp_path / "index1").mkdir()  # no type file
    assert cpu_caches.last_level_cache_bytes(tmp_path) is None


@pytest.mark.parametrize(
    ("cache", "limit"),
    [(None, MAX_WEIGHT_BYTES), (2 << 20, MAX_WEIGHT_BYTES), (32 << 20, 16 << 20)],
)
def test_the_weight_limit_is_half_the_cache_and_never_below_the_default(
    monkeypatch, cache, limit
) -> None:
    monkeypatch.setattr(cpu_caches, "last_level_cache_bytes", lambda: cache)
    cpu_caches.winograd_weight_limit.cache_clear()
    try:
        assert cpu_caches.winograd_weight_limit() == limit
    finally:
        cpu_caches.winograd_weight_limit.cache_clear()
