"""Running a script in two fresh processes that share one program cache: the second
loads what the first compiled (the fused nodes' pickling is what such tests check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def two_processes(script: str, cache: Path) -> list[dict]:
    """The JSON each process printed last, running `script` with seeds 0 and 1 and the
    program cache on in `cache`."""
    environment = {**os.environ, "LUMINAL_CACHE_DIR": str(cache), "LUMINAL_PROGRAM_CACHE": "1"}
    return [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", script, str(seed)],
                env=environment,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()[-1]
        )
        for seed in (0, 1)
    ]
