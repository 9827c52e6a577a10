"""Rows for the linear algebra ops: matmul (and mm/bmm/mv/dot/outer), einsum, linear."""
import numpy as np

from . import In, OpCase
from .conv import first_grad, torch_tail

LOW = ("float32", "float64", "float16", "bfloat16")

CASES = [
    # matmul: every rank combination torch accepts, and broadcast batch dims
    OpCase("matmul", lambda m, a, b: m.matmul(a, b), [In((3, 4)), In((4, 5))], "2d",
           dtypes=LOW, atol=1e-4),
    OpCase("matmul", lambda m, a, b: a @ b, [In((4,)), In((4,))], "1d-1d"),
    OpCase("matmul", lambda m, a, b: a @ b, [In((4,)), In((2, 4, 3))], "1d-3d"),
    OpCase("matmul", lambda m, a, b: a @ b, [In((2, 3, 4)), In((4,))], "3d-1d"),
    OpCase("matmul", lambda m, a, b: a @ b, [In((2, 1, 3, 4)), In((5, 4, 2))], "broadcast"),
    OpCase("matmul", lambda m, a, b: a @ b, [In((2, 3, 4)), In((4, 2))], "3d-2d"),
    OpCase("matmul", lambda m, a, b: a @ b, [In((3, 4)), In((2, 4, 2))], "2d-3d"),
    OpCase("matmul", lambda m, a, b: a @ b, [In((3, 4), "int"), In((4, 2), "int")], "int",
           grad=False),
    OpCase("matmul", lambda m, a, b: m.mm(a, b), [In((2, 3)), In((3, 4))], "mm"),
    OpCase("matmul", lambda m, a, b: m.bmm(a, b), [In((2, 2, 3)), In((2, 3, 4))], "bmm"),
    OpCase("matmul", lambda m, a, b: m.mv(a, b), [In((2, 3)), In((3,))], "mv"),
    OpCase("matmul", lambda m, a, b: m.dot(a, b), [In((5,)), In((5,))], "dot"),
    OpCase("matmul", lambda m, a, b: a.matmul(b), [In((2, 5)), In((5,))], "method"),
    OpCase("mul", lambda m, a, b: m.outer(a, b), [In((3,)), In((4,))], "outer"),
    # einsum: contractions, transposes, traces, diagonals, ellipsis, implicit output
    OpCase("einsum", lambda m, a, b: m.einsum("ij,jk->ik", a, b), [In((3, 4)), In((4, 5))],
           "mm", dtypes=LOW),
    OpCase("einsum", lambda m, a, b: m.einsum("bij,bjk->bik", a, b),
           [In((2, 3, 4)), In((2, 4, 5))], "bmm"),
    OpCase("einsum", lambda m, a: m.einsum("ij->ji", a), [In((3, 4))], "transpose"),
    OpCase("einsum", lambda m, a: m.einsum("ii->", a), [In((4, 4))], "trace"),
    OpCase("einsum", lambda m, a: m.einsum("ii->i", a), [In((4, 4))], "diagonal"),
    OpCase("einsum", lambda m, a: m.einsum("iji->j", a), [In((3, 2, 3))], "diag-sum"),
    OpCase("einsum", lambda m, a: m.einsum("ij->", a), [In((3, 4))], "sum"),
    OpCase("einsum", lambda m, a, b: m.einsum("ij,kl->ijkl", a, b), [In((2, 3)), In((3, 2))],
           "outer"),
    OpCase("einsum", lambda m, a, b: m.einsum("ij,jk", a, b), [In((3, 4)), In((4, 2))],
           "implicit"),
    OpCase("einsum", lambda m, a, b: m.einsum("ba,ca", a, b), [In((3, 4)), In((2, 4))],
           "implicit-sorted"),
    OpCase("einsum", lambda m, a, b: m.einsum("...ij,...jk->...ik", a, b),
           [In((2, 1, 3, 4)), In((3, 4, 2))], "ellipsis-broadcast"),
    OpCase("einsum", lambda m, a: m.einsum("i...->...", a), [In((3, 2, 2))], "ellipsis-sum"),
    OpCase("einsum", lambda m, a, b, c: m.einsum("ij,jk,kl->il", a, b, c),
           [In((2, 3)), In((3, 4)), In((4, 2))], "chain"),
    OpCase("einsum", lambda m, a, b: m.einsum("bhqd,bhkd->bhqk", a, b),
           [In((2, 2, 3, 4)), In((2, 2, 5, 4))], "attention"),
    OpCase("einsum", lambda m, a, b: m.einsum("i,i->", a, b), [In((4,)), In((4,))], "dot"),
    OpCase("einsum", lambda m, a, b: m.einsum("ij,j->i", a, b), [In((3, 1)), In((4,))],
           "broadcast-letter"),
    OpCase("einsum", lambda m, a, b: m.einsum("ij,jk->ik", [a, b]), [In((3, 4)), In((4, 2))],
           "list"),
    OpCase("einsum", lambda m, a, b, g: first_grad(m, lambda a: m.einsum("iij,jk->ik", a, b),
                                                   a, g),
           [In((3, 3, 4), grad=False), In((4, 2)), In((3, 2))], "double-backward"),
    # linear: with and without bias, 1-D, 2-D and batched inputs
    OpCase("linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
           [In((4, 3)), In((5, 3)), In((5,))], "bias", dtypes=LOW, atol=1e-4),
    OpCase("linear", lambda m, x, w: m.nn.functional.linear(x, w), [In((2, 4, 3)), In((5, 3))],
           "nobias"),
    OpCase("linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
           [In((2, 3, 4)), In((2, 4)), In((2,))], "3d"),
    OpCase("linear", lambda m, x, w, b: m.nn.functional.linear(x, w, b),
           [In((3,)), In((2, 3)), In((2,))], "1d"),
    OpCase("linear", lambda m, x, w, b, g: first_grad(
        m, lambda w: m.tanh(m.nn.functional.linear(x, w, b)), w, g),
        [In((4, 3)), In((5, 3), grad=False), In((5,)), In((4, 5))], "double-backward"),
    OpCase("matmul", lambda m, a, b, g: first_grad(m, lambda a: m.tanh(a @ b), a, g),
           [In((2, 3, 4), grad=False), In((4,)), In((2, 3))], "double-backward"),
]


