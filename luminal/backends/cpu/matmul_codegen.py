"""Generated single-precision matmul kernels with schedule knobs, for a measured search.

`render_matmul` writes one C function for fixed sizes, BLIS style: B is packed into
kc x nr panels (a kc x nc block, the L2-resident operand), A into kc x mr panels, and a
register-blocked mr x nr microkernel does rank-1 updates with broadcast FMAs (GCC vector
extensions, 256- or 512-bit). The loops, outer to inner: jc (nc columns), pc (kc of the
sum), ic (mc rows), ir (an A micro-panel, kept in L1), jr (B micro-panels streamed from L2).
The epilogue (bias, residual, relu) runs on the last kc pass while the tile is still in
registers; edge tiles are computed into a scratch tile and merged with scalar code.
Either operand may instead be read in place (only partial edge panels are packed); a
transposed B is packed with lanes x lanes register transposes. `schedule_space` lists
candidates; `matmul_measure.bench_matmul_schedules` times them outside a graph, and
measured search (`matmul_options.py`) inside one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.backends.cpu.matmul_schedule import (
    MatmulSchedule,
    default_schedules,
    schedule_space,
)
from luminal.errors import LuminalError
from luminal.schedule.epilogue import Epilogue

__all__ = ["Epilogue", "MatmulSchedule", "default_schedules", "render_matmul", "schedule_space"]


# ------------------------------------------------------------------------------ rendering
@dataclass(frozen=True)
class _Problem:
    """Everything fixed at generation time (sizes, layouts, clamped tiles)."""

    name: str
    m: int
    n: int
    k: int
    a_trans: bool
    b_trans: bool
    lda: int
    ldb: int
    ldc: int
    ldr: int
    s: MatmulSchedule
    e: Epilogue

    def a_at(self, row: str, col: str) -> str:
        """C index of A[row, col] (A is logically M x K)."""
        return (
            f"({col}) * {self.lda} + ({row})" if self.a_trans else f"({row}) * {self.lda} + ({col})"
        )

    def b_at(self, row: str, col: str) -> str:
        """C index of B[row, col] (B is logically K x N)."""
        return (
            f"({col}) * {self.ldb} + ({row})" if self.b_trans else f"({row}) * {self.ldb} + ({col})"
        )


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _clamp(s: MatmulSchedule, m: int, n: int, k: int, b_trans: bool) -> MatmulSchedule:
    """Tiles no larger than the problem (smaller packing buffers), B packed when transposed."""
    return replace(
        s,
        mc=min(s.mc, _round_up(m, s.mr)),
        nc=min(s.nc, _round_up(n, s.nr)),
        kc=min(s.kc, k),
        pack_b=s.pack_b or b_trans,
    )


def render_matmul(
    name: str,
    m: int,
    n: int,
    k: int,
    a_trans: bool,
    b_trans: bool,
    lda: int,
    ldb: int,
    ldc: int,
    schedule: MatmulSchedule,
    epilogue: Epilogue | None = None,
    ldr: int | None = None,
) -> str:
    """C for `long long name(float* restrict c, const float* restrict a, const float*
    restrict b, const float* bias, const float* residual)`: c = act(a @ b + bias +
    residual), row-major; A is M x K (stored K x M when `a_trans`), B is K x N (stored
    N x K when `b_trans`). It returns 0, or the bytes of packing scratch it could not
    allocate (then c is unwritten)."""
    epilogue = epilogue or Epilogue()
    if min(m, n) < 1 or k < 0:
        raise LuminalError(f"render_matmul {name}: sizes must be positive, got {m}x{n}x{k}")
    ldr = n if ldr is None else ldr
    a_cols, b_cols = (m if a_trans else k), (k if b_trans else n)
    for label, ld, cols in (("lda", lda, a_cols), ("ldb", ldb, b_cols), ("ldc", ldc, n)) + (
        (("ldr", ldr, n),) if epilogue.residual else ()
    ):
        if ld < cols:
            raise LuminalError(f"render_matmul {name}: {label}={ld} is less than the row ({cols})")
    s = _clamp(schedule, m, n, max(k, 1), b_trans)
    p = _Problem(name, m, n, k, a_trans, b_trans, lda, ldb, ldc, ldr, s, epilogue)
    header = _header(p, schedule)
    if k == 0:
        return header + _render_empty_sum(p)
    parts = [header, _types(p), _pack_a(p), _pack_b(p)]
    parts += [_micro(p, variant) for variant in _variants(p)]
    parts += [_block(p), _driver(p)]
    return "\n".join(parts)


def _header(p: _Problem, requested: MatmulSchedule) -> str:
    a = f"A {p.m}x{p.k}" + (f" stored transposed (lda={p.lda})" if p.a_trans else f" lda={p.lda}")
    b = f"B {p.k}x{p.n}" + (f" stored transposed (ldb={p.ldb})" if p.b_trans else f" ldb={p.ldb}")
    s = p.s
    return (
        f"/* luminal matmul {p.name}: C {p.m}x{p.n} (ldc={p.ldc}) = {p.e.describe()}\n"
        f" * {a}; {b}.\n"
        f" * schedule {requested.key()}\n"
        f" *   register tile {s.mr}x{s.nr} ({s.vectors} x {s.vector_bits}-bit vectors per row), "
        f"cache tiles mc={s.mc} nc={s.nc} kc={s.kc},\n"
        f" *   k loop unrolled {s.unroll}, OpenMP over {s.parallel}, "
        f"A {'packed' if s.pack_a else 'read in place'}, "
        f"B {'packed' if s.pack_b else 'read in place'} */\n"
        "#include <stdlib.h>\n#include <omp.h>\n"
    )


def _render_empty_sum(p: _Problem) -> str:
    """K = 0: the product is zero, only the epilogue remains."""
    return (
        f"long long {p.name}(float* restrict c, const float* restrict a,\n"
        f"        const float* restrict b, const float* bias, const float* residual)\n{{\n"
        "    (void)a; (void)b; (void)bias; (void)residual;\n"
        f"    for (long i = 0; i < {p.m}; i++) {{\n"
        f"        for (long j = 0; j < {p.n}; j++) {{\n"
        "            float v = 0.0f;\n"
        f"{_scalar_epilogue(p, 'i', 'j', 'bias', 'residual', 12)}"
        f"            c[i * {p.ldc} + j] = v;\n"
        "        }\n    }\n    return 0;\n}\n"
    )


def _scalar_epilogue(p: _Problem, i: str, j: str, bias: str, res: str, indent: int) -> str:
    pad = " " * indent
    lines = []
    if p.e.bias == "row":
        lines.append(f"v += {bias}[{j}];")
    elif p.e.bias == "col":
        lines.append(f"v += {bias}[{i}];")
    if p.e.residual:
        lines.append(f"v += {res}[({i}) * {p.ldr} + ({j})];")
    if p.e.activation == "relu":
        lines.append("v = v < 0.0f ? 0.0f : v;")
    return "".join(f"{pad}{line}\n" for line in lines)


def _types(p: _Problem) -> str:
    size = p.s.vector_bits // 8
    return (
        f"typedef float {p.name}_vf __attribute__((vector_size({size})));\n"
        f"typedef float {p.name}_vfu __attribute__((vector_size({size}), aligned(4)));\n"
        f"typedef int {p.name}_vi __attribute__((vector_size({size})));\n\n"
        f"/* relu that keeps NaN: clear the lanes that compare below zero */\n"
        f"static inline {p.name}_vf {p.name}_relu({p.name}_vf x)\n{{\n"
        f"    {p.name}_vi negative = x < ({p.name}_vf){{0}};\n"
        f"    return ({p.name}_vf)(({p.name}_vi)x & ~negative);\n}}\n"
    )


def _pack_a(p: _Problem) -> str:
    mr = p.s.mr
    return (
        f"/* one A micro-panel: rows i0..i0+rows of A, k = pc..pc+kc, stored k-major\n"
        f"   (dst[p * {mr} + r]) with rows past `rows` zero */\n"
        f"static void {p.name}_pack_a(float* restrict dst, const float* restrict a, long i0,\n"
        "        long rows, long pc, long kc)\n{\n"
        "    for (long p = 0; p < kc; p++) {\n"
        f"        for (long r = 0; r < rows; r++) dst[p * {mr} + r] = "
        f"a[{p.a_at('i0 + r', 'pc + p')}];\n"
        f"        for (long r = rows; r < {mr}; r++) dst[p * {mr} + r] = 0.0f;\n"
        "    }\n}\n"
    )


def _pack_b(p: _Problem) -> str:
    nr, lanes = p.s.nr, p.s.lanes
    full = (
        "        for (long p = 0; p < kc; p++)\n"
        f"            for (long j = 0; j < {nr}; j++) dst[p * {nr} + j] = "
        f"b[{p.b_at('pc + p', 'j0 + j')}];\n"
        "        return;\n"
    )
    if p.b_trans:  # lanes x lanes blocks transposed in registers, the k remainder scalar
        full = (
            f"        long p0 = 0;\n        for (; p0 + {lanes} <= kc; p0 += {lanes})\n"
            f"            for (long g = 0; g < {nr}; g += {lanes})\n"
            f"                {p.name}_transpose(dst + p0 * {nr} + g, {nr}, "
            f"b + (j0 + g) * {p.ldb} + pc + p0, {p.ldb});\n"
            "        for (long p = p0; p < kc; p++)\n"
            f"            for (long j = 0; j < {nr}; j++) dst[p * {nr} + j] = "
            f"b[{p.b_at('pc + p', 'j0 + j')}];\n"
            "        return;\n"
        )
    return (
        (_transpose(p) if p.b_trans else "")
        + f"/* one B micro-panel: columns j0..j0+cols of B, k = pc..pc+kc, stored k-major\n"
        f"   (dst[p * {nr} + j]) with columns past `cols` zero */\n"
        f"static void {p.name}_pack_b(float* restrict dst, const float* restrict b, long j0,\n"
        "        long cols, long pc, long kc)\n{\n"
        f"    if (cols == {nr}) {{\n{full}    }}\n"
        "    for (long p = 0; p < kc; p++) {\n"
        f"        for (long j = 0; j < cols; j++) dst[p * {nr} + j] = "
        f"b[{p.b_at('pc + p', 'j0 + j')}];\n"
        f"        for (long j = cols; j < {nr}; j++) dst[p * {nr} + j] = 0.0f;\n"
        "    }\n}\n"
    )


def _transpose(p: _Problem) -> str:
    """A lanes x lanes block transpose in registers (log2(lanes) butterfly stages of
    two-input shuffles: stage h swaps bit h of the row and column index), for packing a
    transposed B at vector speed instead of one gathered float at a time."""
    lanes, v, w, vi = p.s.lanes, p.name + "_vf", p.name + "_vfu", p.name + "_vi"
    out = [
        f"/* dst[r * ldd + c] = src[c * lds + r] for a {lanes}x{lanes} block */",
        f"static inline void {p.name}_transpose(float* restrict dst, long ldd,",
        "        const float* restrict src, long lds)",
        "{",
    ]
    rows = [f"r{i}" for i in range(lanes)]
    for i, row in enumerate(rows):
        out.append(f"    {v} {row} = *(const {w}*)(src + {i} * lds);")
    out.append(f"    {v} t;")
    h = lanes // 2
    while h >= 1:
        low = ", ".join(str(c if not c & h else lanes + c - h) for c in range(lanes))
        high = ", ".join(str(lanes + c if c & h else c + h) for c in range(lanes))
        out.append(f"    /* swap bit {h} of row and column: rows i and i + {h} exchange halves */")
        out.append(f"    const {vi} low{h} = {{{low}}};")
        out.append(f"    const {vi} high{h} = {{{high}}};")
        for i in range(lanes):
            if i & h:
                continue
            x, y = rows[i], rows[i + h]
            out.append(f"    t = {x}; {x} = __builtin_shuffle(t, {y}, low{h});")
            out.append(f"    {y} = __builtin_shuffle(t, {y}, high{h});")
        h //= 2
    for i, row in enumerate(rows):
        out.append(f"    *({w}*)(dst + {i} * ldd) = {row};")
    out.append("}\n")
    return "\n".join(out) + "\n"


def _variants(p: _Problem) -> list[tuple[bool, bool]]:
    """(A packed, B packed) microkernels needed: the schedule's own for full tiles, packed
    operands for the edge tiles of an unpacked operand."""
    full = (p.s.pack_a, p.s.pack_b)
    a_modes = {p.s.pack_a} | ({True} if p.m % p.s.mr else set())
    b_modes = {p.s.pack_b} | ({True} if p.n % p.s.nr else set())
    return [full] + sorted({(a, b) for a in a_modes for b in b_modes} - {full})


def _variant_name(p: _Problem, variant: tuple[bool, bool]) -> str:
    return f"{p.name}_micro_{'p' if variant[0] else 'd'}{'p' if variant[1] else 'd'}"


def _statements(pad: str, statements: list[str], width: int = 100) -> list[str]:
    """C statements packed several to a line (one register-tile row reads as one line)
    without passing `width` columns."""
    lines: list[str] = []
    for statement in statements:
        if lines and len(lines[-1]) + 1 + len(statement) <= width:
            lines[-1] += " " + statement
        else:
            lines.append(pad + statement)
    return lines


def _micro(p: _Problem, variant: tuple[bool, bool]) -> str:
    """The mr x nr register-tile kernel: kc rank-1 updates (one broadcast of A per row, nr/W
    vector loads of B), then the C tile is accumulated into c (or stored on the first kc
    pass) with the epilogue applied on the last pass."""
    s, v, w = p.s, p.name + "_vf", p.name + "_vfu"
    a_packed, b_packed = variant
    a_ks, a_rs = (s.mr, 1) if a_packed else ((p.lda, 1) if p.a_trans else (1, p.lda))
    b_ks, b_type = (s.nr, v) if b_packed else (p.ldb, w)
    acc = [[f"c{r}_{j}" for j in range(s.vectors)] for r in range(s.mr)]
    inline = "always_inline" if variant == (s.pack_a, s.pack_b) else "noinline"
    out = [
        f"/* {s.mr}x{s.nr} tile; A {'packed' if a_packed else 'in place'}, "
        f"B {'packed' if b_packed else 'in place'} */",
        f"static inline __attribute__(({inline})) void {_variant_name(p, variant)}(long kc,",
        "        const float* restrict ap, const float* restrict bp, float* restrict c, long ldc,",
        "        int first, int last, const float* restrict bias, const float* restrict res)",
        "{",
    ]
    for row in acc:
        out += _statements("    ", [f"{v} {name} = {{0}};" for name in row])
    out += [f"    #pragma GCC unroll {s.unroll}", "    for (long p = 0; p < kc; p++) {"]
    for j in range(s.vectors):
        out.append(f"        const {v} b{j} = *(const {b_type}*)(bp + p * {b_ks} + {j * s.lanes});")
    for r in range(s.mr):
        a_index = f"p * {a_ks} + {r * a_rs}" if a_ks != 1 else f"p + {r * a_rs}"
        out.append(f"        const float a{r} = ap[{a_index}];")
        out += _statements("        ", [f"{acc[r][j]} += a{r} * b{j};" for j in range(s.vectors)])
    out += ["    }", "    if (!first) {"]
    for r in range(s.mr):
        loads = [
            f"{acc[r][j]} += *(const {w}*)(c + {r} * ldc + {j * s.lanes});"
            for j in range(s.vectors)
        ]
        out += _statements("        ", loads)
    out.append("    }")
    if p.e != Epilogue():
        out.append("    if (last) {")
        out += _vector_epilogue(p, acc)
        out.append("    }")
    else:
        out.append("    (void)last; (void)bias; (void)res;")
    for r in range(s.mr):
        stores = [
            f"*({w}*)(c + {r} * ldc + {j * s.lanes}) = {acc[r][j]};" for j in range(s.vectors)
        ]
        out += _statements("    ", stores)
    out.append("}\n")
    return "\n".join(out)


def _vector_epilogue(p: _Problem, acc: list[list[str]]) -> list[str]:
    s, w, pad = p.s, p.name + "_vfu", "        "
    lines = []
    if p.e.bias == "row":
        for j in range(s.vectors):
            lines.append(f"{pad}const {p.name}_vf bias{j} = *(const {w}*)(bias + {j * s.lanes});")
        for r in range(s.mr):
            lines += _statements(pad, [f"{acc[r][j]} += bias{j};" for j in range(s.vectors)])
    elif p.e.bias == "col":
        for r in range(s.mr):
            lines += _statements(pad, [f"{acc[r][j]} += bias[{r}];" for j in range(s.vectors)])
    if p.e.residual:
        for r in range(s.mr):
            adds = [
                f"{acc[r][j]} += *(const {w}*)(res + {r * p.ldr + j * s.lanes});"
                for j in range(s.vectors)
            ]
            lines += _statements(pad, adds)
    if p.e.activation == "relu":
        for r in range(s.mr):
            relus = [f"{acc[r][j]} = {p.name}_relu({acc[r][j]});" for j in range(s.vectors)]
            lines += _statements(pad, relus)
    return lines


def _block(p: _Problem) -> str:
    """The macro-kernel: every register tile of one packed (mc x kc) x (kc x nc) block,
    columns [jr0, jr1) of it; edge tiles go through a scratch tile."""
    s, n = p.s, p.name
    a_direct = f"a + {p.a_at('i', 'pc')}"
    b_direct = f"b + {p.b_at('pc', 'j')}"
    full_call = _variant_name(p, (s.pack_a, s.pack_b))
    a_ptr = "apack + ir * kc" if s.pack_a else f"rows < {s.mr} ? apack + ir * kc : {a_direct}"
    b_ptr = "bpack + jr * kc" if s.pack_b else f"cols < {s.nr} ? bpack + jr * kc : {b_direct}"
    bias_at = {"none": "0", "row": "bias + j", "col": "bias + i"}[p.e.bias]
    res_at = f"res + i * {p.ldr} + j" if p.e.residual else "0"
    calls = [
        (
            _edge_condition(p, variant),
            f"{_variant_name(p, variant)}(kc, ap, bp, tile, {s.nr}, 1, 0, 0, 0);",
        )
        for variant in _variants(p)
    ]
    edge_call = (
        calls[0][1]
        if len(calls) == 1
        else "\n            else ".join(f"if ({condition}) {call}" for condition, call in calls)
    )
    return (
        "/* register tiles of the block rows ic..ic+mc, columns jc+jr0..jc+jr1, k = pc..pc+kc */\n"
        f"static void {n}_block(float* restrict c, const float* restrict a,\n"
        "        const float* restrict b, const float* restrict apack,\n"
        "        const float* restrict bpack,\n"
        "        long ic, long mc, long jc, long nc, long jr0, long jr1, long pc, long kc,\n"
        "        int first, int last, const float* bias, const float* res)\n{\n"
        "    (void)a; (void)b; (void)bias; (void)res; (void)nc;\n"
        f"    for (long ir = 0; ir < mc; ir += {s.mr}) {{\n"
        f"        const long rows = mc - ir < {s.mr} ? mc - ir : {s.mr};\n"
        "        const long i = ic + ir;\n"
        f"        const float* ap = {a_ptr};\n"
        f"        for (long jr = jr0; jr < jr1; jr += {s.nr}) {{\n"
        f"            const long cols = jr1 - jr < {s.nr} ? jr1 - jr : {s.nr};\n"
        "            const long j = jc + jr;\n"
        f"            const float* bp = {b_ptr};\n"
        f"            float* ct = c + i * {p.ldc} + j;\n"
        f"            if (rows == {s.mr} && cols == {s.nr}) {{\n"
        f"                {full_call}(kc, ap, bp, ct, {p.ldc}, first, last, {bias_at}, {res_at});\n"
        "                continue;\n"
        "            }\n"
        f"            float tile[{s.mr * s.nr}] __attribute__((aligned(64)));\n"
        f"            {edge_call}\n"
        "            for (long r = 0; r < rows; r++) {\n"
        "                for (long q = 0; q < cols; q++) {\n"
        f"                    float v = tile[r * {s.nr} + q];\n"
        f"                    if (!first) v += ct[r * {p.ldc} + q];\n"
        "                    if (last) {\n"
        f"{_scalar_epilogue(p, 'i + r', 'j + q', 'bias', 'res', 24)}"
        "                    }\n"
        f"                    ct[r * {p.ldc} + q] = v;\n"
        "                }\n            }\n        }\n    }\n}\n"
    )


def _edge_condition(p: _Problem, variant: tuple[bool, bool]) -> str:
    """When an edge tile uses this microkernel: an operand read in place is packed exactly
    for the partial panels."""
    terms = []
    for packed, always, size, limit in (
        (variant[0], p.s.pack_a, "rows", p.s.mr),
        (variant[1], p.s.pack_b, "cols", p.s.nr),
    ):
        if not always:
            terms.append(f"{size} {'<' if packed else '=='} {limit}")
    return " && ".join(terms) or "1"


def _driver(p: _Problem) -> str:
    """The exported function: buffers, the jc / pc / ic loops, packing, and the OpenMP
    split (`m`: the ic blocks, each thread packing its own A; `n`: each thread a share of
    the B micro-panels of every block, both operands packed together)."""
    s, n = p.s, p.name
    a_bytes, b_bytes = _round_up(4 * s.mc * s.kc, 64), _round_up(4 * s.nc * s.kc, 64)
    need_b = s.pack_b or p.n % s.nr != 0
    need_a = s.pack_a or p.m % s.mr != 0
    omp = s.parallel != "none"

    def pragma(text: str) -> str:
        return f"#pragma omp {text}" if omp else ""

    def pack_loop(
        kind: str, count: str, step: int, dst: str, base: str, lo: str = "0"
    ) -> list[str]:
        """Pack the micro-panels of one operand block (all of them, or only a partial last
        one when the operand is read in place)."""
        size, always = ("rows", s.pack_a) if kind == "a" else ("cols", s.pack_b)
        hi = "hi" if lo != "0" else count
        return [
            f"for (long q = {lo}; q < {hi}; q += {step}) {{",
            f"    const long {size} = {count} - q < {step} ? {count} - q : {step};",
            f"    {'' if always else f'if ({size} < {step}) '}"
            f"{n}_pack_{kind}({dst} + q * kc, {kind}, {base} + q, {size}, pc, kc);",
            "}",
        ]

    body = []
    if s.parallel != "n":  # rows per block: mc, or fewer so that every thread gets a block
        threads = "omp_get_num_threads()" if omp else "1"
        body += [
            f"const long share = ({p.m} + {threads} - 1) / {threads};",
            f"const long mstep = share < {s.mc} ? (share + {s.mr - 1}) / {s.mr} * {s.mr} : {s.mc};",
        ]
    body += [
        f"for (long jc = 0; jc < {p.n}; jc += {s.nc}) {{",
        f"    const long nc = {p.n} - jc < {s.nc} ? {p.n} - jc : {s.nc};",
    ]
    if s.parallel == "n":  # this thread's B micro-panels: it packs and uses only those
        body += [
            f"    const long panels = (nc + {s.nr - 1}) / {s.nr};",
            "    const long t = omp_get_thread_num(), threads = omp_get_num_threads();",
            f"    const long lo = panels * t / threads * {s.nr};",
            f"    const long hi_ = panels * (t + 1) / threads * {s.nr}, hi = hi_ < nc ? hi_ : nc;",
        ]
    body += [
        f"    for (long pc = 0; pc < {p.k}; pc += {s.kc}) {{",
        f"        const long kc = {p.k} - pc < {s.kc} ? {p.k} - pc : {s.kc};",
        f"        const int first = pc == 0, last = pc + kc == {p.k};",
    ]
    inner: list[str] = []
    block_args = "first, last, bias, residual"
    if s.parallel == "n":
        if need_b:
            inner += pack_loop("b", "nc", s.nr, "bpack", "jc", lo="lo")
        inner += [
            f"for (long ic = 0; ic < {p.m}; ic += {s.mc}) {{",
            f"    const long mc = {p.m} - ic < {s.mc} ? {p.m} - ic : {s.mc};",
        ]
        if need_a:
            inner += ["    " + pragma("for schedule(static)")]
            inner += ["    " + x for x in pack_loop("a", "mc", s.mr, "apack", "ic")]
        inner += [
            f"    {n}_block(c, a, b, apack, bpack, ic, mc, jc, nc, lo, hi, pc, kc,",
            f"            {block_args});",
            "    " + pragma("barrier"),
            "}",
        ]
    else:
        if need_b:
            inner += [pragma("for schedule(static)")]
            inner += pack_loop("b", "nc", s.nr, "bpack", "jc")
        inner += [
            pragma("for schedule(static)"),
            f"for (long ic = 0; ic < {p.m}; ic += mstep) {{",
            f"    const long mc = {p.m} - ic < mstep ? {p.m} - ic : mstep;",
        ]
        if need_a:
            inner += ["    " + x for x in pack_loop("a", "mc", s.mr, "apack", "ic")]
        inner += [
            f"    {n}_block(c, a, b, apack, bpack, ic, mc, jc, nc, 0, nc, pc, kc,",
            f"            {block_args});",
            "}",
        ]
    body += ["        " + x for x in inner if x] + ["    }", "}"]
    # A scratch: one block per thread under `m` (each packs its own rows), else one shared
    copies = " * (size_t)omp_get_max_threads()" if s.parallel == "m" else ""
    a_size = f"(size_t){a_bytes}{copies}"
    a_alloc = f"(float*)aligned_alloc(64, {a_size})" if need_a else "0"
    b_alloc = f"(float*)aligned_alloc(64, {b_bytes})" if need_b else "0"
    # a failed allocation returns the bytes asked for (the caller reports them), else 0
    failed = [name for name, need in (("bpack", need_b), ("apacks", need_a)) if need]
    asked = " + ".join([*([a_size] if need_a else []), *([f"{b_bytes}"] if need_b else [])])
    check = (
        [
            f"    if ({' || '.join('!' + name for name in failed)}) {{",
            f"        free(apacks); free(bpack); return (long long)({asked});",
            "    }",
        ]
        if failed
        else []
    )
    mine = (
        f" + (size_t)omp_get_thread_num() * {a_bytes // 4}" if s.parallel == "m" and need_a else ""
    )
    lines = [
        f"long long {n}(float* restrict c, const float* restrict a, const float* restrict b,",
        "        const float* bias, const float* residual)",
        "{",
        f"    float* bpack = {b_alloc};",
        f"    float* apacks = {a_alloc};",
        *check,
        *(["    #pragma omp parallel"] if omp else []),
        "    {",
        f"        float* apack = apacks{mine};",
        *["        " + x for x in body],
        "    }",
        "    free(apacks);",
        "    free(bpack);",
        "    return 0;",
        "}",
    ]
    return "\n".join(lines) + "\n"
