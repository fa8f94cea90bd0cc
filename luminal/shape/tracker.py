"""Views: how an edge reads a node's contiguous output buffer.

A `ShapeTracker` maps a logical index (one integer per logical dim) to a position in
the source buffer: `offset + sum(index[d] * strides[d])`, valid only where every
`mask[d]` range holds (outside, the view reads the padding value 0). Broadcast dims
have stride 0. Permute, expand, slice (with step), pad, pooling windows and most
reshapes are therefore free; a movement a single view cannot express returns None,
and the caller inserts a `Contiguous` node.

Each view also keeps the chain of movements that built it (`history`), starting from
the contiguous `source_shape`, so autograd can build exact adjoints (see
docs/views.md): the merged strides alone cannot be undone reliably.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from luminal.errors import ShapeError
from luminal.shape.expr import ONE, ZERO, Expr, ExprLike, logical_and, product, sym, var

Shape = tuple[Expr, ...]


# ---------------------------------------------------------------------------
# movement records (the chain kept for autograd)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Permute:
    axes: tuple[int, ...]


@dataclass(frozen=True)
class Expand:
    """Insert a broadcast dim of `size` at `axis`."""

    axis: int
    size: Expr


@dataclass(frozen=True)
class Slice:
    """Per dim (start, stop, step); start/stop already clipped to the dim."""

    ranges: tuple[tuple[Expr, Expr, int], ...]


@dataclass(frozen=True)
class Pad:
    """Per dim (before, after), zero filled."""

    padding: tuple[tuple[Expr, Expr], ...]


@dataclass(frozen=True)
class Reshape:
    input_shape: Shape
    shape: Shape


@dataclass(frozen=True)
class Pool:
    """Overlapping windows over the last dim (torch.Tensor.unfold with dilation)."""

    input_size: Expr
    kernel: int
    stride: int
    dilation: int


Movement = Permute | Expand | Slice | Pad | Reshape | Pool


def contiguous_strides(shape: Sequence[Expr]) -> Shape:
    strides: list[Expr] = []
    running = ONE
    for dim in reversed(shape):
        strides.append(running)
        running = running * dim
    return tuple(reversed(strides))


@dataclass(frozen=True)
class ShapeTracker:
    """An immutable view of a contiguous buffer of shape `source_shape`."""

    shape: Shape
    strides: Shape
    offset: Expr
    mask: tuple[tuple[Expr, Expr], ...] | None
    source_shape: Shape
    history: tuple[Movement, ...] = field(default=(), compare=True)

    # ---------------------------------------------------------------- creation
    @staticmethod
    def contiguous(shape: Sequence[ExprLike]) -> ShapeTracker:
        dims = tuple(sym(d) for d in shape)
        return ShapeTracker(dims, contiguous_strides(dims), ZERO, None, dims, ())

    # ---------------------------------------------------------------- queries
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def n_elements(self) -> Expr:
        """Number of logical elements."""
        return product(self.shape)

    def n_physical_elements(self) -> Expr:
        """Number of elements of the source buffer."""
        return product(self.source_shape)

    def is_contiguous(self) -> bool:
        """True when reading the view equals reading the buffer in order (no copy needed)."""
        if self.mask is not None or self.offset != 0:
            return False
        if self.n_elements() != self.n_physical_elements():
            return False
        expected = contiguous_strides(self.shape)
        return all(
            dim == 1 or stride == want
            for dim, stride, want in zip(self.shape, self.strides, expected, strict=True)
        )

    def is_identity(self) -> bool:
        """True when the view is the buffer's own shape, unchanged (memoised: the
        optimizer asks on every step and the answer costs symbolic arithmetic)."""
        known = self.__dict__.get("_identity")
        if known is None:
            known = self.shape == self.source_shape and self.is_contiguous()
            object.__setattr__(self, "_identity", known)
        return known

    def is_broadcast(self, axis: int) -> bool:
        return self.strides[axis] == 0 and self.shape[axis] != 1

    def is_padded(self) -> bool:
        return self.mask is not None

    def index_expression(self, indices: Sequence[ExprLike] | None = None) -> Expr:
        """Physical index of logical `indices` (default: unravelled from a flat var `z`)."""
        idx = self._indices(indices)
        total = self.offset
        for index, stride in zip(idx, self.strides, strict=True):
            total = total + index * stride
        return total

    def valid_expression(self, indices: Sequence[ExprLike] | None = None) -> Expr:
        """1 where the logical index reads real data, 0 where it reads padding."""
        if self.mask is None:
            return ONE
        idx = self._indices(indices)
        valid = ONE
        for index, (lo, hi), dim in zip(idx, self.mask, self.shape, strict=True):
            if lo != 0:
                valid = logical_and(valid, index.ge(lo))
            if hi != dim:
                valid = logical_and(valid, index.lt(hi))
        return valid

    def _indices(self, indices: Sequence[ExprLike] | None) -> list[Expr]:
        if indices is not None:
            if len(indices) != self.ndim:
                raise ShapeError(f"view of {self.ndim} dims indexed with {len(indices)} indices")
            return [sym(i) for i in indices]
        # the flat index z runs over [0, n_elements), so the outermost dim needs no modulo
        flat = var("z")
        out: list[Expr] = []
        outermost = True
        for dim, stride in zip(self.shape, contiguous_strides(self.shape), strict=True):
            if dim == 1:
                out.append(ZERO)
                continue
            out.append(flat // stride if outermost else (flat // stride) % dim)
            outermost = False
        return out

    def evaluate(self, env: dict[str, int]) -> ConcreteView:
        """Resolve every expression with the dimension map."""
        mask = None
        if self.mask is not None:
            mask = tuple((lo.evaluate(env), hi.evaluate(env)) for lo, hi in self.mask)
        return ConcreteView(
            shape=tuple(d.evaluate(env) for d in self.shape),
            strides=tuple(s.evaluate(env) for s in self.strides),
            offset=self.offset.evaluate(env),
            mask=mask,
        )

    # ---------------------------------------------------------------- movements
    def _with(self, movement: Movement, **changes: object) -> ShapeTracker:
        values = {
            "shape": self.shape,
            "strides": self.strides,
            "offset": self.offset,
            "mask": self.mask,
        }
        values.update(changes)
        mask = values["mask"]
        if mask is not None and all(
            lo == 0 and hi == dim for (lo, hi), dim in zip(mask, values["shape"], strict=True)
        ):
            mask = None
        return ShapeTracker(
            values["shape"],
            values["strides"],
            values["offset"],
            mask,
            self.source_shape,
            self.history + (movement,),
        )

    def permute(self, axes: Sequence[int]) -> ShapeTracker:
        axes = tuple(axes)
        assert sorted(axes) == list(range(self.ndim)), axes
        mask = None if self.mask is None else tuple(self.mask[a] for a in axes)
        return self._with(
            Permute(axes),
            shape=tuple(self.shape[a] for a in axes),
            strides=tuple(self.strides[a] for a in axes),
            mask=mask,
        )

    def expand(self, axis: int, size: ExprLike) -> ShapeTracker:
        """Insert a broadcast dim (stride 0) of `size` at `axis`."""
        size = sym(size)
        mask = None
        if self.mask is not None:
            mask = self.mask[:axis] + ((ZERO, size),) + self.mask[axis:]
        return self._with(
            Expand(axis, size),
            shape=self.shape[:axis] + (size,) + self.shape[axis:],
            strides=self.strides[:axis] + (ZERO,) + self.strides[axis:],
            mask=mask,
        )

    def slice(self, ranges: Sequence[tuple[ExprLike, ExprLike, int]]) -> ShapeTracker:
        """Keep `start:stop:step` per dim; start/stop must lie within the dim."""
        ranges = tuple((sym(a), sym(b), int(c)) for a, b, c in ranges)
        shape, strides, mask = [], [], []
        offset = self.offset
        for d, (start, stop, step) in enumerate(ranges):
            size = (stop - start).ceildiv(step) if step != 1 else stop - start
            offset = offset + start * self.strides[d]
            shape.append(size)
            strides.append(self.strides[d] * step)
            if self.mask is not None:
                lo, hi = self.mask[d]
                new_lo = (lo - start).max(0).ceildiv(step).min(size)
                new_hi = (hi - start).max(0).ceildiv(step).min(size).max(new_lo)
                mask.append((new_lo, new_hi))
        return self._with(
            Slice(ranges),
            shape=tuple(shape),
            strides=tuple(strides),
            offset=offset,
            mask=tuple(mask) if self.mask is not None else None,
        )

    def pad(self, padding: Sequence[tuple[ExprLike, ExprLike]]) -> ShapeTracker:
        """Add zero padding (before, after) per dim."""
        padding = tuple((sym(a), sym(b)) for a, b in padding)
        old_mask = self.mask or tuple((ZERO, d) for d in self.shape)
        shape, mask = [], []
        offset = self.offset
        for (before, after), dim, stride, (lo, hi) in zip(
            padding, self.shape, self.strides, old_mask, strict=True
        ):
            shape.append(dim + before + after)
            offset = offset - before * stride
            mask.append((lo + before, hi + before))
        return self._with(Pad(padding), shape=tuple(shape), offset=offset, mask=tuple(mask))

    def pool_last_dim(self, kernel: int, stride: int, dilation: int) -> ShapeTracker | None:
        """Windows over the last dim: (..., n) -> (..., windows, kernel); None if masked."""
        if self.mask is not None and self.mask[-1] != (ZERO, self.shape[-1]):
            return None
        size = self.shape[-1]
        windows = (size - dilation * (kernel - 1) - 1) // stride + 1
        base = self.strides[-1]
        mask = None
        if self.mask is not None:
            mask = self.mask[:-1] + ((ZERO, windows), (ZERO, sym(kernel)))
        return self._with(
            Pool(size, kernel, stride, dilation),
            shape=self.shape[:-1] + (windows, sym(kernel)),
            strides=self.strides[:-1] + (base * stride, base * dilation),
            mask=mask,
        )

    def reshape(self, new_shape: Sequence[ExprLike]) -> ShapeTracker | None:
        """The same elements in row-major order with `new_shape`, or None if a single view
        cannot express it (then a Contiguous copy is needed first)."""
        new_shape = tuple(sym(d) for d in new_shape)
        record = Reshape(self.shape, new_shape)
        if new_shape == self.shape:
            return self._with(record)
        if self.mask is None and self.offset == 0 and self.is_contiguous():
            return self._with(record, shape=new_shape, strides=contiguous_strides(new_shape))
        old = [
            (dim, stride, None if self.mask is None else self.mask[i])
            for i, (dim, stride) in enumerate(zip(self.shape, self.strides, strict=True))
            if dim != 1
        ]
        for i, dim in enumerate(self.shape):
            if dim == 1 and self.mask is not None and self.mask[i] != (ZERO, ONE):
                return None
        targets = [d for d in new_shape if d != 1]
        groups = _group_dims([d for d, _, _ in old], targets)
        if groups is None:
            return None
        new_strides: list[Expr] = []
        new_mask: list[tuple[Expr, Expr]] = []
        for old_range, new_range in groups:
            members = old[old_range[0] : old_range[1]]
            dims = targets[new_range[0] : new_range[1]]
            if len(members) == 1 and len(dims) == 1:
                _, stride, mask = members[0]
                new_strides.append(stride)
                new_mask.append(mask or (ZERO, dims[0]))
                continue
            if any(m is not None and m != (ZERO, d) for d, _, m in members):
                return None
            for (_, outer, _), (inner_dim, inner, _) in zip(members, members[1:], strict=False):
                if outer != inner * inner_dim:
                    return None
            running = members[-1][1]
            strides: list[Expr] = []
            for dim in reversed(dims):
                strides.append(running)
                running = running * dim
            new_strides.extend(reversed(strides))
            new_mask.extend((ZERO, d) for d in dims)
        strides_out: list[Expr] = []
        mask_out: list[tuple[Expr, Expr]] = []
        position = 0
        for dim in new_shape:
            if dim == 1:
                strides_out.append(ZERO)
                mask_out.append((ZERO, ONE))
            else:
                strides_out.append(new_strides[position])
                mask_out.append(new_mask[position])
                position += 1
        return self._with(
            record,
            shape=new_shape,
            strides=tuple(strides_out),
            mask=tuple(mask_out) if self.mask is not None else None,
        )

    def replay(self, movement: Movement) -> ShapeTracker | None:
        """Apply one recorded movement to this view (None when not expressible)."""
        if isinstance(movement, Permute):
            return self.permute(movement.axes)
        if isinstance(movement, Expand):
            return self.expand(movement.axis, movement.size)
        if isinstance(movement, Slice):
            return self.slice(movement.ranges)
        if isinstance(movement, Pad):
            return self.pad(movement.padding)
        if isinstance(movement, Reshape):
            return self.reshape(movement.shape)
        return self.pool_last_dim(movement.kernel, movement.stride, movement.dilation)

    def then(self, top: ShapeTracker) -> ShapeTracker | None:
        """The view reading this view's result through `top` (whose source shape is this
        view's shape), by replaying `top`'s movements; None when one view cannot express
        the composition. This is why views keep their history."""
        if tuple(top.source_shape) != tuple(self.shape):
            raise ShapeError(
                f"cannot compose views: {top} reads shape {top.source_shape}, "
                f"but the base view has shape {self.shape}"
            )
        result: ShapeTracker | None = self
        for movement in top.history:
            result = result.replay(movement)
            if result is None:
                return None
        return result

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        strides = ", ".join(str(s) for s in self.strides)
        text = f"View(shape=({dims}), strides=({strides})"
        if self.offset != 0:
            text += f", offset={self.offset}"
        if self.mask is not None:
            text += ", mask=" + ", ".join(f"[{lo}:{hi}]" for lo, hi in self.mask)
        return text + ")"


def _group_dims(
    old: list[Expr], new: list[Expr]
) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Split two dim lists into runs with equal products, or None when they do not line
    up. Works symbolically: a side is extended while its product divides the other's."""
    groups = []
    i = j = 0
    while i < len(old) or j < len(new):
        if i >= len(old) or j >= len(new):
            return None
        i0, j0 = i, j
        p_old, p_new = old[i], new[j]
        i, j = i + 1, j + 1
        while p_old != p_new:
            a, b = p_old.as_int(), p_new.as_int()
            if j < len(new) and (p_old % p_new) == 0:
                extend_new = True
            elif i < len(old) and (p_new % p_old) == 0:
                extend_new = False
            elif a is not None and b is not None:
                extend_new = b < a
            else:
                extend_new = i >= len(old)
            if extend_new and j < len(new):
                p_new = p_new * new[j]
                j += 1
            elif not extend_new and i < len(old):
                p_old = p_old * old[i]
                i += 1
            else:
                return None
        groups.append(((i0, i), (j0, j)))
    return groups


@dataclass(frozen=True)
class ConcreteView:
    """A ShapeTracker with every dimension resolved to an int."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    mask: tuple[tuple[int, int], ...] | None