def _linear_grads(m, x, w, b, v):
    """First derivatives of linear (create_graph), so the row's gradients are second
    derivatives; also under no_grad, where finite differences evaluate it."""
    with m.enable_grad():
        for t in (x, w, b):
            if not t.requires_grad:
                t.requires_grad_()
        y = m.nn.functional.linear(x, w, b)
        return m.autograd.grad(y, [x, w, b], v, create_graph=True)


CASES += [
    OpCase("linear_backward", _linear_grads,
           [In((2, 3, 4)), In((5, 4)), In((5,)), In((2, 3, 5))], dtypes=("float32", "float64")),
]


def _linear_relu(m, x, w, *bias):
    """``linear_relu`` (what the lowering rule of that name makes) vs torch's relu of a
    linear."""
    if m.__name__ == "torch":
        return m.relu(m.nn.functional.linear(x, w, *bias))
    from dualgraph.dispatch import apply
    from dualgraph.ops.linalg import LINEAR_RELU
    return apply(LINEAR_RELU, x, w, *bias)


CASES += [
    OpCase("linear_relu", _linear_relu, [In((4, 3)), In((5, 3)), In((5,))], "bias",
           dtypes=("float32", "float64"), grad=False),
    OpCase("linear_relu", _linear_relu, [In((2, 4, 3)), In((5, 3))], "nobias-3d",
           grad=False),
    OpCase("linear_relu", _linear_relu, [In((1, 300)), In((200, 300)), In((200,))],
           "batch-1", grad=False, atol=1e-4),   # (the matrix-vector loop)
]

def _linear_epilogue(act, residual_at=None):
    """``linear_epilogue`` (what the lowering rule of that name makes) vs torch's linear,
    activation and residual add."""
    bounds = (0.0, 6.0) if act == "clamp" else (float("-inf"), float("inf"))

    def fn(m, x, w, b, *residual):
        if m.__name__ == "torch":
            return torch_tail(m, m.nn.functional.linear(x, w, b), residual, act, residual_at)
        from dualgraph.dispatch import apply
        from dualgraph.ops.epilogue import LINEAR_EPILOGUE
        return apply(LINEAR_EPILOGUE, x, w, b, *residual, act=act, bounds=bounds,
                     residual_at=residual_at)
    return fn


