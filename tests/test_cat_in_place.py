"""Concatenations grown in place (the lowering rule ``cat_in_place``: ``cat_grown``,
``slice_update_in_place``, ``conv2d_into``, slices): compiled dense blocks (each layer's
output joined to all before it, written there by its conv; pre-activation layers read
the growing value) against eager and torch at batch 1 and 3, and in a training step
(gradients as eager's); chains along the last dim, a value extended twice (a fork: left
alone), a link returned (the chain stops before it), a link read after later writes; the
ops against their decompositions; the 1x1 loop reading the first channels of a larger
buffer (images apart) with the bits of a contiguous copy."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dualgraph as dg  # noqa: E402
from dualgraph.codegen import Executable  # noqa: E402
from dualgraph.graph import Graph, verify  # noqa: E402
from dualgraph.ops.shape import CAT_GROWN, SLICE_UPDATE_IN_PLACE  # noqa: E402
from dualgraph.passes import cat_in_place  # noqa: E402

from test_conv_prologue import _same_weights  # noqa: E402


def _dense_block(lib, cin=12, growth=8, layers=3):
    """DenseNet's block: BatchNorm-ReLU-1x1-BatchNorm-ReLU-3x3 layers, each output joined
    to its input."""
    nn = lib.nn

    class Layer(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, 16, 1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU(), nn.Conv2d(16, growth, 3, 1, 1, bias=False))

        def forward(self, x):
            return lib.cat([x, self.body(x)], 1)
    return nn.Sequential(*[Layer(cin + k * growth) for k in range(layers)],
                         nn.BatchNorm2d(cin + layers * growth), nn.ReLU(),
                         nn.Conv2d(cin + layers * growth, 10, 1))


@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_dense_block_grows_its_concatenation_in_place(batch):
    m, ref = _dense_block(dg), _dense_block(torch)
    _same_weights(m, ref)
    m.eval(), ref.eval()
    x = np.random.default_rng(1).standard_normal((batch, 12, 9, 9)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    compiled = dg.compile(m)
    with dg.no_grad():
        got = compiled(dg.tensor(x)).numpy()
        again = compiled(dg.tensor(x)).numpy()   # (the buffers reused)
        eager = m(dg.tensor(x)).numpy()
    with torch.no_grad():
        want = ref(torch.tensor(x)).numpy()
    ops = [n.op.name for n in compiled.optimized_graph.nodes]
    assert "cat" not in ops and ops.count("cat_grown") == 1
    assert ops.count("conv2d_into") == 3    # (each layer's 3x3 conv writes its block)
    scale = np.nanmax(np.abs(want))
    for g in (got, again):
        assert np.array_equal(np.isnan(g), np.isnan(want))
        np.testing.assert_allclose(g, eager, rtol=1e-5, atol=1e-6 * scale, equal_nan=True)
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)


def _chain(shape=(2, 3, 4), dim=1, fork=False, returned=False):
    """x -> c1 = cat(x, y1) -> c2 = cat(c1, y2) -> c3 = cat(c2, y3, y1); exp(c1) read after
    the later links; with ``fork`` c1 also extended by another cat, with ``returned`` c2
    returned."""
    g = Graph()
    x = g.add_input(shape, "float32", name="x")
    ys = [g.add_input(shape[:dim] + (k + 1,) + shape[dim + 1:], "float32", name=f"y{k}")
          for k in range(3)]
    (c1,) = g.add_node("cat", [x, ys[0]], {"dim": dim}, names=["c1"])
    (c2,) = g.add_node("cat", [c1, ys[1]], {"dim": dim}, names=["c2"])
    (c3,) = g.add_node("cat", [c2, ys[2], ys[0]], {"dim": dim}, names=["c3"])
    (e,) = g.add_node("exp", [c1], names=["e"])
    outs = [c3, e]
    if fork:
        outs += g.add_node("cat", [c1, ys[1]], {"dim": dim}, names=["f"])
    if returned:
        outs.append(c2)
    g.set_outputs(outs)
    return g


@pytest.mark.parametrize("case, grown, writes", [
    (dict(), 1, 4), (dict(dim=2, shape=(2, 3, 4)), 1, 4),
    (dict(fork=True), 1, 3),       # (c1 extended twice: the chain starts at c2)
    (dict(returned=True), 1, 2),   # (c2 returned: the chain c1, c2; c3 a cat of its own)
])
def test_chains_in_place_match_the_graph_and_keep_their_preconditions(case, grown, writes):
    before = _chain(**case)
    after, report = cat_in_place(before)
    verify(after)
    ops = [n.op.name for n in after.nodes]
    assert (ops.count("cat_grown"), ops.count("slice_update_in_place")) == (grown, writes)
    r = np.random.default_rng(2)
    args = [r.standard_normal(v.shape).astype(np.float32) for v in before.inputs]
    for got, want in zip(after(*args), before(*args), strict=True):
        assert np.array_equal(got, want)
    run = Executable(before, passes={"cat_in_place"})   # (generated code, buffers)
    assert "slice_update_in_place" in run.code
    for _ in range(2):
        for got, want in zip(run.run(args), before(*args), strict=True):
            assert np.array_equal(got, want)


def test_the_ops_match_their_decompositions():
    """``cat_grown``, ``slice_update_in_place`` and ``conv2d_into`` (a 1x1 and a 3x3
    packed conv at batch 2, the images of the block apart), each as its kernel and, for
    ``conv2d_into``, its fitted kernel."""
    r = np.random.default_rng(3)
    x, y = (r.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (2, 2, 4)))
    grown = CAT_GROWN.kernel(x, y, dim=1, size=7)
    want = CAT_GROWN.decomposition(dg.tensor(x), dg.tensor(y), dim=1, size=7).numpy()
    assert np.array_equal(grown, want) and not grown[:, 5:].any()
    v = r.standard_normal((2, 2, 4)).astype(np.float32)
    index = (None, (5, 7, 1), None)
    want = SLICE_UPDATE_IN_PLACE.decomposition(dg.tensor(grown), dg.tensor(v),
                                               index=index).numpy()
    got = SLICE_UPDATE_IN_PLACE.kernel(grown, v, index=index)
    assert got is grown and np.array_equal(got, want)
    pytest.importorskip("numba")
    from dualgraph.kernels import conv_packed
    from dualgraph.ops.epilogue import CONV2D_INTO, CONV2D_PACKED, cat_member
    for k in (1, 3):
        x = r.standard_normal((2, 6, 5, 7)).astype(np.float32)
        w = conv_packed.pack(r.standard_normal((9, 6, k, k)).astype(np.float32))
        b = r.standard_normal(9).astype(np.float32)
        attrs = dict(act="relu", bounds=(-np.inf, np.inf), residual_at=None, stride=(1, 1),
                     padding=((k // 2, k // 2),) * 2, dilation=(1, 1), kernel_size=(k, k),
                     out_channels=9, groups=1)
        members = (cat_member(CONV2D_PACKED, 3, attrs),)
        buf = r.standard_normal((2, 14, 5, 7)).astype(np.float32)
        want = CONV2D_INTO.decomposition(*map(dg.tensor, (buf, x, w, b)), members=members,
                                         at=4).numpy()
        fitted = CONV2D_INTO.specialise(*map(dg.tensor, (buf, x, w, b)), members=members,
                                        at=4)[1]
        for run in (lambda *a: CONV2D_INTO.kernel(*a, members=members, at=4), fitted):
            got = run(buf.copy(), x, w, b)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            assert np.array_equal(got[:, :4], buf[:, :4])
            assert np.array_equal(got[:, 13:], buf[:, 13:])


def test_the_1x1_loop_reads_a_buffers_first_channels_as_a_contiguous_copy():
    pytest.importorskip("numba")
    from dualgraph.kernels import conv_packed, conv_pointpacked
    r = np.random.default_rng(4)
    buf = r.standard_normal((3, 50, 7, 9)).astype(np.float32)
    w = r.standard_normal((24, 30, 1, 1)).astype(np.float32)
    b, s, t = (r.standard_normal(n).astype(np.float32) for n in (24, 30, 30))
    for pre in (None, (s, t)):
        got, want = (np.empty((3, 24, 7, 9), np.float32) for _ in range(2))
        conv_pointpacked.conv(buf[:, :30], conv_packed.pack(w), got, b, pre=pre, pre_act=1)
        conv_pointpacked.conv(np.ascontiguousarray(buf[:, :30]), conv_packed.pack(w), want,
                              b, pre=pre, pre_act=1)
        assert np.array_equal(got, want)


def test_a_training_step_through_a_dense_block_matches_eager():
    """The rule in a training step's graph (the cats' gradients are slices of theirs):
    the loss and every parameter's gradient as eager computes them."""
    m = _dense_block(dg)
    x = dg.tensor(np.random.default_rng(6).standard_normal((2, 12, 6, 6)).astype(np.float32))

    def step(x):
        loss = (m(x) ** 2).mean()
        loss.backward()
        return loss
    compiled, results = dg.compile(step), []
    for run in (step, compiled):
        for p in m.parameters():
            p.grad = None
        loss = run(x)
        results.append((loss.detach().numpy(), [p.grad.numpy().copy() for p in m.parameters()]))
    assert "cat_grown" in [n.op.name for n in compiled.optimized_graph.nodes]
    (want, want_grads), (got, got_grads) = results
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
