"""Runs candidates in a separate measuring process (`worker.py`), so that a kernel that
segfaults, aborts or never returns costs one candidate, not the user's process.

Whatever the child does (fail to start, die, hang, write garbage), `request` answers
with a reply dict and never raises: the search decides what a failure means."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np

import luminal
from luminal.search.protocol import ProtocolError, read_message, write_message

STARTUP = 60.0  # seconds a new measuring process may take to import luminal
STATUSES = ("ok", "slower", "error")  # what a measuring process itself may answer

# Run by `python -I -c`: the protocol keeps the original stdout (anything printed while
# importing, or by a kernel, goes to stderr), the path is the parent's (argv[1]).
BOOTSTRAP = """\
import json, os, sys
channel = os.dup(1)
os.dup2(2, 1)
sys.path[:] = json.loads(sys.argv[1])
from luminal.search.worker import main
main(channel)
"""


def worker_path() -> list[str]:
    """The measuring process's sys.path: the directory holding the luminal package this
    process runs first, then this process's path, with entries relative to the working
    directory ('' included) made absolute and put last, so that nothing the working
    directory holds shadows an installed package (a stray ./luminal above all). Entries
    that name nothing on disk (an editable install's path-hook key) stay as they are."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(luminal.__file__)))

    def relative_to_cwd(entry: str) -> bool:
        return not entry or (not os.path.isabs(entry) and os.path.exists(entry))

    fixed = [p for p in sys.path if not relative_to_cwd(p)]
    relative = [os.path.abspath(p) for p in sys.path if relative_to_cwd(p)]
    path: list[str] = []
    for entry in [package_root, *fixed, *relative]:
        if entry not in path:
            path.append(entry)
    return path


def worker_command() -> list[str]:
    """This interpreter, isolated (`-I`: no PYTHON* variables, no user site, neither the
    working directory nor a script directory on sys.path), running the worker."""
    return [sys.executable, "-I", "-c", BOOTSTRAP, json.dumps(worker_path())]


class MeasuringProcess:
    """One child Python process, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.ready = False  # whether the current child has said it is ready
        self.shared_token: str | None = None  # what the current child already holds
        self.start_error: str | None = None  # why the last start failed

    def start(self) -> None:
        """Start the child now (it imports luminal while the parent compiles)."""
        if self.process is not None:
            if self.process.poll() is None:
                return
            _close_pipes(self.process)  # it ended before it was asked anything
        self.shared_token = None
        self.ready = False
        self.start_error = None
        try:
            self.process = subprocess.Popen(
                worker_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=os.environ.copy(),
            )
        except (OSError, ValueError) as error:
            self.process = None
            self.start_error = f"{type(error).__name__}: {error}"
            return
        assert self.process.stdin is not None
        os.set_blocking(self.process.stdin.fileno(), False)  # writes honour the deadline

    def request(
        self,
        message: dict[str, Any],
        timeout: float,
        shared: tuple[str, Any] | None = None,
        until: float = math.inf,
    ) -> dict[str, Any]:
        """The child's reply, or {"status": "crashed" | "timeout", "detail": ...}.
        `shared` (token, object) goes to the child only when it does not hold it yet.
        Nothing waits past `until` (perf_counter): a start-up included."""
        self.start()
        process = self.process
        if process is None:
            return {
                "status": "crashed",
                "detail": f"could not start the measuring process ({self.start_error})",
            }
        if not self.ready:  # the child says so once it has imported luminal
            failure = self._await_ready(min(time.perf_counter() + STARTUP, until))
            if failure is not None:
                return failure
        message = self.attach_shared(message, shared)
        assert process.stdin is not None and process.stdout is not None
        deadline = min(time.perf_counter() + timeout, until)
        try:
            write_message(process.stdin.fileno(), message, deadline)
            reply = read_message(process.stdout.fileno(), deadline)
        except TimeoutError:
            self._kill()
            return {"status": "timeout", "detail": f"no result within {timeout:.1f} s"}
        except (BrokenPipeError, ConnectionResetError):
            reply = None
        except ProtocolError as error:
            self._kill()
            return {"status": "crashed", "detail": f"the measuring process sent {error}"}
        if reply is None:
            return {"status": "crashed", "detail": self._reap()}
        problem = _malformed(reply)
        if problem is not None:
            self._kill()
            return {"status": "crashed", "detail": f"the measuring process sent {problem}"}
        return reply

    def _await_ready(self, deadline: float) -> dict[str, Any] | None:
        """None once the child has said it is ready; else the failure as a reply."""
        assert self.process is not None and self.process.stdout is not None
        allowed = deadline - time.perf_counter()  # what it was given, not when we woke
        try:
            hello = read_message(self.process.stdout.fileno(), deadline)
        except TimeoutError:
            self._kill()
            return {
                "status": "timeout",
                "detail": f"the measuring process did not start within {allowed:.1f} s",
            }
        except ProtocolError as error:
            self._kill()
            return {
                "status": "crashed",
                "detail": f"the measuring process sent {error} instead of saying it was ready",
            }
        if hello is None:
            why = self._reap()
            return {
                "status": "crashed",
                "detail": f"the measuring process {why} before it was ready",
            }
        if hello != {"status": "ready"}:
            self._kill()
            return {
                "status": "crashed",
                "detail": f"the measuring process sent "
                f"{_brief(hello)} instead of saying it was ready",
            }
        self.ready = True
        return None

    def attach_shared(
        self, message: dict[str, Any], shared: tuple[str, Any] | None
    ) -> dict[str, Any]:
        """`message` with the shared object, or only its token when the current child
        already holds it (a restarted child gets the object again)."""
        if shared is None:
            return message
        token, blob = shared
        sent = None if token == self.shared_token else blob
        self.shared_token = token
        return {**message, "shared": (token, sent)}

    def _reap(self) -> str:
        """How the child ended, once its channel closed (killed if it lingers on)."""
        process, self.process = self.process, None
        self.restarts += 1
        assert process is not None
        try:
            code = process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return "closed its channel and was killed"
        finally:
            _close_pipes(process)
        return _describe_exit(code)

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            _close_pipes(self.process)
            self.process = None
            self.restarts += 1

    def close(self) -> None:
        """End the child. A ready one exits at the end of its input. One that has not
        said it is ready is still importing luminal (or hangs) and has nothing to
        finish: it is killed at once, as waiting for it would count against a budget."""
        process, self.process = self.process, None
        if process is None:
            return
        if not self.ready:
            process.kill()
        elif process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _close_pipes(process)


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _malformed(reply: Any) -> str | None:
    """Why `reply` is not an answer a measuring process gives, or None."""
    if not isinstance(reply, dict) or reply.get("status") not in STATUSES:
        return f"a malformed reply ({_brief(reply)})"
    if reply["status"] == "error":
        return None if isinstance(reply.get("detail", ""), str) else "a malformed error reply"
    seconds, outputs = reply.get("seconds"), reply.get("outputs")
    if not isinstance(seconds, float) or not (math.isfinite(seconds) and seconds >= 0):
        return f"a malformed time ({_brief(seconds)})"
    if not isinstance(outputs, dict) or not all(
        isinstance(k, int) and isinstance(v, np.ndarray) for k, v in outputs.items()
    ):
        return "malformed outputs"
    return None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
