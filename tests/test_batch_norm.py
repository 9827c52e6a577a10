"""Training-mode BatchNorm as one op (``ops/batch_norm.py``) and its float32 loops
(``kernels/batch_norm.py``) against PyTorch (output, input, weight and bias gradients,
running statistics) and against the op's NumPy kernels, on shapes outside the benchmark
suite: (N, C), (N, C, L), (N, C, H, W) and 5-D, odd sizes, batch 1 and 3, an offset mean
(the two-pass variance), no affine parameters; and the same bits on one thread or two.
The op table (tests/optable) checks the small shapes, the NumPy path and second
derivatives."""
import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph import kernels

pytestmark = pytest.mark.skipif(not kernels.numba_available(), reason="Numba is not installed")


def train_step(lib, x, w, b, g):
    xs = lib.tensor(x, requires_grad=True)
    ws, bs = ((None, None) if w is None else
              (lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True)))
    mean, var = lib.zeros(x.shape[1]), lib.ones(x.shape[1])
    y = lib.nn.functional.batch_norm(xs, mean, var, ws, bs, training=True, momentum=0.3)
    y.backward(lib.tensor(g))
    grads = [] if w is None else [ws.grad.numpy(), bs.grad.numpy()]
    return [y.detach().numpy(), xs.grad.numpy(), *grads, mean.numpy(), var.numpy()]


@pytest.mark.parametrize("shape,affine", [((3, 5, 17, 23), True), ((1, 7, 31, 19), True),
                                          ((2, 3, 8, 9, 11), True), ((4099, 3), True),
                                          ((3, 6, 333), False)])
def test_batch_norm_loops_match_torch_and_numpy(monkeypatch, shape, affine):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 3 + 50).astype(np.float32)   # mean far from 0
    g = rng.standard_normal(shape).astype(np.float32)
    w, b = ((rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2)) if affine
            else (None, None))
    ran = []
    call = kernels.Loop.__call__
    monkeypatch.setattr(kernels.Loop, "__call__",
                        lambda self, *args: ran.append(self.__name__) or call(self, *args))
    fast = train_step(dg, x, w, b, g)
    assert {"_forward", "_backward"} <= set(ran)
    monkeypatch.undo()
    monkeypatch.setenv("DUALGRAPH_NUMBA", "0")
    slow = train_step(dg, x, w, b, g)
    for got, numpy_got, want in zip(fast, slow, train_step(torch, x, w, b, g)):
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
        np.testing.assert_allclose(got, numpy_got, rtol=1e-4, atol=1e-4 * scale)


def test_batch_norm_loops_give_the_same_bits_on_two_threads(monkeypatch):
    """From ``kernels.PARALLEL_MIN`` elements the channels are shared among threads;
    each channel is summed by one thread in one order."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((16, 8, 96, 96)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    w, b = (rng.standard_normal(8).astype(np.float32) for _ in range(2))
    assert x.size >= kernels.PARALLEL_MIN
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "2")
    two = train_step(dg, x, w, b, g)
    monkeypatch.setenv("DUALGRAPH_NUM_THREADS", "1")
    one = train_step(dg, x, w, b, g)
    for a, c in zip(two, one):
        np.testing.assert_array_equal(a, c)
