"""Rows for ops/tensor_methods.py: the in-place reshaping methods (t_, transpose_,
unsqueeze_, squeeze_, swapdims_, swapaxes_), fill_diagonal_, sum_to_size and the in-place
cumulative ops, each under the op that carries it."""
from . import In, OpCase

F64 = ("float32", "float64")


def _reshaped(m, a):
    y = a * 1
    y.t_()
    y.unsqueeze_(-1)
    y.transpose_(0, -1).swapdims_(1, 2)
    return y.swapaxes_(-1, 0).squeeze_(1) * 2


CASES = [
    OpCase("permute", lambda m, a: (a * 1).t_(), [In((3, 4))], "t_", dtypes=F64),
    OpCase("permute", _reshaped, [In((2, 3))], "reshaped-in-place"),
    OpCase("permute", lambda m, a: (a + 0).transpose_(-1, 0) + 1, [In((2, 3, 4), "int")],
           "transpose_-int", grad=False),
    OpCase("reshape", lambda m, a: (a * 1).squeeze_() * (a * 1).unsqueeze_(0),
           [In((1, 3, 1))], "squeeze_"),
    OpCase("where", lambda m, a: (a * 1).fill_diagonal_(2.5), [In((4, 4))], "fill_diagonal_",
           dtypes=F64),
    OpCase("where", lambda m, a: (a * 1).fill_diagonal_(-1, wrap=True), [In((7, 2))],
           "fill_diagonal_-wrap"),
    OpCase("where", lambda m, a: (a * 1).fill_diagonal_(-1), [In((7, 2))],
           "fill_diagonal_-tall"),
    OpCase("where", lambda m, a: (a * 1).fill_diagonal_(0), [In((2, 5))],
           "fill_diagonal_-wide"),
    OpCase("where", lambda m, a: (a * 1).fill_diagonal_(9), [In((3, 3, 3))],
           "fill_diagonal_-3d"),
    OpCase("where", lambda m, a: (a + 0).fill_diagonal_(7), [In((3, 4), "int")],
           "fill_diagonal_-int", grad=False),
    OpCase("sum", lambda m, a: a.sum_to_size(1, 4), [In((3, 4))], "sum_to_size",
           dtypes=F64),
    OpCase("sum", lambda m, a: a.sum_to_size((3, 1)), [In((2, 3, 4))], "sum_to_size-lead"),
    OpCase("sum", lambda m, a: a.sum_to_size(2, 3) + 0, [In((2, 3))], "sum_to_size-same",
           extra={"runs_no_op": "the size is the tensor's: it returns the tensor"}),
    OpCase("cumsum", lambda m, a: (a * 1).cumsum_(-1), [In((3, 4))], "cumsum_", dtypes=F64),
    OpCase("cumsum", lambda m, a: (a + 0).cumsum_(0), [In((5,), "int")], "cumsum_-int",
           grad=False),
    OpCase("cumprod", lambda m, a: (a * 1).cumprod_(1), [In((2, 3), "pos")], "cumprod_"),
]
