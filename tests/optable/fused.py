"""Rows for the ``fused`` op (made by the fuse_elementwise pass): a group run as one op must
equal its ops run one by one, here checked against torch running them one by one."""
from dualgraph.graph import Graph
from dualgraph.ops import fused as fused_ops  # noqa: F401  (registers the op)

from . import In, OpCase


def _group() -> Graph:
    """exp(x*2 + y) and its column sums: a two-output group ending in a reduction."""
    g = Graph()
    x, y = g.add_input((3, 4), "float32", name="x"), g.add_input((4,), "float32", name="y")
    (a,) = g.add_node("mul", [x, 2.0])
    (b,) = g.add_node("add", [a, y])
    (e,) = g.add_node("exp", [b])
    (s,) = g.add_node("sum", [e], {"dims": (0,), "keepdim": False, "dtype": None})
    g.set_outputs([e, s])
    return g


def _backward_group() -> Graph:
    """relu_backward(g, out) * 2: a group holding a compiler-only op."""
    g = Graph()
    dy, out = g.add_input((3, 4), "float32", name="g"), g.add_input((3, 4), "float32")
    (dx,) = g.add_node("relu_backward", [dy, out])
    (y,) = g.add_node("mul", [dx, 2.0])
    g.set_outputs([y])
    return g


GROUP, BACKWARD_GROUP = _group(), _backward_group()


def _fused(m, x, y):
    if m.__name__ == "torch":
        e = m.exp(x * 2.0 + y)
        return e, e.sum(0)
    return fused_ops.fused(GROUP, x, y)


def _fused_backward(m, g, out):
    if m.__name__ == "torch":
        return (m.where(out > 0, g, 0.0) * 2.0,)
    return fused_ops.fused(BACKWARD_GROUP, g, out)


CASES = [OpCase("fused", _fused, [In((3, 4)), In((4,))], "exp-sum", grad=False),
         OpCase("fused", _fused_backward, [In((3, 4)), In((3, 4))], "relu-backward",
                grad=False)]
