"""Conv kernels writing a block of a concatenation's channels (``conv2d_cat``'s members at
any batch): the packed loop (dense, grouped, stride 2, asymmetric padding, dilation), the
1x1 loop on packed weights, Winograd's loops (odd planes), and the conv2d_epilogue kernels
that write through a fresh array (the direct loop, the tiles, a 1x1 GEMM, another dtype),
each as the op's kernel and as its fitted kernel, with and without a residual, into the
channels of a larger output whose other channels hold NaN: the block gets the bits of the
same kernel's contiguous output and nothing else is written; ``kernels.out_images``'s
flat view and its refusals; and a compiled fire module at batch 3 against eager and torch.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numba")

from dualgraph import kernels  # noqa: E402
from dualgraph.kernels import conv_packed, conv_winograd  # noqa: E402
from dualgraph.ops.epilogue import (CONV2D_EPILOGUE, CONV2D_PACKED,  # noqa: E402
                                    CONV2D_WINOGRAD)

from test_conv_tiles import _data, _torch_conv  # noqa: E402

# name, op, (n, c, h, w, cout, kernel, stride, padding, dilation, groups), act, residual_at
CASES = [
    ("packed grouped stride 2", CONV2D_PACKED,
     (3, 32, 9, 11, 32, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 2), "relu", "before"),
    ("packed spare lanes, asymmetric padding, dilation", CONV2D_PACKED,
     (3, 13, 12, 13, 21, (3, 2), (1, 2), ((2, 2), (0, 1)), (2, 1), 1), "silu", None),
    ("packed 1x1 on a 7x7 plane", CONV2D_PACKED,
     (3, 13, 7, 7, 37, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1), "clamp", "after"),
    ("winograd odd plane", CONV2D_WINOGRAD,
     (3, 16, 9, 7, 24, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1), "relu", "before"),
    ("epilogue depthwise stride 2", CONV2D_EPILOGUE,
     (3, 8, 11, 9, 8, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 8), "relu", "after"),
    ("epilogue dense 3x3", CONV2D_EPILOGUE,
     (2, 5, 9, 10, 7, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1), "none", None),
    ("epilogue 1x1", CONV2D_EPILOGUE,
     (3, 3, 6, 5, 4, (1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1), "relu", "before"),
    ("packed two pairs an item, stride 1", CONV2D_PACKED,
     (3, 13, 9, 10, 40, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1), "relu", "before"),
]


def _operands(op, case, act, residual_at):
    """The op's inputs and attrs for a conv ``case``, and its output's shape."""
    x, w, b, conv = _data(case)
    shape = tuple(_torch_conv(x, w, b, **conv).shape)
    residual = ((np.random.default_rng(1).standard_normal(shape).astype(np.float32),)
                if residual_at else ())
    attrs = dict(act=act, bounds=(0.0, 6.0) if act == "clamp" else (-np.inf, np.inf),
                 residual_at=residual_at)
    if op is CONV2D_PACKED:
        return (x, conv_packed.pack(w), b, *residual), dict(
            attrs, kernel_size=w.shape[2:], out_channels=w.shape[0], **conv), shape
    if op is CONV2D_WINOGRAD:
        return (x, conv_winograd.transform_weight(w), b, *residual), dict(
            attrs, padding=conv["padding"]), shape
    return (x, w, b, *residual), dict(attrs, **conv), shape


def _into_block(run, shape, before=5, after=3):
    """``run(out=block)`` with ``block`` channels ``before:before + C`` of a NaN-filled
    ``(N, before + C + after, Ho, Wo)`` array: the block, and the channels around it."""
    n, c, ho, wo = shape
    whole = np.full((n, before + c + after, ho, wo), np.nan, np.float32)
    block = whole[:, before:before + c]
    assert not block.flags.c_contiguous
    assert run(out=block) is block
    return block, np.concatenate([whole[:, :before], whole[:, before + c:]], 1)


@pytest.mark.parametrize("fitted", [False, True], ids=["kernel", "fitted"])
@pytest.mark.parametrize("name,op,case,act,residual_at", CASES, ids=[c[0] for c in CASES])
def test_a_block_of_a_concatenation_gets_the_contiguous_bits(name, op, case, act,
                                                             residual_at, fitted):
    inputs, attrs, shape = _operands(op, case, act, residual_at)
    want = op.kernel(*inputs, **attrs)
    if fitted:
        spec = op.specialise(*inputs, **attrs)
        assert spec is not None, name
        run = spec[1]
        np.testing.assert_array_equal(run(*inputs), want)
    else:
        def run(*arrays, out=None):
            return op.kernel(*arrays, **attrs, out=out)
    block, around = _into_block(lambda out: run(*inputs, out=out), shape)
    np.testing.assert_array_equal(block, want)
    assert np.isnan(around).all(), name
    if op is CONV2D_EPILOGUE and residual_at is None and act == "none":
        x, w, b, conv = _data(case)
        np.testing.assert_allclose(block, _torch_conv(x, w, b, **conv).numpy(), rtol=1e-5,
                                   atol=1e-5)


def test_another_dtype_writes_its_block_too():
    """float64 takes NumPy's conv (no loop), written through a fresh array."""
    x, w, b, conv = _data(CASES[5][2])
    x, w, b = (a.astype(np.float64) for a in (x, w, b))
    attrs = dict(act="relu", bounds=(-np.inf, np.inf), residual_at=None, **conv)
    want = CONV2D_EPILOGUE.kernel(x, w, b, **attrs)
    whole = np.full((2, 9, *want.shape[2:]), np.nan)
    assert CONV2D_EPILOGUE.kernel(x, w, b, **attrs, out=whole[:, 1:8]) is not None
    np.testing.assert_array_equal(whole[:, 1:8], want)
    assert np.isnan(whole[:, [0, 8]]).all()


