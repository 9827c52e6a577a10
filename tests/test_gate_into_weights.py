"""The lowering rule ``gate_into_weights`` (``passes/excite.py``; the op
``gated_pointwise_blocked``, ``kernels/excite.py``'s ``gated_weights_blocked``): a
squeeze-and-excitation whose output only the next 1x1 conv reads, in a blocked region, has
its gate scale that conv's weights, image by image, instead of the image. Compiled against
eager and torch at batches 1 and 3, with and without the projection's residual and
activation, NaN and infinities in the input; and the places the precondition leaves alone
(more padded output channels than the plane's positions, the gated value read twice or as
the residual), still equal to eager and torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

import dualgraph as dg  # noqa: E402
from test_cnn_inference import compiled_eager_torch  # noqa: E402


def _block(lib, c=32, cout=24, squeezed=8, act="Hardswish", gate="Hardsigmoid",
           use="project", residual=False):
    """Three depthwise 3x3 convs (so that the blocked region pays for its conversions),
    then squeeze-and-excitation, then a 1x1 projection of the gated value (``use``:
    ``"twice"`` also adds the gated value to the output, ``"residual"`` adds it to the
    projection of the ungated one, ``cout == c``). ``residual``: the block's input added to
    the projection (``cout == c``)."""
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Sequential(*[m for _ in range(3) for m in (
                nn.Conv2d(c, c, 3, 1, 1, groups=c), getattr(nn, act)())])
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeezed, 1),
                                    getattr(nn, act)(), nn.Conv2d(squeezed, c, 1),
                                    getattr(nn, gate)())
            self.project = nn.Conv2d(c, cout, 1)

        def forward(self, x):
            h = self.dw(x)
            g = h * self.se(h)
            if use == "residual":
                return self.project(h) + g
            y = self.project(g)
            if use == "twice":
                y = y + g
            return y + x if residual else y
    return Block()


def _pair(seed, **kw):
    model, reference = _block(dg, **kw).eval(), _block(torch, **kw).eval()
    rng = np.random.default_rng(seed)
    state = {k: (rng.standard_normal(tuple(v.shape)) * 0.5).astype(np.float32)
             for k, v in reference.state_dict().items()}
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    return model, reference


def _ops(compiled):
    return [n.op.name for n in compiled.optimized_graph.nodes]


def _check(model, reference, x):
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, eager, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return _ops(compiled)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("kw", [dict(), dict(act="ReLU", gate="Sigmoid", cout=40),
                                dict(act="SiLU", gate="Sigmoid", cout=32, residual=True)])
def test_the_gate_scales_the_weights_equal_to_eager_and_torch(batch, kw):
    """On a 9x7 plane (63 positions, at least the projection's padded 24 or 48 output
    channels) the block's squeeze-and-excitation and projection are one
    gated_pointwise_blocked; compiled equals eager and torch."""
    model, reference = _pair(batch, **kw)
    x = np.random.default_rng(batch).standard_normal((batch, 32, 9, 7)).astype(np.float32)
    ops = _check(model, reference, x)
    assert ops.count("gated_pointwise_blocked") == 1, ops
    assert "squeeze_excite_blocked" not in ops and "pointwise_blocked" not in ops, ops


def test_nan_and_infinities_reach_the_output_as_in_eager():
    """A NaN in one image makes its gate NaN (its mean is), an infinity in another its
    gate 0 or 1 after the hard-sigmoid: ``(w * g) * x`` gives eager's ``w * (x * g)`` NaN
    for NaN, and for ``0 * inf``; the other images are untouched."""
    model, reference = _pair(0)
    x = np.random.default_rng(0).standard_normal((3, 32, 9, 7)).astype(np.float32)
    x[0, 3, 2, 2], x[1, 5, 4, 1] = np.nan, np.inf
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    assert "gated_pointwise_blocked" in _ops(compiled)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(eager))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw,size", [(dict(cout=40), (6, 7)),     # 48 channels, 42 positions
                                     (dict(use="twice", cout=32), (9, 7)),
                                     (dict(use="residual", cout=32), (9, 7))])
def test_the_precondition_leaves_the_gate_on_the_image(kw, size):
    """More padded output channels than positions (the gated weights would be larger than
    the image), the gated value read by two nodes, or read as the residual: the
    squeeze-and-excitation stays one squeeze_excite_blocked, and the values are eager's
    and torch's."""
    model, reference = _pair(1, **kw)
    x = np.random.default_rng(1).standard_normal((2, 32, *size)).astype(np.float32)
    ops = _check(model, reference, x)
    assert "gated_pointwise_blocked" not in ops and "squeeze_excite_blocked" in ops, ops
