"""The OpenMP wait policy chosen at import (`toolchain.spin_count`): threads spin briefly
on an idle machine and sleep at once when other processes keep the cores busy; a user's
own GOMP_SPINCOUNT or OMP_WAIT_POLICY is left alone."""

from __future__ import annotations

import os
import subprocess
import sys

from luminal.backends.cpu import toolchain


def test_spin_count_follows_the_load() -> None:
    assert toolchain.spin_count(0.1, 2) == toolchain.SPIN_COUNT
    assert toolchain.spin_count(2.0, 2) == toolchain.SPIN_COUNT  # luminal's own 2 threads
    assert toolchain.spin_count(2.6, 2) == "0"
    assert toolchain.spin_count(6.0, 4) == "0"
    assert toolchain.spin_count(6.0, 16) == toolchain.SPIN_COUNT


def _imported_spin_count(env: dict[str, str]) -> str:
    code = "import os, luminal.backends.cpu.toolchain; print(os.environ.get('GOMP_SPINCOUNT'))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_load_now_or_the_default_count_without_one(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(os, "getloadavg", lambda: (100.0, 100.0, 100.0))
    assert toolchain._initial_spin_count() == "0"

    def unobtainable() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", unobtainable)
    assert toolchain._initial_spin_count() == toolchain.SPIN_COUNT
    monkeypatch.delattr(os, "getloadavg")  # not Unix
    assert toolchain._initial_spin_count() == toolchain.SPIN_COUNT


def test_import_sets_a_spin_count_and_keeps_the_users() -> None:
    # neither variable from the environment the tests run in (a set OMP_WAIT_POLICY would
    # leave GOMP_SPINCOUNT unset in the first case)
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    assert _imported_spin_count(env) in (toolchain.SPIN_COUNT, "0")
    assert _imported_spin_count({**env, "GOMP_SPINCOUNT": "123"}) == "123"
    # GOMP_SPINCOUNT would override the policy in libgomp, so none is set beside it
    assert _imported_spin_count({**env, "OMP_WAIT_POLICY": "passive"}) == "None"
