"""The eager per-op shortcuts of the small-op round give what the general path gives:
``linear``'s second (and third) derivatives in closed form, the view ops with their targets
and permutations cached (values, gradients, copies and errors as before), and ``expand``'s
kernel against ``np.broadcast_to``."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import dualgraph as dg
import dualgraph.nn.functional as F


def _draw(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _linear_second(lib, F_, arrays, grads, bias: bool, cotangents):
    """The gradients (w.r.t. x, w, b where they require grad) of a loss made from the
    first derivatives of ``linear`` (create_graph): a sum of the first derivatives times
    fixed cotangents, the way MAML's and gradient penalties' backward reaches the second
    derivatives; then the third derivative of one of the results."""
    x, w, b = (lib.tensor(a, requires_grad=r) for a, r in zip(arrays, grads))
    y = F_.linear(x, w, b if bias else None)
    v = lib.tensor(cotangents[0])
    wrt = [t for t, r in zip((x, w, b), grads) if r and (bias or t is not b)]
    first = lib.autograd.grad((y * v).sum() + (y * y).sum(), wrt, create_graph=True)
    loss = sum((f * lib.tensor(c)).sum() for f, c in zip(first, cotangents[1:]))
    second = lib.autograd.grad(loss, wrt, create_graph=True, allow_unused=True)
    # (a second derivative may be constant: the third is then of the first that is not)
    third_of = [s for s in second if s is not None and s.requires_grad][:1]
    third = lib.autograd.grad((third_of[0] * third_of[0]).sum(), wrt,
                              allow_unused=True) if third_of else ()
    return [None if s is None else s.detach().numpy() for s in second + third]


@pytest.mark.parametrize("x_shape", [(5,), (3, 5), (2, 3, 5)])
@pytest.mark.parametrize("grads", [(True, True, True), (False, True, True),
                                   (True, False, True), (True, True, False)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linear_second_and_third_derivatives_match_torch(x_shape, grads, bias, dtype):
    out_f = 4
    x, w, b = _draw([x_shape, (out_f, x_shape[-1]), (out_f,)], dtype)
    y_shape = x_shape[:-1] + (out_f,)
    wrt_shapes = [s for s, r in zip((x_shape, (out_f, x_shape[-1]), (out_f,)), grads)
                  if r and (bias or s != (out_f,))]
    cot = _draw([y_shape] + wrt_shapes, dtype, seed=1)
    got = _linear_second(dg, F, (x, w, b), grads, bias, cot)
    want = _linear_second(torch, torch.nn.functional, (x, w, b), grads, bias, cot)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for g, t in zip(got, want):
        if t is None:   # (torch: unused; dualgraph may give None or zeros)
            assert g is None or not np.any(g)
        else:
            np.testing.assert_allclose(g, t, rtol=tol, atol=tol)


def test_linear_second_derivative_only_of_the_weight_gradient():
    """Only the weight's first derivative enters the loss (x's cotangent is absent): the
    second derivatives still match torch's, and the missing one stands in only for shape."""
    x, w, b = _draw([(3, 5), (4, 5), (4,)], np.float64)
    out = []
    for lib, F_ in ((dg, F), (torch, torch.nn.functional)):
        tx, tw, tb = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = F_.linear(tx, tw, tb)
        gw, = lib.autograd.grad((y * y).sum(), [tw], create_graph=True)
        out.append([g.detach().numpy() for g in lib.autograd.grad(gw.pow(2).sum(),
                                                                   [tx, tw, tb])])
    for g, t in zip(*out):
        np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-10)


