"""Length-prefixed pickle messages between the search and its measuring process.

Both directions are bounded by a deadline: a child that stops reading (its pipe full)
or stops answering costs the caller at most the time it allowed, and a stream that does
not decode (a crash mid-message, anything else written to the channel) is a
`ProtocolError`, never an exception from deep inside pickle."""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

HEADER = struct.Struct("<Q")
MAX_MESSAGE = 1 << 40  # a length beyond this is not a message of ours (1 TiB)
CHUNK = 1 << 20


class ProtocolError(Exception):
    """The other side sent bytes that are not a message."""


def _wait(fd: int, for_write: bool, deadline: float | None) -> None:
    """Block until `fd` is ready, raising TimeoutError once `deadline` (perf_counter)
    has passed."""
    if deadline is None:
        return
    reading, writing = ([], [fd]) if for_write else ([fd], [])
    while True:  # select may wake a little early: only the clock says time is up
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError
        if any(select.select(reading, writing, [], left)):
            return


def write_message(fd: int, message: Any, deadline: float | None = None) -> None:
    """Send `message`. With a deadline, `fd` should be non-blocking (a blocking write of
    a large message into a full pipe would wait for the reader whatever the deadline)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        _wait(fd, True, deadline)
        try:
            written = os.write(fd, view[:CHUNK])
        except BlockingIOError:
            continue
        view = view[written:]


def _read_exact(fd: int, count: int, deadline: float | None) -> bytes | None:
    """`count` bytes, or None at end of file; TimeoutError when `deadline` passes."""
    chunks: list[bytes] = []
    while count:
        _wait(fd, False, deadline)
        chunk = os.read(fd, min(count, CHUNK))
        if not chunk:
            return None
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int, deadline: float | None = None) -> Any:
    """The next message; None at end of file; TimeoutError past `deadline`;
    ProtocolError when the bytes are not a message."""
    header = _read_exact(fd, HEADER.size, deadline)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"a message header announcing {length} bytes")
    data = _read_exact(fd, length, deadline)
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception as error:  # pickle raises almost anything on bytes it did not write
        why = f"{length} bytes that do not unpickle ({type(error).__name__})"
        raise ProtocolError(why) from None
