"""Running gcc: its own process group under a timeout, and errors that show the source.

A hung or runaway compile (a huge fused expression, a compiler bug) must not hang the user's
program: every gcc run has `$LUMINAL_CC_TIMEOUT` seconds (default 300, generous next to the
~0.1 s a kernel takes) and then raises `CompileError` naming the kernel and its source file.
gcc runs in a new session so the whole driver/cc1/as/ld tree can be killed; since that
also shields it from the terminal's Ctrl-C, an interrupt kills the runs in flight itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from luminal.errors import CompileError

TIMEOUT_VARIABLE = "LUMINAL_CC_TIMEOUT"
DEFAULT_CC_TIMEOUT = 300.0
SOURCE_LINES_IN_ERRORS = 40

_lock = threading.Lock()
_running: set[int] = set()  # process groups of gcc runs in flight


def cc_timeout() -> float:
    """Seconds one gcc run may take: `$LUMINAL_CC_TIMEOUT`, default 300."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_CC_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise CompileError(f"{TIMEOUT_VARIABLE} must be a positive number of seconds, got {text!r}")
    return seconds


def run(
    command: list[str], directory: Path, what: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run gcc in its own process group, so a timeout or an interrupt stops the whole
    driver/cc1/as/ld tree (killing the driver alone would leave cc1 holding the pipes)."""
    environment = {**os.environ, "LC_ALL": "C"}  # plain ASCII quotes in diagnostics
    timeout = cc_timeout()
    start = time.perf_counter()
    try:
        process = subprocess.Popen(
            command,
            cwd=directory,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            start_new_session=True,
        )
    except FileNotFoundError as error:
        raise CompileError(
            f"the CPU backend needs the C compiler {command[0]!r}, which was not found on PATH"
        ) from error
    with _lock:
        _running.add(process.pid)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(process)
        raise CompileError(
            f"{what} did not finish within {timeout:g} s and was stopped; if the kernel is "
            f"just large, raise {TIMEOUT_VARIABLE} (seconds)"
        ) from None
    except BaseException:
        _stop(process)
        raise
    finally:
        with _lock:
            _running.discard(process.pid)
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    return result, time.perf_counter() - start


def _stop(process: subprocess.Popen[str]) -> None:
    _kill_group(process.pid)
    process.communicate()


def _kill_group(group: int) -> None:
    with contextlib.suppress(OSError):  # already gone
        os.killpg(group, signal.SIGKILL)


def stop_running() -> None:
    """Kill every gcc this process has in flight (an interrupt during a parallel build)."""
    with _lock:
        groups = list(_running)
    for group in groups:
        _kill_group(group)


def compile_error(
    name: str, source: str, result: subprocess.CompletedProcess[str], path: Path
) -> str:
    """gcc's diagnostics (file names shortened to the unit's name) and the numbered source."""
    diagnostics = (result.stderr or result.stdout).replace(path.name, f"{name}.c").strip()
    lines = source.splitlines()
    shown = set(range(min(len(lines), SOURCE_LINES_IN_ERRORS)))
    match = re.search(rf"{re.escape(name)}\.c:(\d+):\d+: (?:fatal )?error", diagnostics)
    if match:  # also show the lines around the first error when it lies further down
        line = int(match.group(1)) - 1
        shown |= set(range(max(0, line - 3), min(len(lines), line + 4)))
    listing, previous = [], -1
    for index in sorted(shown):
        if index != previous + 1:
            listing.append("   ...")
        listing.append(f"{index + 1:5d} | {lines[index]}")
        previous = index
    if previous + 1 < len(lines):
        listing.append(f"   ... ({len(lines) - previous - 1} more lines)")
    return (
        f"gcc could not compile {name!r} (exit status {result.returncode}):\n"
        f"{diagnostics}\n\nsource of {name!r} (kept at {path}):\n" + "\n".join(listing)
    )
