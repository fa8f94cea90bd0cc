"""The measured-search driver every backend shares: stages on one clock with one list of
trials, the record a finished search leaves in the cache, the progress bar, and what a
candidate sends to the measuring process (the graph without its arrays, which travel
once as `shared_inputs`). A backend supplies the search spaces and its verification.
"""

from __future__ import annotations

import math
import pickle
import sys
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from luminal.graph import Graph
from luminal.search.budget import Deadline
from luminal.search.cache import SearchRecord, cpu_model, luminal_version
from luminal.search.measure import MeasuringProcess
from luminal.search.strategy import BeamSearch


def shared_inputs(graph: Graph) -> tuple[str, dict[int, np.ndarray]]:
    """The graph's input arrays (weights included), which the measuring process receives
    once, with a token naming them. The arrays themselves, not a pickled copy: the
    protocol writes them to the pipe from their own memory."""
    return uuid.uuid4().hex, dict(graph.input_data)


def without_inputs(graph: Graph) -> Graph:
    """The graph's structure without input arrays, outputs or compiled program: what one
    candidate sends (tensors it holds point at the copy, so no array rides along)."""
    return graph.structure_copy(inputs=False)


def unsendable(graph: Graph) -> str | None:
    """Why candidates of this graph cannot go to the measuring process, if they cannot
    (a Python function op that does not pickle, such as a closure from `print`)."""
    try:  # the input arrays travel separately (and numpy arrays always pickle)
        pickle.dumps(without_inputs(graph))
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        return f"the graph holds a Python object the measuring process cannot receive ({error})"
    return None


class SearchStages:
    """Search stages sharing one clock, one measuring process, one progress bar and one
    list of trials. `compiler` carries the settings (mode, beam, seed, progress,
    candidate_timeout); `reference_results()` gives the reference outputs with their
    tolerances and the views to read them through (the backend's verification, run on
    first use: a cache hit needs none). A later stage keeps the first one's measuring
    process rather than wait for another to import luminal; `close()` ends it."""

    def __init__(
        self,
        compiler: Any,
        reference: Graph,
        deadline: Deadline,
        reference_results: Callable[[], tuple[dict, list]],
        backend: str,
    ) -> None:
        self.compiler = compiler
        self.reference = reference
        self.deadline = deadline
        self.reference_results = reference_results
        self.backend = backend
        self._results: tuple[dict, list] | None = None
        self.trials: list = []
        self.results: list = []
        self.process = MeasuringProcess()

    @property
    def expected(self) -> tuple[dict, list]:
        """(expected outputs, their views), computed on first use."""
        if self._results is None:
            self._results = self.reference_results()
        return self._results

    def run(self, space: Any, context: dict[str, str] | None = None) -> dict[str, str]:
        compiler = self.compiler
        bar = progress_bar(compiler.progress, space)
        # time for the final build and check after the search: a tenth of the budget
        reserve = 0.1 * self.deadline.seconds if self.deadline.bounded else 0.0

        def report(tried: int, best: float | None, left: float) -> None:
            if bar is not None:
                bar.update(max(0, tried - bar.n))
                best_text = "-" if best is None else f"{best * 1e3:.3f} ms"
                left_text = "unbounded" if not math.isfinite(left) else f"{max(left, 0):.0f} s"
                bar.set_postfix_str(f"best {best_text}, left {left_text}")

        expected, views = self.expected
        search = BeamSearch(
            space,
            expected,
            views,
            self.deadline,
            beam=compiler.beam,
            seed=compiler.seed,
            reserve=reserve,
            timeout=compiler.candidate_timeout,
            progress=report,
            process=self.process,
            trials=self.trials,
            context=context,
        )
        try:
            result = search.run()
        finally:
            if bar is not None:
                bar.close()
        self.results.append(result)
        return result.best

    def close(self) -> None:
        self.process.close()

    def record(self, key: str, chosen: dict, sites: dict, kernel_sites: int) -> SearchRecord:
        compiler = self.compiler
        last = self.results[-1]

        def fastest(config: dict[str, str]) -> float:
            times = [t.seconds for t in self.trials if t.config == config and t.status == "ok"]
            return min(times) if times else math.nan

        # trials hold full configurations: {} is the static program with static kernels
        baseline = fastest({})
        best = fastest(chosen)
        return SearchRecord(
            key=key,
            label=describe(self.reference, kernel_sites),
            backend=self.backend,
            mode=repr(compiler.mode),
            cpu=cpu_model(),
            version=luminal_version(),
            chosen=chosen,
            best_seconds=best,
            baseline_seconds=baseline,
            search_seconds=self.deadline.elapsed(),
            sites=sites,
            trials=self.trials,
            stopped_by=last.stopped_by,
        )


def progress_bar(progress: bool | None, space: Any) -> Any:
    """A tqdm bar over the candidates of `space` (by default when stderr is a terminal)."""
    show = sys.stderr.isatty() if progress is None else progress
    if not show:
        return None
    from tqdm.auto import tqdm

    total = 1 + sum(len(site.options) - 1 for site in space.sites)
    return tqdm(total=total, desc="luminal search", unit="candidate", leave=False)


def describe(reference: Graph, sites: int) -> str:
    """What a reader of `luminal search-report` recognises a model by."""
    outputs = [
        "(" + ", ".join(str(d) for d in reference.nodes[n].shape) + ")"
        for n in reference.output_roots()
    ]
    shown = ", ".join(outputs[:3]) + (f" +{len(outputs) - 3}" if len(outputs) > 3 else "")
    return f"{len(reference.nodes)} nodes, outputs {shown}, {sites} sites"
