"""Rows for ops/arrange.py's composites (stacks, atleast_Nd, tensor_split, flips and
rotations, take, diff, cross, kron, trace), each under the primitive that carries it."""
from . import In, OpCase

ALL_FLOATS = ("float32", "float64", "float16", "bfloat16")
F64 = ("float32", "float64")

CASES = [
    # stacks: cat of reshapes
    OpCase("cat", lambda m, a, b: m.hstack([a, b]), [In((5,)), In((3,))], "hstack-1d",
           dtypes=ALL_FLOATS),
    OpCase("cat", lambda m, a, b: m.hstack((a, b, a)), [In((2, 3, 1)), In((2, 1, 1))],
           "hstack-3d"),
    OpCase("cat", lambda m, a, b: m.vstack([a, b]), [In((3,)), In((2, 3))], "vstack"),
    OpCase("cat", lambda m, a, b: m.row_stack([a, b]), [In(()), In((1,))], "row_stack-0d"),
    OpCase("cat", lambda m, a, b: m.dstack([a, b, a]), [In((2, 3)), In((2, 3, 2))], "dstack"),
    OpCase("cat", lambda m, a, b: m.dstack([a, b]), [In((4,)), In((4,))], "dstack-1d"),
    OpCase("cat", lambda m, a, b, c: m.column_stack([a, b, c]),
           [In((3,)), In((3, 2)), In((3, 1))], "column_stack", dtypes=F64),
    OpCase("cat", lambda m, a, b: m.hstack([a, b]), [In((2, 3), "int"), In((2, 1), "int")],
           "hstack-int", grad=False),
    OpCase("reshape", lambda m, a, b, c: m.atleast_1d(a, b, c), [In(()), In((2,)), In((2, 3))],
           "atleast_1d"),
    OpCase("reshape", lambda m, a: m.atleast_2d(a), [In((3,))], "atleast_2d"),
    OpCase("reshape", lambda m, a, b: m.atleast_2d([a, b]), [In(()), In((2, 1, 3))],
           "atleast_2d-list"),
    OpCase("reshape", lambda m, a, b, c: m.atleast_3d(a, b, c), [In(()), In((4,)), In((2, 3))],
           "atleast_3d"),
    OpCase("reshape", lambda m, a: m.ravel(a.transpose(0, 1)), [In((3, 2, 2))], "ravel"),
    OpCase("reshape", lambda m, a: a.ravel() * 2, [In((2, 3), "int")], "ravel-int",
           grad=False),
    OpCase("expand", lambda m, a: a.broadcast_to((4, 2, 3)), [In((2, 1))], "broadcast_to"),
    # tensor_split and h/v/dsplit: slices
    OpCase("slice", lambda m, a: m.tensor_split(a, 3), [In((7, 2))], "tensor_split",
           dtypes=ALL_FLOATS),
    OpCase("slice", lambda m, a: a.tensor_split([1, -2, 9], dim=-1), [In((2, 6))],
           "tensor_split-indices"),
    OpCase("slice", lambda m, a: m.tensor_split(a, (4, 2), 1), [In((2, 6))],
           "tensor_split-backwards"),
    OpCase("slice", lambda m, a: m.tensor_split(a, m.tensor(4), 0), [In((5, 2))],
           "tensor_split-tensor"),
    OpCase("slice", lambda m, a: m.hsplit(a, 3), [In((2, 6, 2))], "hsplit"),
    OpCase("slice", lambda m, a: a.hsplit([2]), [In((5,))], "hsplit-1d"),
    OpCase("slice", lambda m, a: m.vsplit(a, [1, 3]), [In((4, 3))], "vsplit"),
    OpCase("slice", lambda m, a: a.dsplit(2), [In((1, 2, 4))], "dsplit"),
    # flips and rotations
    OpCase("flip", lambda m, a: m.fliplr(a) * m.flipud(a), [In((3, 4, 2))], "fliplr-flipud",
           dtypes=ALL_FLOATS),
    OpCase("flip", lambda m, a: m.rot90(a), [In((2, 3))], "rot90"),
    OpCase("flip", lambda m, a: (a.rot90(2, (1, 2)), a.rot90(-1, [2, 0]), a.rot90(7)),
           [In((2, 3, 4))], "rot90-k"),
    OpCase("flip", lambda m, a: m.rot90(a, 3, (-1, -2)), [In((3, 2), "int")], "rot90-int",
           grad=False),
    # take: an index
    OpCase("index", lambda m, a, i: m.take(a, i), [In((3, 4)), In((2, 3), "int", -12, 12)],
           "take", dtypes=ALL_FLOATS),
    OpCase("index", lambda m, a, i: a.take(i), [In((5,)), In((), "int", 0, 5)], "take-0d"),
    # diff: slices and a subtraction
    OpCase("sub", lambda m, a: m.diff(a), [In((6,))], "diff", dtypes=ALL_FLOATS),
    OpCase("sub", lambda m, a, b, c: m.diff(a, 2, 0, prepend=b, append=c),
           [In((3, 4)), In((1, 4)), In((2, 4))], "diff-n"),
    OpCase("sub", lambda m, a: a.diff(n=3, dim=-2), [In((2, 5, 3))], "diff-negative-dim"),
    OpCase("sub", lambda m, a: m.diff(a, 5), [In((3,))], "diff-past-length"),
    OpCase("sub", lambda m, a: m.diff(a, dim=1, append=a[:, :1]), [In((2, 3), "int")],
           "diff-int", grad=False),
    OpCase("bitwise_xor", lambda m, a: m.diff(a, dim=0), [In((4, 2), "bool")], "diff-bool",
           grad=False),
    # cross: products of selected components, stacked
    OpCase("stack", lambda m, a, b: m.cross(a, b, dim=1), [In((2, 3)), In((2, 3))], "cross",
           dtypes=F64),
    OpCase("stack", lambda m, a, b: a.cross(b, dim=-2), [In((4, 3, 2)), In((1, 3, 2))],
           "cross-broadcast"),
    OpCase("stack", lambda m, a, b: m.cross(a, b), [In((2, 3, 3)), In((2, 3, 3))],
           "cross-default-dim"),
    OpCase("stack", lambda m, a, b: m.cross(a, b, dim=0), [In((3,), "int"), In((3,), "int")],
           "cross-int", grad=False),
    # kron: a broadcast product
    OpCase("mul", lambda m, a, b: m.kron(a, b), [In((2, 3)), In((3, 2))], "kron",
           dtypes=ALL_FLOATS),
    OpCase("mul", lambda m, a, b: a.kron(b), [In((2,)), In((2, 1, 3))], "kron-ndims"),
    OpCase("mul", lambda m, a, b: m.kron(a, b), [In((2, 2), "int"), In((3,), "int")],
           "kron-int", grad=False),
    # trace: the sum of a diagonal
    OpCase("sum", lambda m, a: m.trace(a), [In((3, 5))], "trace", dtypes=F64),
    OpCase("sum", lambda m, a: a.trace(), [In((4, 2))], "trace-tall"),
    OpCase("sum", lambda m, a: m.trace(a), [In((3, 3), "int", -5, 5, dtype="int32")],
           "trace-int", grad=False),
]
