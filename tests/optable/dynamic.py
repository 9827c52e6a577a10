"""Rows for the ops whose values or result shapes are known only when the graph runs
(dims_tensor, by_value: what the ONNX import makes of shapes computed at run time)."""
import numpy as np

from . import In, OpCase


def _dims_tensor(m, a):
    """The dims of ``a`` as a tensor, times ``a``'s first row."""
    if m.__name__ == "torch":
        return m.tensor(list(a.shape)) * a[0, :2]
    from dualgraph.dispatch import apply
    dims = apply(m.ops.dynamic.DIMS_TENSOR, values=tuple(a.shape), shape=(2,),
                 dtype=np.dtype(np.int64))
    return dims * a[0, :2]


def _by_value(m, a, k):
    """The top ``k`` of each row, k read from a tensor as it runs."""
    if m.__name__ == "torch":
        return a.topk(int(k), dim=1).values
    from dualgraph.dispatch import apply
    from dualgraph.graph.ir import HostFunction

    class TopRows(HostFunction):
        def __call__(self, x, k):
            return (-np.sort(-x, axis=1)[:, :int(k)],)
    (out,) = apply(m.ops.dynamic.BY_VALUE, a, m.tensor(k), fn=TopRows(),
                   shapes=((a.shape[0], "K"),), dtypes=(a._data.dtype,))
    return out


CASES = [
    OpCase("dims_tensor", _dims_tensor, [In((3, 4))], grad=False),
    OpCase("by_value", _by_value, [In((3, 5), "distinct"), 2], grad=False),
]
