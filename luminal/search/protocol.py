"""Length-prefixed pickle messages between the search and its measuring process."""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

HEADER = struct.Struct("<Q")


def write_message(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, count: int, deadline: float | None) -> bytes | None:
    """`count` bytes, or None at end of file or when `deadline` (perf_counter) passes."""
    chunks: list[bytes] = []
    while count:
        if deadline is not None:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(count, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int, deadline: float | None = None) -> Any:
    """The next message; None at end of file; TimeoutError past `deadline`."""
    header = _read_exact(fd, HEADER.size, deadline)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    data = _read_exact(fd, length, deadline)
    if data is None:
        return None
    return pickle.loads(data)