def test_out_images():
    y = np.zeros((3, 6, 2, 3), np.float32)
    flat, stride = kernels.out_images(y)
    assert flat.shape == (108,) and stride == 36 and np.shares_memory(flat, y)
    flat, stride = kernels.out_images(y[:, 2:5])
    assert flat.shape == (2 * 36 + 18,) and stride == 36 and flat.flags.c_contiguous
    flat[stride + 1] = 7.0          # (image 1, channel 0, row 0, column 1)
    assert y[1, 2, 0, 1] == 7.0 and np.count_nonzero(y) == 1
    assert kernels.out_images(y[1:2, 2:5])[1] == 18        # (one image: contiguous)
    assert kernels.out_images(np.zeros((0, 4, 2, 2), np.float32)[:, 1:3])[0].size == 0
    for bad in (y[:, :, :, 1:], y[::-1], y[:, ::2]):
        with pytest.raises(ValueError, match="each image must be contiguous"):
            kernels.out_images(bad)
    read_only = y[:, 1:3]
    read_only.flags.writeable = False
    with pytest.raises(ValueError):
        kernels.out_images(read_only)


def test_a_fire_module_at_batch_3_writes_its_packed_branches_in_place():
    """A fire module whose expansions the packed loops take (16 -> 32 1x1 and 3x3), at
    batch 3: one conv2d_cat of two conv2d_packed members, equal to eager and torch."""
    from test_cnn_inference import _ops, compiled_eager_torch, fire
    import dualgraph as dg
    model, reference = fire(dg, 24, 16, 32).eval(), fire(torch, 24, 16, 32).eval()
    rng = np.random.default_rng(5)
    state = {k: (rng.standard_normal(v.shape) * 0.2).astype(np.float32)
             for k, v in reference.state_dict().items()}
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    x = rng.standard_normal((3, 24, 11, 9)).astype(np.float32)
    compiled, got, eager, want = compiled_eager_torch(model, reference, x)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (cat,) = [n for n in compiled.optimized_graph.nodes if n.op.name == "conv2d_cat"]
    assert [m[0] for m in cat.attrs["members"]] == ["conv2d_packed"] * 2, _ops(compiled)
