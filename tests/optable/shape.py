"""Rows for the shape family: the primitives (slice, slice_update, cat, flip; reshape, expand
and permute have rows in core.py) and the composites built on them."""
from . import In, OpCase

ALL_FLOATS = ("float32", "float64", "float16", "bfloat16")

CASES = [
    # permute composites
    OpCase("permute", lambda m, a: a.transpose(0, -1), [In((2, 3, 4))], "transpose",
           dtypes=ALL_FLOATS),
    OpCase("permute", lambda m, a: m.swapaxes(a, 1, 2), [In((2, 3, 4))], "swapaxes"),
    OpCase("permute", lambda m, a: a.t() * 2, [In((3, 4))], "t"),
    OpCase("permute", lambda m, a: m.t(a) + 1, [In((4,))], "t-1d",
           extra={"runs_no_op": "t() of a 1-D tensor returns it unchanged"}),
    OpCase("permute", lambda m, a: a.T, [In((3, 4))], "T"),
    OpCase("permute", lambda m, a: a.mT, [In((5, 2, 3))], "mT"),
    OpCase("permute", lambda m, a: m.movedim(a, 0, -1), [In((2, 3, 4))], "movedim"),
    OpCase("permute", lambda m, a: a.movedim((0, 1), (2, 0)), [In((2, 3, 4))], "movedim-2"),
    OpCase("permute", lambda m, a: a.transpose(0, 1), [In((2, 3), "int")], "int", grad=False),
    # reshape composites
    OpCase("reshape", lambda m, a: a.squeeze(), [In((1, 3, 1, 2))], "squeeze",
           dtypes=ALL_FLOATS),
    OpCase("reshape", lambda m, a: a.squeeze(-2), [In((1, 3, 1, 2))], "squeeze-dim"),
    OpCase("reshape", lambda m, a: m.squeeze(a, (0, 1)), [In((1, 3, 1, 2))], "squeeze-tuple"),
    OpCase("reshape", lambda m, a: a.unsqueeze(-1), [In((2, 3))], "unsqueeze"),
    OpCase("reshape", lambda m, a: m.unsqueeze(a, 0), [In(())], "unsqueeze-0d"),
    OpCase("reshape", lambda m, a: a.flatten(), [In((2, 3, 4))], "flatten",
           dtypes=("float32", "bfloat16")),
    OpCase("reshape", lambda m, a: m.flatten(a, 1, -2), [In((2, 3, 4, 5))], "flatten-mid"),
    OpCase("reshape", lambda m, a: a.unflatten(-1, (2, -1)), [In((3, 8))], "unflatten"),
    OpCase("reshape", lambda m, a, b: a.view_as(b) + b, [In((2, 6)), In((3, 4))], "view_as"),
    OpCase("reshape", lambda m, a: a.contiguous().reshape(-1), [In((2, 3), "int")], "int",
           grad=False),
    OpCase("expand", lambda m, a, b: a.expand_as(b) * b, [In((3, 1)), In((2, 3, 4))],
           "expand_as"),
    OpCase("expand", lambda m, a: a.repeat(2, 1, 3), [In((3, 2))], "repeat",
           dtypes=ALL_FLOATS),
    OpCase("expand", lambda m, a: m.tile(a, (2,)), [In((2, 3))], "tile"),
    OpCase("expand", lambda m, a: a.repeat(2, 2), [In((2, 3), "int")], "repeat-int",
           grad=False),
    # slice and its composites
    OpCase("slice", lambda m, a: a[1:3, ::2], [In((4, 5))], "basic", dtypes=ALL_FLOATS),
    OpCase("slice", lambda m, a: a[..., -3:, 1], [In((2, 4, 5))], "negative"),
    OpCase("slice", lambda m, a: a[None, 1, :, 2:100:3], [In((3, 4, 8))], "none-int"),
    OpCase("slice", lambda m, a: m.narrow(a, -1, 1, 2), [In((3, 4))], "narrow"),
    OpCase("select", lambda m, a: m.select(a, 1, -1), [In((3, 4, 2))], "select"),
    OpCase("select", lambda m, a: a[2], [In((4, 3))], "getitem-int"),
    OpCase("select", lambda m, a: a[-1] * 2, [In((5,))], "to-0-d", dtypes=ALL_FLOATS),
    OpCase("slice", lambda m, a: m.split(a, 2, dim=1), [In((3, 5))], "split-int",
           dtypes=("float32", "float16")),
    OpCase("slice", lambda m, a: a.split([1, 3, 1], -1), [In((2, 5))], "split-list"),
    OpCase("slice", lambda m, a: m.chunk(a, 3), [In((7, 2))], "chunk"),
    OpCase("slice", lambda m, a: a.chunk(4, dim=-1), [In((2, 6))], "chunk-fewer"),
    OpCase("select", lambda m, a: m.unbind(a, 1), [In((2, 3))], "unbind"),
    OpCase("slice", lambda m, a: a[1:, 0], [In((3, 4), "int")], "int", grad=False),
    OpCase("slice_update", lambda m, a: m.nn.functional.pad(a, (1, 2)), [In((2, 3))],
           "pad-last", dtypes=ALL_FLOATS),
    OpCase("slice_update", lambda m, a: m.nn.functional.pad(a, (0, 1, 2, 0), value=-1.5),
           [In((2, 3, 4))], "pad-2d-value"),
    OpCase("slice_update", lambda m, a: m.nn.functional.pad(a, (-1, 2, 1, -1)),
           [In((3, 4))], "pad-negative"),
    OpCase("slice_update", lambda m, a: m.nn.functional.pad(a, (1, 1), value=7),
           [In((2, 3), "int")], "pad-int", grad=False),
    # cat and stack
    OpCase("cat", lambda m, a, b: m.cat([a, b], dim=1), [In((2, 3)), In((2, 1))],
           dtypes=ALL_FLOATS),
    OpCase("cat", lambda m, a, b, c: m.cat((a, b, c), -1),
           [In((2, 1, 2)), In((2, 1, 3)), In((2, 1, 1))], "three"),
    OpCase("cat", lambda m, a, b: m.concat([a, b]), [In((2, 3)), In((1, 3), "int")],
           "promote"),
    OpCase("cat", lambda m, a, b: m.cat([a, b]), [In((2,), "int"), In((3,), "int",
                                                                         dtype="int32")],
           "int", grad=False),
    OpCase("stack", lambda m, a, b: m.stack([a, b]), [In((2, 3)), In((2, 3))], "stack",
           dtypes=ALL_FLOATS),
    OpCase("stack", lambda m, a, b, c: m.stack([a, b, c], dim=-1),
           [In((2, 3)), In((2, 3)), In((2, 3))], "stack-last"),
    OpCase("stack", lambda m, a, b: m.stack([a, b], 1), [In((3,)), In((3,), "int")],
           "promote"),
    OpCase("cat", lambda m, a: m.roll(a, 1, 0), [In((4, 3))], "roll"),
    OpCase("cat", lambda m, a: a.roll((-1, 5), (1, 0)), [In((3, 4))], "roll-2"),
    OpCase("cat", lambda m, a: m.roll(a, 3), [In((2, 4))], "roll-flat"),
    # flip and index-based padding
    OpCase("flip", lambda m, a: m.flip(a, (0, -1)), [In((2, 3, 4))], dtypes=ALL_FLOATS),
    OpCase("flip", lambda m, a: a.flip(1), [In((2, 3), "int")], "int", grad=False),
    OpCase("index", lambda m, a: m.nn.functional.pad(a, (2, 1), mode="replicate"),
           [In((2, 3, 4))], "pad-replicate"),
    OpCase("index", lambda m, a: m.nn.functional.pad(a, (1, 2, 2, 1), mode="reflect"),
           [In((1, 2, 3, 4))], "pad-reflect"),
    OpCase("index", lambda m, a: m.nn.functional.pad(a, (1, 3), mode="circular"),
           [In((1, 2, 4))], "pad-circular"),
]


