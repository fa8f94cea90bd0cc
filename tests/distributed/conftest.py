"""The single-process oracle every data-parallel test compares with."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from tests.distributed import workloads


@pytest.fixture(scope="session")
def compiled_oracle() -> dict[str, dict[str, np.ndarray]]:
    """Each scenario trained on the full batch in one process, compiled for the CPU."""
    return {name: workloads.train(name, False, lm.CPUCompiler()) for name in workloads.SCENARIOS}
