"""A readable text form of kernel IR, for debugging and documentation (not parsed back).

kernel exp2_add(b0: out float32 #5, b1: float32 #1)
  parallel i0_ < 8 (work 512):
    serial i1_ < 64:
      b0[64*i0_ + i1_] = add(exp2(b1[64*i0_ + i1_]), 1.0)
"""

from __future__ import annotations

from luminal.kernel import ir
from luminal.kernel.indexing import LOOP_MARK
from luminal.shape.expr import Expr


def dump(kernel: ir.Kernel) -> str:
    params = ", ".join(
        f"b{i}: {'out ' if p.output else ''}{p.dtype.name} #{p.node}"
        for i, p in enumerate(kernel.params)
    )
    dims = f" dims ({', '.join(kernel.dims)})" if kernel.dims else ""
    lines = [f"kernel {kernel.label}({params}){dims}"]
    for stmt in kernel.body:
        lines += _stmt(stmt, 1)
    return "\n".join(lines)


def _index(expr: Expr) -> str:
    return str(expr).replace(LOOP_MARK, "")


def _buffer(param: int | str) -> str:
    return param if isinstance(param, str) else f"b{param}"


def _type(dtype: ir.Type) -> str:
    return "index" if dtype == ir.INDEX else dtype.name


def value(v: ir.Value) -> str:
    """One value as text: ops as calls, loads as `bN[index]`, locals by name."""
    if isinstance(v, ir.Const):
        return repr(v.value)
    if isinstance(v, ir.IndexValue):
        return f"{_type(v.dtype)}({_index(v.expr)})"
    if isinstance(v, ir.Load):
        return f"{_buffer(v.param)}[{_index(v.index)}]"
    if isinstance(v, ir.Alu):
        return f"{v.op}({', '.join(value(a) for a in v.args)})"
    if isinstance(v, ir.Select):
        cond = _index(v.cond) if isinstance(v.cond, Expr) else value(v.cond)
        return f"select({cond}, {value(v.a)}, {value(v.b)})"
    if isinstance(v, ir.Cast):
        return f"cast<{_type(v.target)}>({value(v.value)})"
    if isinstance(v, ir.Var):
        return v.name
    if isinstance(v, ir.VectorLoad):
        return f"{_buffer(v.param)}[{_index(v.index)} : +{v.width}]"
    if isinstance(v, ir.Lane):
        return f"{value(v.vector)}.{v.lane}"
    return repr(v)


def _block(body: tuple[ir.Stmt, ...], depth: int) -> list[str]:
    return [line for stmt in body for line in _stmt(stmt, depth)]


def _stmt(s: ir.Stmt, depth: int) -> list[str]:
    pad = "  " * depth
    if isinstance(s, ir.Loop):
        extra = f" (work {_index(s.work)})" if s.work is not None else ""
        if s.reductions:
            accs = ", ".join(f"{r.name} = {r.op} {r.dtype.name}" for r in s.reductions)
            extra += f" [{accs}]"
        return [f"{pad}{s.kind} {s.var} < {_index(s.extent)}{extra}:", *_block(s.body, depth + 1)]
    if isinstance(s, ir.Declare):
        const = "const " if s.const else ""
        return [f"{pad}{const}{s.name}: {_type(s.dtype)} = {value(s.value)}"]
    if isinstance(s, ir.Assign):
        return [f"{pad}{s.name} = {value(s.value)}"]
    if isinstance(s, ir.Accumulate):
        return [f"{pad}{s.name} {s.op}= {value(s.value)}"]
    if isinstance(s, ir.Store):
        return [f"{pad}{_buffer(s.param)}[{_index(s.index)}] = {value(s.value)}"]
    if isinstance(s, ir.VectorStore):
        values = ", ".join(value(x) for x in s.values)
        return [f"{pad}{_buffer(s.param)}[{_index(s.index)} : +{len(s.values)}] = ({values})"]
    if isinstance(s, ir.Scope):
        return [f"{pad}scope:", *_block(s.body, depth + 1)]
    if isinstance(s, ir.If):
        cond = _index(s.cond) if isinstance(s.cond, Expr) else value(s.cond)
        lines = [f"{pad}if {cond}:", *_block(s.then, depth + 1)]
        return lines + ([f"{pad}else:", *_block(s.otherwise, depth + 1)] if s.otherwise else [])
    if isinstance(s, ir.CheckIndex):
        return [f"{pad}check 0 <= {s.name} < {_index(s.bound)} else fault, {s.action}"]
    if isinstance(s, ir.Call):
        counts = ", ".join(_index(c) for c in s.counts)
        params = ", ".join(f"b{p}" for p in s.params)
        return [f"{pad}call {s.function}({params}; counts {counts})"]
    if isinstance(s, ir.LibraryCall):
        args = ", ".join(_argument(a) for a in s.args)
        return [f"{pad}{'checked ' if s.reports_alloc else ''}call {s.function}({args})"]
    if isinstance(s, ir.Alloc):
        return [f"{pad}{s.name} = alloc {s.dtype.name}[{_index(s.elements)}]"]
    if isinstance(s, ir.Free):
        return [f"{pad}free {s.name}"]
    return [f"{pad}{s!r}"]


def _argument(arg: object) -> str:
    if isinstance(arg, Expr):
        return _index(arg)
    if isinstance(arg, ir.Pointer):
        return f"{_buffer(arg.param)} + {_index(arg.offset)}"
    return value(arg)
