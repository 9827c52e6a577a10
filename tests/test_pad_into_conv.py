"""Zero padding before a conv taken into the conv's own padding (passes/simplify.py,
``conv2d(pad(x, zeros))``): ``F.pad`` / ``nn.ZeroPad2d`` in model code and an ONNX ``Pad``
(TF-style "same" padding) no longer make a padded copy. Compiled == eager == torch, and the
rule leaves alone what is not zero padding of the last two dims."""
import os
import tempfile

import numpy as np
import pytest
import torch

import dualgraph as dg
import dualgraph.nn.functional as F

RNG = np.random.default_rng(0)


def _both(f, g, x, *weights):
    """f under dualgraph (eager and compiled) and g under torch, on the same arrays."""
    args = [dg.tensor(a) for a in (x, *weights)]
    eager = f(*args).numpy()
    compiled = dg.compile(f)
    got = compiled(*args).numpy()
    want = g(*[torch.tensor(a) for a in (x, *weights)]).numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return compiled


CASES = [  # (pad, conv padding, stride, dilation, groups, bias)
    ((0, 1, 0, 1), 0, 2, 1, 1, True),      # TF "same", stride 2
    ((1, 1, 2, 0), 1, 1, 1, 1, False),
    ((3, 0, 0, 3), 0, 1, 2, 1, True),
    ((1, 1, 1, 1), 0, 1, 1, 8, True),      # depthwise
    ((0, 2, 1, 0), (1, 0), 2, 1, 2, False),
    ((2, 2), 0, 1, 1, 1, True),            # the last dim only
]


@pytest.mark.parametrize("pad,padding,stride,dilation,groups,bias", CASES)
def test_zero_padding_before_a_conv_is_the_convs_padding(pad, padding, stride, dilation,
                                                         groups, bias):
    x = RNG.standard_normal((2, 8, 13, 11)).astype(np.float32)
    w = RNG.standard_normal((16, 8 // groups, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    extra = (b,) if bias else ()

    def conv(functional):
        def f(x, w, *b):
            return functional.conv2d(functional.pad(x, pad), w, *b, stride=stride,
                                     padding=padding, dilation=dilation, groups=groups)
        return f
    compiled = _both(conv(F), conv(torch.nn.functional), x, w, *extra)
    assert "slice_update" not in compiled.code and "k_cat" not in compiled.code, compiled.code


@pytest.mark.parametrize("pad,value,mode", [((1, 1, 1, 1), 1.0, "constant"),
                                            ((1, 1, 1, 1), 0.0, "reflect"),
                                            ((1, 1, 1, 1, 1, 0), 0.0, "constant"),
                                            ((-1, 2, 1, -2), 0.0, "constant")])
def test_other_padding_is_left_or_taken_only_where_it_is_zeros(pad, value, mode):
    # a fill of ones, reflection, padded channels: not the conv's padding; a crop and a pad:
    # the crop stays, the zeros go into the conv
    x = RNG.standard_normal((1, 8, 9, 10)).astype(np.float32)
    cin = 9 if len(pad) == 6 else 8
    w = RNG.standard_normal((4, cin, 3, 3)).astype(np.float32)

    def conv(functional):
        def f(x, w):
            kwargs = {"value": value} if mode == "constant" else {}
            return functional.conv2d(functional.pad(x, pad, mode=mode, **kwargs), w)
        return f
    _both(conv(F), conv(torch.nn.functional), x, w)


def test_the_padded_value_read_elsewhere_and_gradients():
    x = RNG.standard_normal((2, 3, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)

    def f(x, w, functional):
        p = functional.pad(x, (1, 0, 0, 1))
        return functional.conv2d(p, w).sum() + (p * p).sum()
    xs, ws = dg.tensor(x, requires_grad=True), dg.tensor(w, requires_grad=True)
    step = dg.compile(lambda a, b: f(a, b, F))
    loss = step(xs, ws)
    loss.backward()
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    want = f(xt, wt, torch.nn.functional)
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_an_onnx_pad_before_a_conv_loads_without_the_padded_copy():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.ZeroPad2d((0, 1, 0, 1)),
                                torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
                                torch.nn.ZeroPad2d(1), torch.nn.Conv2d(32, 32, 3, groups=32))
    model.eval()
    x = RNG.standard_normal((1, 16, 28, 28)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "padded.onnx")
        torch.onnx.export(model, (torch.tensor(x),), path, dynamo=False, input_names=["x"])
        loaded = dg.onnx.load(path)
        got = loaded(dg.tensor(x))
    with torch.no_grad():
        want = model(torch.tensor(x)).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    code = loaded.code if hasattr(loaded, "code") else ""
    assert code and "k_cat" not in code and "slice_update" not in code, code