def _slice_grad(m, a, v):
    """d sum(a[1:3, ::2] * v) / da, differentiable (its gradient is with respect to v)."""
    with m.enable_grad():
        if not a.requires_grad:
            a.requires_grad_()
        return m.autograd.grad((a[1:3, ::2] * v).sum(), a, create_graph=True)[0]


CASES.append(OpCase("slice_backward", _slice_grad, [In((4, 5)), In((2, 3))]))


def _relayout(m, a):
    """relayout (what passes.channels_last makes at a region's edges) vs torch's permute."""
    if m.__name__ == "torch":
        return a.permute(0, 2, 3, 1).contiguous()
    from dualgraph.dispatch import apply
    from dualgraph.ops.layout import RELAYOUT
    return apply(RELAYOUT, a, perm=(0, 2, 3, 1))


CASES += [OpCase("relayout", _relayout, [In((2, 3, 4, 5))], "to-channels-last", grad=False)]


def _grown(m, a, b):
    """``cat_grown`` (the start of a concatenation grown in place: passes.cat_in_place) vs
    torch's cat with zeros after."""
    if m.__name__ == "torch":
        return m.cat([a, b, m.zeros(2, 4, 3, dtype=a.dtype)], 1)
    from dualgraph.dispatch import apply
    from dualgraph.ops.shape import CAT_GROWN
    return apply(CAT_GROWN, a, b, dim=1, size=9)


def _written_in_place(m, a, v):
    """``slice_update_in_place`` (given a copy of ``a``, which it overwrites) vs torch's
    cat of ``a``'s blocks around ``v``."""
    if m.__name__ == "torch":
        return m.cat([a[:, :1], v, a[:, 3:]], 1)
    from dualgraph.dispatch import apply
    from dualgraph.ops.shape import SLICE_UPDATE_IN_PLACE
    return apply(SLICE_UPDATE_IN_PLACE, a * 1, v, index=(None, (1, 3, 1), None))


CASES += [
    OpCase("cat_grown", _grown, [In((2, 3, 3)), In((2, 2, 3))], dtypes=("float32", "float64"),
           grad=False),
    OpCase("slice_update_in_place", _written_in_place, [In((2, 5, 3)), In((2, 2, 3))],
           dtypes=("float32", "float64"), grad=False),
]
