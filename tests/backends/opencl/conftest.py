"""OpenCL tests run on whatever device `toolchain.choose()` picks (PoCL in CI, installed by
scripts/setup.sh). Each module gets its own luminal cache, so program-cache tests see a
cold cache and the user's cache is never touched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("luminal-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LUMINAL_CACHE_DIR", str(root))
        yield root