CASES += [   # (products past the float32 loop's threshold, one below it, one of batch 1)
    OpCase("linear_epilogue", _linear_epilogue(act, at),
           [In(rows + (37,)), In((width, 37)), In((width,))]
           + ([In(rows + (width,))] if at else []), f"{act}-{at}-{rows}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for (act, at), rows, width in [
        (("gelu", None), (3, 70), 129), (("gelu_tanh", "before"), (2, 5, 9), 33),
        (("relu", "after"), (1, 1, 7), 300), (("silu", "after"), (9,), 600),
        (("clamp", "before"), (60, 2), 70), (("hardswish", None), (3, 71), 65),
        (("sigmoid", None), (3, 4), 5), (("none", "before"), (1, 300), 200),
        (("hardsigmoid", "after"), (7, 11), 13)]
]

def _linear_norm(act, residual_at=None):
    """``linear_norm`` (what the lowering rule of that name makes) vs torch's linear,
    activation, residual add and LayerNorm over the last dim."""
    bounds = (float("-inf"), float("inf"))

    def fn(m, x, w, b, weight, shift, *residual):
        if m.__name__ == "torch":
            y = torch_tail(m, m.nn.functional.linear(x, w, b), residual, act, residual_at)
            return m.nn.functional.layer_norm(y, y.shape[-1:], weight, shift, 1e-5)
        from dualgraph.dispatch import apply
        from dualgraph.ops.epilogue import LINEAR_NORM
        return apply(LINEAR_NORM, x, w, b, weight, shift, *residual, act=act, bounds=bounds,
                     residual_at=residual_at, eps=1e-5)
    return fn


