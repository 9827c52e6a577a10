"""LayerNorm written out (by hand, or by an ONNX export below opset 17) made one
``layer_norm`` (passes/norms.py, ``fuse_layer_norm``): compiled == eager == torch, the rule
fires where the pattern is whole and declines where it is not (another dim, the centred
value read elsewhere, a tensor eps), and an exported model loads with the norm fused."""
import os
import tempfile

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)


def _by_hand(m, x, w, b, eps, dim=-1):
    mean = x.mean(dim, keepdim=True)
    centred = x - mean
    var = (centred ** 2).mean(dim, keepdim=True)
    y = centred / m.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


@pytest.mark.parametrize("shape", [(4, 7), (2, 5, 64), (1, 3, 9, 33)])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_layer_norm_by_hand_is_one_op_and_matches(shape, affine, dtype):
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    w = RNG.standard_normal(shape[-1]).astype(dtype) if affine != "none" else None
    b = RNG.standard_normal(shape[-1]).astype(dtype) if affine == "both" else None
    args = [a for a in (x, w, b) if a is not None]

    def f(m):
        def norm(x, *wb):
            ws = list(wb) + [None, None]
            return _by_hand(m, x, ws[0], ws[1], 1e-5) * 2.0
        return norm
    compiled = dg.compile(f(dg))
    got = compiled(*[dg.tensor(a) for a in args]).numpy()
    eager = f(dg)(*[dg.tensor(a) for a in args]).numpy()
    want = f(torch)(*[torch.tensor(a) for a in args]).numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, eager, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert "k_layer_norm(" in compiled.code and "row_means" not in compiled.code, compiled.code


def test_what_is_not_a_whole_layer_norm_is_left_as_it_is():
    x = RNG.standard_normal((3, 6, 5)).astype(np.float32)

    def over_channels(x):    # (ConvNeXt's channels-first norm: dim 1, not the last)
        return _by_hand(dg, x, None, None, 1e-6, dim=1)

    def centred_kept(x):     # the centred value is an output too
        mean = x.mean(-1, keepdim=True)
        centred = x - mean
        return centred / dg.sqrt((centred * centred).mean(-1, keepdim=True) + 1e-5), centred

    def tensor_eps(x, eps):
        return _by_hand(dg, x, None, None, eps)
    for f, args in ((over_channels, (x,)), (centred_kept, (x,)),
                    (tensor_eps, (x, np.full((3, 6, 1), 1e-3, np.float32)))):
        inputs = [dg.tensor(a) for a in args]
        compiled = dg.compile(f)
        got, want = compiled(*inputs), f(*inputs)
        for g, e in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
        assert "k_layer_norm(" not in compiled.code, (f.__name__, compiled.code)


def test_gradients_through_a_layer_norm_by_hand():
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    w = RNG.standard_normal(16).astype(np.float32)
    xs, ws = dg.tensor(x, requires_grad=True), dg.tensor(w, requires_grad=True)
    step = dg.compile(lambda a, b: (_by_hand(dg, a, b, None, 1e-5) ** 3).sum())
    loss = step(xs, ws)
    loss.backward()
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    want = (_by_hand(torch, xt, wt, None, 1e-5) ** 3).sum()
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-4)
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_an_opset_13_export_loads_with_the_norm_fused():
    torch.manual_seed(0)

    class Block(torch.nn.Module):   # a pre-norm feed-forward block
        def __init__(self, d=64):
            super().__init__()
            self.norm, self.up, self.down = (torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d),
                                             torch.nn.Linear(4 * d, d))

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
    layer = Block().eval()
    with torch.no_grad():   # (weights other than ones and zeros: the affine part is exported)
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    x = RNG.standard_normal((2, 10, 64)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "encoder.onnx")
        torch.onnx.export(layer, (torch.tensor(x),), path, dynamo=False, input_names=["x"],
                          opset_version=13)
        loaded = dg.onnx.load(path)
        got = loaded(dg.tensor(x))
    got = got[0] if isinstance(got, (tuple, list)) else got
    with torch.no_grad():
        want = layer(torch.tensor(x)).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    assert "row_means" not in loaded.code and "k_layer_norm(" in loaded.code, loaded.code
