"""What a GPU accepts as one launch's geometry, checked before a kernel is built.

CUDA: a block holds at most 1024 threads (x and y at most 1024 each, z at most 64), a
grid at most 2^31 - 1 blocks on x and 65535 on y and z. Block sizes are static
(`Launch.local_size`), so a block over the limit is a CompileError when the program is
rendered. Grid sizes follow the dims at run time: the CUDA renderer writes the work-item
loops of axes 1 and 2 as grid-stride loops and the runtime launches at most
`MAX_GRID[axis]` blocks there (`grid`), so any size launches correctly. Metal has the
same 1024-thread threadgroup limit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from luminal.errors import CompileError, ExecutionError
from luminal.kernel.gpu import Launch

MAX_BLOCK = (1024, 1024, 64)  # threads per block on x, y, z
MAX_THREADS = 1024  # threads per block in all
MAX_GRID = (2**31 - 1, 65535, 65535)  # blocks on x, y, z


def check_block(launch: Launch, backend: str = "CUDA") -> None:
    """CompileError when `launch`'s block (work-group) is larger than a GPU runs."""
    local = tuple(launch.local_size)
    too_big = any(size > limit for size, limit in zip(local, MAX_BLOCK, strict=False))
    if len(local) > 3 or too_big or math.prod(local) > MAX_THREADS:
        raise CompileError(
            f"{backend}: kernel '{launch.kernel.label}' asks for blocks of {local} threads; "
            f"a block holds at most {MAX_THREADS} threads ({MAX_BLOCK} per axis)"
        )


def grid(name: str, global_size: Sequence[int], local: Sequence[int]) -> tuple[int, int, int]:
    """Blocks per axis for `global_size` work-items in blocks of `local`: y and z capped
    at 65535 (the kernels loop over the rest); ExecutionError past x's 2^31 - 1."""
    blocks = [int(g) // int(size) for g, size in zip(global_size, local, strict=True)]
    blocks += [1] * (3 - len(blocks))
    if len(blocks) != 3 or min(blocks) < 1:
        raise CompileError(f"CUDA launch: sizes {list(global_size)} are not 1 to 3 positive ints")
    if blocks[0] > MAX_GRID[0]:
        raise ExecutionError(
            f"CUDA: kernel '{name}' needs {blocks[0]} blocks on x; a grid holds {MAX_GRID[0]}"
        )
    return blocks[0], min(blocks[1], MAX_GRID[1]), min(blocks[2], MAX_GRID[2])