CASES += [   # (odd widths; rows past the float32 loop's threshold, a few rows, batch 1)
    OpCase("linear_norm", _linear_norm(act, at),
           [In(rows + (37,)), In((width, 37)), In((width,)), In((width,)), In((width,))]
           + ([In(rows + (width,))] if at else []), f"{act}-{at}-{rows}",
           dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for (act, at), rows, width in [
        (("none", "before"), (3, 70), 129), (("gelu", None), (2, 5, 9), 33),
        (("none", None), (1, 1, 7), 300), (("relu", "after"), (40, 3), 1)]
]

def _linear_packed(act, residual_at=None, eps=None, n=100):
    """``linear_packed`` (what the lowering rule of that name makes) vs torch's linear of
    the weight unpacked (``(panels, K, 64)`` -> ``(N, K)``: lanes past ``n`` unread), its
    activation, residual add and, with ``eps``, LayerNorm over the last dim."""
    bounds = (float("-inf"), float("inf"))

    def fn(m, x, wp, b, *rest):
        if m.__name__ != "torch":
            from dualgraph.dispatch import apply
            from dualgraph.ops.epilogue import LINEAR_PACKED
            return apply(LINEAR_PACKED, x, wp, b, *rest, act=act, bounds=bounds,
                         residual_at=residual_at, eps=eps)
        w = wp.permute(0, 2, 1).reshape(-1, x.shape[-1])[:n]
        norm, residual = (rest[:2], rest[2:]) if eps is not None else ((), rest)
        y = torch_tail(m, m.nn.functional.linear(x, w, b), residual, act, residual_at)
        return m.nn.functional.layer_norm(y, y.shape[-1:], *norm, eps) if norm else y
    return fn


CASES += [   # (100 outputs: a spare part of the second panel; 7 rows: one past a block of 6)
    OpCase("linear_packed", _linear_packed(act, at, eps),
           [In(rows + (37,)), In((2, 37, 64)), In((100,))]
           + ([In((100,)), In((100,))] if eps else []) + ([In(rows + (100,))] if at else []),
           f"{act}-{at}-{eps}-{rows}", dtypes=("float32", "float64"), grad=False, atol=1e-4)
    for act, at, eps, rows in [("none", None, None, (7,)), ("gelu", "after", None, (2, 9)),
                               ("relu", "before", 1e-5, (13,)), ("none", None, 1e-5, (1, 3))]
]

def _rms_norm(m, x, w):
    """``rms_norm`` (what the rule ``fuse_rms_norm`` makes) vs torch's ``F.rms_norm``."""
    if m.__name__ == "torch":
        return m.nn.functional.rms_norm(x, x.shape[-1:], w, 1e-6)
    from dualgraph.dispatch import apply
    from dualgraph.ops.norm import RMS_NORM
    return apply(RMS_NORM, x, w, eps=1e-6)[0]


CASES += [   # (rows past the float32 loop's threshold, odd widths, one row)
    OpCase("rms_norm", _rms_norm, [In(shape), In(shape[-1:])], f"{shape}",
           dtypes=("float32", "float64"), grad=False, atol=1e-5)
    for shape in [(3, 70, 129), (2, 5, 9), (1, 300), (40, 1)]
]

# torch's fused-looking composites: beta * input + alpha * product
CASES += [
    OpCase("matmul", lambda m, c, a, b: m.addmm(c, a, b), [In((4,)), In((3, 5)), In((5, 4))],
           "addmm"),
    OpCase("matmul", lambda m, c, a, b: c.addmm(a, b, beta=0.5, alpha=-2),
           [In((3, 4)), In((3, 5)), In((5, 4))], "addmm-scaled", dtypes=("float32", "float64")),
    OpCase("matmul", lambda m, c, a, b: m.addmm(c, a, b, beta=0),
           [In((3, 4)), In((3, 5)), In((5, 4))], "addmm-beta0"),
    OpCase("matmul", lambda m, c, a, b: m.baddbmm(c, a, b, alpha=0.25),
           [In((2, 3, 4)), In((2, 3, 5)), In((2, 5, 4))], "baddbmm"),
    OpCase("matmul", lambda m, c, a, b: c.baddbmm(a, b, beta=2),
           [In((1, 4)), In((2, 3, 5)), In((2, 5, 4))], "baddbmm-broadcast"),
]

CASES += [
    OpCase("einsum", lambda m, a, b: m.tensordot(a, b, dims=1), [In((2, 3)), In((3, 4))],
           "tensordot"),
    OpCase("einsum", lambda m, a, b: m.tensordot(a, b, dims=([1, 2], [1, 0])),
           [In((2, 3, 4)), In((4, 3, 5))], "tensordot-lists"),
    OpCase("einsum", lambda m, a, b: m.tensordot(a, b, dims=0), [In((2,)), In((3,))],
           "tensordot-outer"),
]


def _attention(scale, divide=False, fill=None, heads_out=False):
    """``attention`` (what the lowering rule ``fuse_attention`` makes) vs torch's ops:
    ``softmax(q @ kt * scale (+ mask | masked_fill)) @ v``."""
    def fn(m, q, kt, v, *mask):
        if m.__name__ == "torch":
            s = q @ kt
            s = s / scale if divide else s * scale
            if mask:
                s = s.masked_fill(mask[0], fill) if fill is not None else s + mask[0]
            out = s.softmax(-1) @ v
            return out.transpose(-3, -2) if heads_out else out
        from dualgraph.dispatch import apply
        from dualgraph.ops.attention import ATTENTION
        return apply(ATTENTION, q, kt, v, *mask, scale=scale, divide=divide, fill=fill,
                     heads_out=heads_out)
    return fn


def _heads(rng, dtype, shape=(2, 6, 3, 4), perm=(0, 2, 1, 3)):
    """A head-split view as attention's operands are: (b, t, h, e) permuted to (b, h, t, e)."""
    return rng.standard_normal(shape).astype(dtype).transpose(perm)


CASES += [
    OpCase("attention", _attention(0.5), [In((2, 5, 4)), In((2, 4, 6)), In((2, 6, 3))],
           "plain", dtypes=("float32", "float64"), grad=False),
    OpCase("attention", _attention(2.0, divide=True, heads_out=True),
           [In((), kind="custom", fn=_heads), In((), kind="custom", fn=lambda r, d: _heads(
               r, d, perm=(0, 2, 3, 1))), In((), kind="custom", fn=_heads), In((6, 6))],
           "heads-additive-mask", dtypes=("float32", "float64"), grad=False),
    OpCase("attention", _attention(0.5, fill=float("-inf")),
           [In((2, 3, 6, 4)), In((2, 3, 4, 6)), In((2, 3, 6, 4)),
            In((), kind="custom", fn=lambda r, d: np.triu(np.ones((6, 6), bool), 1))],
           "causal-fill", dtypes=("float32", "float64"), grad=False),
    OpCase("attention", _attention(0.25, fill=-1e4),
           [In((2, 3, 6, 4)), In((2, 3, 4, 6)), In((2, 3, 6, 4)),
            In((), kind="custom", fn=lambda r, d: r.random((2, 1, 1, 6)) < 0.4)],
           "padding-fill", dtypes=("float32", "float64"), grad=False),
]