# -- views: targets and permutations cached per shape and arguments ---------------------------
_VIEW_CASES = [
    ((2, 3, 4), lambda x: x.reshape(6, 4)),
    ((2, 3, 4), lambda x: x.reshape([4, -1])),
    ((2, 3, 4), lambda x: x.reshape((-1,))),
    ((2, 3, 4), lambda x: x.view(x.shape)),       # (a Size: the same shape, x itself)
    ((2, 3, 4), lambda x: x.view(2, 12)),
    ((2, 3, 4), lambda x: x.unsqueeze(-1)),
    ((2, 1, 4), lambda x: x.squeeze()),
    ((2, 1, 4), lambda x: x.squeeze(1)),
    ((2, 3, 4), lambda x: x.flatten(1)),
    ((3, 4), lambda x: x.t()),
    ((4,), lambda x: x.t()),
    ((), lambda x: x.t()),
    ((2, 3, 4), lambda x: x.transpose(0, -1)),
    ((2, 3, 4), lambda x: x.transpose(1, 1)),
    ((), lambda x: x.transpose(0, -1)),
    ((2, 3, 4), lambda x: x.permute(2, 0, 1)),
    ((2, 3, 4), lambda x: x.permute((1, 2, 0))),
    ((2, 3, 4), lambda x: x.permute([-1, 0, 1])),
    ((2, 3, 4), lambda x: x.permute(0, 1, 2)),
    ((3, 4), lambda x: x.t().reshape(-1)),        # (a copy: reshape of a transpose)
    ((2, 3, 4), lambda x: x.transpose(0, 1).reshape(3, 8).t()),
    ((0, 3), lambda x: x.reshape(3, -1)),
    ((4, 1), lambda x: x.expand(4, 6)),
    ((4, 1), lambda x: x.expand(2, -1, 3)),
    ((3,), lambda x: x.expand(2, 3)),
    ((), lambda x: x.expand(2, 2)),
    ((4, 1), lambda x: x.t().expand(5, 4)),        # (a transposed base: NumPy's path)
    ((2, 1, 3), lambda x: x.expand_as(torch.ones(2, 4, 3)) if isinstance(x, torch.Tensor)
     else x.expand_as(dg.ones(2, 4, 3))),
]


@pytest.mark.parametrize("case", range(len(_VIEW_CASES)))
def test_views_match_torch_values_and_gradients_twice(case):
    """Each view twice (the second call takes the cached target or permutation): torch's
    shape, values and gradient, through a product so that the gradient is not ones."""
    shape, fn = _VIEW_CASES[case]
    data, = _draw([shape], np.float32)
    for _ in range(2):
        grads = []
        for lib in (dg, torch):
            x = lib.tensor(data, requires_grad=True)
            y = fn(x * 1.0)
            w = lib.tensor(np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape)))
            (y * w).sum().backward()
            grads.append((tuple(y.shape), y.detach().numpy(), x.grad.numpy()))
        (dshape, dy, dgx), (tshape, ty, tgx) = grads
        assert dshape == tshape
        np.testing.assert_array_equal(dy, ty)
        np.testing.assert_array_equal(dgx, tgx)


def test_reshape_copy_stays_apart_and_bad_targets_raise_every_time():
    """A reshape that copies (of a transpose) is a tensor of its own: a write to it leaves
    the base alone. A bad target raises at each call, not only the first (errors are not
    cached), naming the shapes."""
    x = dg.arange(6.0).reshape(2, 3)
    flat = x.t().reshape(-1)
    flat.add_(100.0)
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    row = x.reshape(-1)          # (row-major: a view)
    row.add_(1.0)
    assert x.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    for _ in range(2):
        with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, -1\)"):
            x.reshape(4, -1)
        with pytest.raises(IndexError, match="out of range"):
            x.transpose(0, 2)
        with pytest.raises(ValueError, match="permutation"):
            x.permute(0, 0)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "bfloat16"])
def test_broadcast_view_is_numpys_broadcast_to(dtype):
    """``broadcast_view`` (expand's kernel) against ``np.broadcast_to``: the same shape,
    dtype, values and memory, read-only, and NumPy's error for a shape it refuses, for
    row-major, transposed and reversed arrays and shapes with zeros and new dims."""
    from dualgraph import dtypes
    from dualgraph.ops._util import broadcast_view
    dt = dtypes.to_np(getattr(dg, dtype))
    rng = np.random.default_rng(0)
    targets = [(), (1,), (3,), (4, 1), (4, 4), (2, 3), (5, 2, 3), (0, 3), (3, 0), (2, 1, 3),
               (2, 5, 3), (-1, 3), (6, 1, 4)]
    for shape in [(), (1,), (3,), (4, 1), (1, 4), (2, 3), (2, 1, 3), (0,), (1, 0)]:
        x = np.asarray(rng.random(shape) * 10).astype(dt)
        for v in (x, x.T, x[::-1] if x.ndim else x):
            for target in targets:
                try:
                    want = np.broadcast_to(v, target)
                except ValueError as e:
                    with pytest.raises(ValueError, match=re.escape(str(e))):
                        broadcast_view(v, target)
                    continue
                got = broadcast_view(v, target)
                assert (got.shape, got.dtype) == (want.shape, want.dtype)
                np.testing.assert_array_equal(got, want)
                assert not got.flags.writeable
                assert got.size == 0 or np.shares_memory(got, v)
