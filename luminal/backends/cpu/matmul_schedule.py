"""The knobs of a generated matmul (`MatmulSchedule`) and the list of schedules worth
measuring on this kind of machine. What it fuses after the product (`Epilogue`) belongs
to the schedule layer: luminal/schedule/epilogue.py."""

from __future__ import annotations

from dataclasses import dataclass

from luminal.errors import LuminalError

PARALLEL_AXES = ("m", "n", "none")
REGISTERS = 32  # AVX-512 (and AVX-512VL for 256-bit vectors) has 32 vector registers


@dataclass(frozen=True)
class MatmulSchedule:
    """How a matmul kernel is blocked: register tile mr x nr, cache tiles mc x nc x kc
    (clamped to the problem), vector width, k-loop unroll, the OpenMP axis and packing.
    Without `pack_a`/`pack_b` full panels are read in place (only edges are packed);
    B is always packed when it is transposed (columns cannot be vector-loaded). The
    defaults are the best all-round schedule measured on the 2-core AVX-512 machine
    (0.95x to 1.54x numpy's OpenBLAS at 512^3, 1024^3 and 64x512x784, 1 and 2 threads,
    B plain or transposed)."""

    mr: int = 8
    nr: int = 32
    mc: int = 128
    nc: int = 512
    kc: int = 256
    vector_bits: int = 512
    unroll: int = 2
    parallel: str = "n"
    pack_a: bool = False
    pack_b: bool = True

    def __post_init__(self) -> None:
        if self.vector_bits not in (256, 512):
            raise LuminalError(f"MatmulSchedule.vector_bits must be 256 or 512, got {self}")
        if self.nr % self.lanes or self.nr <= 0 or self.mr <= 0:
            raise LuminalError(f"MatmulSchedule.nr must be a multiple of {self.lanes}: {self}")
        if self.mc % self.mr or self.nc % self.nr or min(self.mc, self.nc, self.kc) <= 0:
            raise LuminalError(f"MatmulSchedule: mc and nc must be multiples of mr, nr: {self}")
        if self.unroll not in (1, 2, 4, 8):
            raise LuminalError(f"MatmulSchedule.unroll must be 1, 2, 4 or 8: {self}")
        if self.parallel not in PARALLEL_AXES:
            raise LuminalError(f"MatmulSchedule.parallel must be one of {PARALLEL_AXES}: {self}")
        if self.mr * self.vectors + self.vectors + 1 > REGISTERS:
            raise LuminalError(f"MatmulSchedule {self.key()} needs more than 32 vector registers")

    @property
    def lanes(self) -> int:
        return self.vector_bits // 32

    @property
    def vectors(self) -> int:
        """Vectors per row of the register tile."""
        return self.nr // self.lanes

    def key(self) -> str:
        """A short stable name, for logs and cache keys."""
        packs = ("A" if self.pack_a else "") + ("B" if self.pack_b else "") or "none"
        return (
            f"mr{self.mr}_nr{self.nr}_mc{self.mc}_nc{self.nc}_kc{self.kc}_v{self.vector_bits}"
            f"_u{self.unroll}_par-{self.parallel}_pack-{packs}"
        )

    def __str__(self) -> str:
        return self.key()


# the search space: mr, nr, mc, nc, kc, vector_bits, unroll, parallel, pack_a, pack_b
_SPACE: list[tuple[int, int, int, int, int, int, int, str, bool, bool]] = [
    (8, 32, 96, 512, 256, 512, 2, "m", True, True),
    (12, 32, 96, 512, 256, 512, 2, "m", True, True),
    (14, 32, 84, 512, 256, 512, 2, "m", True, True),
    (6, 64, 96, 512, 256, 512, 2, "m", True, True),
    (4, 64, 96, 512, 256, 512, 2, "m", True, True),
    (8, 32, 64, 512, 256, 512, 2, "m", False, True),
    (12, 32, 60, 512, 256, 512, 2, "m", False, True),
    (14, 32, 56, 512, 256, 512, 2, "m", False, True),
    (6, 64, 60, 512, 256, 512, 2, "m", False, True),
    (4, 64, 64, 512, 256, 512, 2, "m", False, True),
    (8, 32, 128, 512, 256, 512, 2, "n", False, True),
    (12, 32, 120, 512, 256, 512, 2, "n", False, True),
    (4, 64, 128, 512, 256, 512, 2, "n", False, True),
    (8, 32, 256, 512, 384, 512, 2, "n", False, True),
    (8, 32, 128, 512, 256, 512, 4, "n", False, True),
    (8, 32, 32, 512, 256, 512, 2, "m", False, False),
    (12, 32, 24, 512, 256, 512, 2, "m", False, False),
    (4, 64, 32, 512, 256, 512, 2, "m", False, False),
    (12, 32, 96, 1024, 384, 512, 2, "n", True, True),
    (8, 32, 64, 1024, 128, 512, 2, "n", True, True),
    (8, 32, 64, 512, 384, 512, 2, "m", False, True),
    (8, 32, 64, 256, 512, 512, 2, "m", False, True),
    (8, 32, 32, 512, 256, 512, 4, "m", True, True),
    (8, 32, 64, 512, 256, 512, 4, "m", False, True),
    (14, 32, 112, 512, 256, 512, 1, "m", True, True),
    (8, 48, 64, 480, 256, 512, 2, "m", True, True),
    (6, 32, 48, 512, 256, 256, 2, "m", True, True),
    (12, 16, 96, 512, 256, 256, 2, "n", True, True),
    (8, 32, 64, 512, 256, 512, 2, "none", False, True),
]


def schedule_space() -> list[MatmulSchedule]:
    """Candidates for the search (29). Register tiles that fill the 32 registers; A read
    in place (its packing is a gather, B's a copy or a vector transpose) or packed; both
    OpenMP axes; a few cache-tile shapes; 256-bit vectors and k unrolls for contrast.
    Measured: A in place with B packed wins at 512^3 / 1024^3; nothing packed wins with
    64 rows and a plain B; `n` beats `m` when M is small (each thread packs and reads only
    its own B panels)."""
    return [MatmulSchedule(*row) for row in _SPACE]


def default_schedules() -> list[MatmulSchedule]:
    """The whole candidate list (kept as the name a search asks for first)."""
    return schedule_space()
