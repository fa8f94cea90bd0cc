"""Runs candidates in a separate measuring process (`worker.py`), so that a kernel that
segfaults, aborts or never returns costs one candidate, not the user's process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from luminal.search.protocol import read_message, write_message

STARTUP = 60.0  # seconds a new measuring process may take to import luminal


class MeasuringProcess:
    """One child Python process, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.ready = False  # whether the current child has said it is ready
        self.shared_token: str | None = None  # what the current child already holds

    def start(self) -> None:
        """Start the child now (it imports luminal while the parent compiles)."""
        if self.process is not None and self.process.poll() is None:
            return
        self.shared_token = None
        self.ready = False
        self.process = subprocess.Popen(
            [sys.executable, "-m", "luminal.search.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=os.environ.copy(),
        )

    def request(
        self, message: dict[str, Any], timeout: float, shared: tuple[str, bytes] | None = None
    ) -> dict[str, Any]:
        """The child's reply, or {"status": "crashed" | "timeout", "detail": ...}.
        `shared` (token, bytes) goes to the child only when it does not hold it yet."""
        self.start()
        process = self.process
        message = self.attach_shared(message, shared)
        assert process is not None and process.stdin is not None and process.stdout is not None
        if not self.ready:  # the child says so once it has imported luminal
            try:
                hello = read_message(process.stdout.fileno(), time.perf_counter() + STARTUP)
            except TimeoutError:
                hello = None
            if hello is None:
                self._kill()
                return {"status": "crashed", "detail": "the measuring process did not start"}
            self.ready = True
        try:
            write_message(process.stdin.fileno(), message)
            reply = read_message(process.stdout.fileno(), time.perf_counter() + timeout)
        except TimeoutError:
            self._kill()
            return {"status": "timeout", "detail": f"no result within {timeout:.1f} s"}
        except (BrokenPipeError, ConnectionResetError):
            reply = None
        if reply is None:
            code = process.wait()
            self.process = None
            self.restarts += 1
            return {"status": "crashed", "detail": _describe_exit(code)}
        return reply

    def attach_shared(
        self, message: dict[str, Any], shared: tuple[str, bytes] | None
    ) -> dict[str, Any]:
        """`message` with the shared blob, or only its token when the current child
        already holds it (a restarted child gets the blob again)."""
        if shared is None:
            return message
        token, blob = shared
        sent = None if token == self.shared_token else blob
        self.shared_token = token
        return {**message, "shared": (token, sent)}

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            self.restarts += 1

    def close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
