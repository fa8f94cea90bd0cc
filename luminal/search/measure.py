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


class MeasuringProcess:
    """One child Python process, restarted after a crash or a timeout."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        """Start the child now (it imports luminal while the parent compiles)."""
        if self.process is not None and self.process.poll() is None:
            return
        self.process = subprocess.Popen(
            [sys.executable, "-m", "luminal.search.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=os.environ.copy(),
        )

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The child's reply, or {"status": "crashed" | "timeout", "detail": ...}."""
        self.start()
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
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
