"""Length-prefixed pickle messages between the search and its measuring process.

A message with contiguous numpy arrays (the graph's weights above all) carries them out
of band (pickle protocol 5): after a tag and the pickle, in the same length-prefixed
frame, written to the pipe from the arrays' own memory and read back as arrays over the
received frame, so neither side copies them into a pickle. Any other message is the
plain pickle.

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
OUT_OF_BAND = b"\x00lm-oob\x00"  # starts a frame with buffers (a pickle starts with 0x80)
COUNTS = struct.Struct("<QQ")  # after the tag: the pickle's length, the number of buffers
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
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raws = [buffer.raw() for buffer in buffers]
    if not raws:
        pieces = [HEADER.pack(len(data)) + data]
    else:
        lengths = [HEADER.pack(raw.nbytes) for raw in raws]
        head = OUT_OF_BAND + COUNTS.pack(len(data), len(raws)) + b"".join(lengths)
        total = len(head) + len(data) + sum(raw.nbytes for raw in raws)
        pieces = [HEADER.pack(total) + head, data, *raws]
    for piece in pieces:
        _write_all(fd, memoryview(piece), deadline)


def _write_all(fd: int, view: memoryview, deadline: float | None) -> None:
    while view:
        _wait(fd, True, deadline)
        try:
            written = os.write(fd, view[:CHUNK])
        except BlockingIOError:
            continue
        view = view[written:]


def _read_exact(fd: int, count: int, deadline: float | None) -> bytearray | None:
    """`count` bytes read straight into one buffer; None at end of file; TimeoutError
    when `deadline` passes."""
    buffer = bytearray(count)
    view = memoryview(buffer)
    filled = 0
    while filled < count:
        _wait(fd, False, deadline)
        read = os.readv(fd, [view[filled : filled + CHUNK]])
        if not read:
            return None
        filled += read
    return buffer


def read_message(fd: int, deadline: float | None = None) -> Any:
    """The next message; None at end of file; TimeoutError past `deadline`;
    ProtocolError when the bytes are not a message."""
    header = _read_exact(fd, HEADER.size, deadline)
    if header is None:
        return None
    (length,) = HEADER.unpack(header)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"a message header announcing {length} bytes")
    frame = _read_exact(fd, length, deadline)
    if frame is None:
        return None
    try:
        return _decode(memoryview(frame))
    except Exception as error:  # pickle raises almost anything on bytes it did not write
        why = f"{length} bytes that do not unpickle ({type(error).__name__})"
        raise ProtocolError(why) from None


def _decode(frame: memoryview) -> Any:
    """A frame's message; its out-of-band buffers stay views of the frame."""
    if frame[: len(OUT_OF_BAND)] != OUT_OF_BAND:
        return pickle.loads(frame)
    position = len(OUT_OF_BAND)
    size, count = COUNTS.unpack_from(frame, position)
    position += COUNTS.size
    lengths = [HEADER.unpack_from(frame, position + i * HEADER.size)[0] for i in range(count)]
    position += count * HEADER.size
    data = frame[position : position + size]
    position += size
    buffers = []
    for length in lengths:
        buffers.append(frame[position : position + length])
        position += length
    if position != len(frame):
        raise ValueError("the buffers do not fill the frame")
    return pickle.loads(data, buffers=buffers)
