"""torch's top-level spellings with torch's own arguments (``dualgraph/_aten_forms.py``), the
Tensor methods bound with them, and the nn names that go with them (``F.*_with_indices``,
``F.upsample_*``, ``F.pdist``, ``nn.NLLLoss2d``, ``nn.DataParallel``,
``utils.data.StackDataset``): values and gradients against torch, compiled against eager,
and torch's errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import dualgraph as dg  # noqa: E402
import dualgraph.nn.functional as F  # noqa: E402

RNG = np.random.default_rng(7)


def pair(*shape, positive=False, dtype=np.float32):
    a = RNG.standard_normal(shape).astype(dtype)
    if positive:
        a = np.abs(a) + 0.1
    return dg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def check(got, want, rtol=1e-5, atol=1e-6):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            check(g, w, rtol, atol)
        return
    if isinstance(want, torch.Tensor):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol,
                                   atol=atol)
        assert got.shape == tuple(want.shape) and str(got.dtype).split(".")[-1] == str(
            want.dtype).split(".")[-1]
    else:
        assert got == want


def check_grads(inputs, got, want, rtol=1e-4, atol=1e-5):
    """The sum of ``got`` / ``want`` times fixed weights, differentiated, against torch."""
    w = RNG.standard_normal(tuple(want.shape)).astype(np.float32)
    (got * dg.tensor(w)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    for d, t in inputs:
        np.testing.assert_allclose(d.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)


def test_norms_take_torchs_argument_orders():
    (x, tx), (w, tw), (b, tb) = pair(2, 6, 5), pair(5), pair(5)
    got, want = dg.layer_norm(x, (5,), w, b, 1e-5, True), torch.layer_norm(tx, (5,), tw, tb,
                                                                            1e-5, True)
    check(got, want)
    check_grads([(x, tx), (w, tw), (b, tb)], got, want)
    (x, tx), (w, tw), (b, tb) = pair(3, 6, 4), pair(6), pair(6)
    check(dg.group_norm(x, 3, w, b, 1e-5, True), torch.group_norm(tx, 3, tw, tb, 1e-5, True))
    mean, var = np.zeros(6, np.float32), np.ones(6, np.float32)
    dm, dv, tm, tv = dg.tensor(mean), dg.tensor(var), torch.tensor(mean), torch.tensor(var)
    got = dg.batch_norm(x, w, b, dm, dv, True, 0.1, 1e-5, False)
    want = torch.batch_norm(tx, tw, tb, tm, tv, True, 0.1, 1e-5, False)
    check(got, want)
    check(dm, tm)    # the running statistics updated the same way
    check(dv, tv)
    check(dg.batch_norm(x, w, b, dm, dv, False, 0.1, 1e-5, False),
          torch.batch_norm(tx, tw, tb, tm, tv, False, 0.1, 1e-5, False))
    check(dg.instance_norm(x, w, b, None, None, True, 0.1, 1e-5, False),
          torch.instance_norm(tx, tw, tb, None, None, True, 0.1, 1e-5, False))
    check(dg.rms_norm(x, (4,), None, 1e-6), torch.rms_norm(tx, (4,), None, 1e-6))


def test_embedding_takes_the_table_first_and_minus_one_as_no_padding():
    (w, tw) = pair(7, 3)
    ids = np.array([[0, 2, 6], [2, 2, 1]])
    for padding in (-1, 2):
        w.grad = tw.grad = None
        got = dg.embedding(w, dg.tensor(ids), padding)
        want = torch.embedding(tw, torch.tensor(ids), padding)
        check(got, want)
        check_grads([(w, tw)], got, want)


def test_dropout_forms_are_identity_when_not_training_and_scale_when_training():
    x, tx = pair(4, 5)
    check(dg.dropout(x, 0.5, False), torch.dropout(tx, 0.5, False))
    check(dg.feature_alpha_dropout(x, 0.5, False), torch.feature_alpha_dropout(tx, 0.5, False))
    y = dg.dropout(x, 0.5, True).detach().numpy()
    kept = y != 0
    np.testing.assert_allclose(y[kept], 2 * x.detach().numpy()[kept], rtol=1e-6)
    assert 0 < kept.sum() < kept.size


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_losses_take_torchs_reduction_enum(reduction):
    (a, ta), (b, tb), (c, tc) = pair(4, 5), pair(4, 5), pair(4, 5)
    y = np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    target = (RNG.random((4, 5)) > 0.5).astype(np.float32)
    cases = [
        (dg.binary_cross_entropy_with_logits(a, dg.tensor(target), None, None, reduction),
         torch.binary_cross_entropy_with_logits(ta, torch.tensor(target), None, None,
                                                reduction)),
        (dg.kl_div(a, b.detach().softmax(-1), reduction),
         torch.kl_div(ta, tb.detach().softmax(-1), reduction)),
        (dg.kl_div(a, b.detach(), reduction, log_target=True),
         torch.kl_div(ta, tb.detach(), reduction, log_target=True)),
        (dg.cosine_embedding_loss(a, b, dg.tensor(y), 0.1, reduction),
         torch.cosine_embedding_loss(ta, tb, torch.tensor(y), 0.1, reduction)),
        (dg.hinge_embedding_loss(a, dg.tensor(np.sign(target - 0.5)), 1.0, reduction),
         torch.hinge_embedding_loss(ta, torch.tensor(np.sign(target - 0.5)), 1.0, reduction)),
        (dg.margin_ranking_loss(a[:, 0], b[:, 0], dg.tensor(y), 0.2, reduction),
         torch.margin_ranking_loss(ta[:, 0], tb[:, 0], torch.tensor(y), 0.2, reduction)),
        (dg.poisson_nll_loss(a, dg.tensor(target), True, True, 1e-8, reduction),
         torch.poisson_nll_loss(ta, torch.tensor(target), True, True, 1e-8, reduction)),
        (dg.triplet_margin_loss(a, b, c, 1.0, 2.0, 1e-6, True, reduction),
         torch.triplet_margin_loss(ta, tb, tc, 1.0, 2.0, 1e-6, True, reduction)),
    ]
    for got, want in cases:
        check(got, want, rtol=1e-5, atol=1e-5)
    check_grads([(a, ta)], cases[0][0], cases[0][1])


def test_ctc_loss_takes_the_reduction_enum():
    logits = RNG.standard_normal((6, 2, 4)).astype(np.float32)
    targets = np.array([[1, 2], [3, 1]])
    got = dg.ctc_loss(dg.tensor(logits).log_softmax(-1), dg.tensor(targets), [6, 5], [2, 2],
                      0, 0, False)
    want = torch.ctc_loss(torch.tensor(logits).log_softmax(-1), torch.tensor(targets), [6, 5],
                          [2, 2], 0, 0, False)
    check(got, want, rtol=1e-5)
    with pytest.raises(ValueError, match="reduction=3"):
        dg.kl_div(dg.zeros(2), dg.zeros(2), 3)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_pdist_against_torch(p):
    x, tx = pair(5, 3)
    got, want = dg.pdist(x, p), torch.pdist(tx, p)
    check(got, want)
    check_grads([(x, tx)], got, want)
    check(F.pdist(x.detach(), p), torch.nn.functional.pdist(tx.detach(), p))
    with pytest.raises(ValueError, match="2-D"):
        dg.pdist(dg.zeros(2, 3, 4))


def test_pools_with_indices_and_constant_pad():
    x, tx = pair(2, 3, 9)
    check(dg.max_pool1d_with_indices(x, [3], [2], [1]),
          torch.max_pool1d_with_indices(tx, [3], [2], [1]))
    check(dg.adaptive_max_pool1d(x, 4), torch.adaptive_max_pool1d(tx, 4))
    x4, tx4 = pair(2, 3, 7, 6)
    tf = torch.nn.functional
    check(F.max_pool2d_with_indices(x4, 3, 2, 1), tf.max_pool2d_with_indices(tx4, 3, 2, 1))
    check(F.adaptive_max_pool2d_with_indices(x4, (3, 2)),
          tf.adaptive_max_pool2d_with_indices(tx4, (3, 2)))
    check(F.adaptive_max_pool1d_with_indices(x, 3), tf.adaptive_max_pool1d_with_indices(tx, 3))
    check(F.max_pool1d_with_indices(x, 2), tf.max_pool1d_with_indices(tx, 2))
    x5, tx5 = pair(1, 2, 5, 4, 6)
    check(F.max_pool3d_with_indices(x5, 2), tf.max_pool3d_with_indices(tx5, 2))
    check(dg.constant_pad_nd(x4, [1, 2, 0, 1], 0.5), torch.constant_pad_nd(tx4, [1, 2, 0, 1],
                                                                           0.5))


def test_deprecated_upsample_spellings():
    x, tx = pair(1, 2, 4, 5)
    tf = torch.nn.functional
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(F.upsample_bilinear(x, scale_factor=2), tf.upsample_bilinear(tx, scale_factor=2))
        check(F.upsample_bilinear(x, size=(7, 3)), tf.upsample_bilinear(tx, size=(7, 3)))
        check(F.upsample_nearest(x, scale_factor=3), tf.upsample_nearest(tx, scale_factor=3))


def test_arithmetic_and_creation_forms():
    x, tx = pair(3, 4)
    y, ty = pair(3, 4)
    check(dg.rsub(x, y), torch.rsub(tx, ty))
    check(dg.rsub(x, y, alpha=2.5), torch.rsub(tx, ty, alpha=2.5))
    check(dg.rsub(x, 3.0), torch.rsub(tx, 3.0))
    check(dg.rsub(x, 3.0, 2), torch.rsub(tx, 3.0, 2))
    check(dg.rsub(dg.tensor([1, 2]), 5), torch.rsub(torch.tensor([1, 2]), 5))
    check(dg.scalar_tensor(3), torch.scalar_tensor(3))
    check(dg.scalar_tensor(2, dtype=dg.int64), torch.scalar_tensor(2, dtype=torch.int64))
    check(dg.fill(x, 1.5), torch.fill(tx, 1.5))
    v, tv = pair()
    got, want = dg.fill(x, v), torch.fill(tx, tv)
    check(got, want)
    check_grads([(v, tv)], got, want)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for args in [(0, 1, 0.25), (1, 4), (5, 1, -1.5), (0.5, 2.5, 0.7)]:
            check(dg.range(*args), torch.range(*args))
        check(dg.range(1, 3, dtype=dg.int64), torch.range(1, 3, dtype=torch.int64))
    with pytest.warns(UserWarning, match="deprecated"):
        dg.range(0, 2)
    check(dg.ldexp(x, dg.tensor([1, 2, -1, 0])), torch.ldexp(tx, torch.tensor([1, 2, -1, 0])))
    a, ta = pair(4, 2, 3)
    b, tb = pair(4, 3, 5)
    c, tc = pair(2, 5)
    got = dg.addbmm(c, a, b, beta=0.5, alpha=2.0)
    want = torch.addbmm(tc, ta, tb, beta=0.5, alpha=2.0)
    check(got, want, rtol=1e-5, atol=1e-5)
    check_grads([(a, ta), (b, tb), (c, tc)], got, want)
    nan = dg.full((2, 5), float("nan"))
    check(dg.addbmm(nan, a, b, beta=0), torch.addbmm(torch.full((2, 5), float("nan")), ta, tb,
                                                     beta=0), rtol=1e-5, atol=1e-5)
    m = [pair(3, 4)[0], pair(4, 2)[0], pair(2, 5)[0]]
    check(dg.chain_matmul(*m), torch.chain_matmul(*[torch.tensor(t.detach().numpy())
                                                   for t in m]), atol=1e-5)


def test_split_argwhere_unravel():
    x = dg.arange(10.0)
    got = dg.split_with_sizes(x, [3, 7])
    assert [tuple(t.shape) for t in got] == [(3,), (7,)]
    assert [tuple(t.shape) for t in x.split_with_sizes([4, 6])] == [(4,), (6,)]
    with pytest.raises(RuntimeError, match="sum exactly to 10"):
        dg.split_with_sizes(x, [3, 3])
    m = np.array([[0, 1, 0], [2, 0, 3]])
    check(dg.argwhere(dg.tensor(m)), torch.argwhere(torch.tensor(m)))
    check(dg.tensor(m).argwhere(), torch.tensor(m).argwhere())
    for idx, shape in [(7, (2, 5)), ([0, 9, 13], (2, 7)), ([[1, 5], [3, 0]], (3, 2)),
                       (-1, (4, 3)), (5, 6)]:
        check(dg.unravel_index(dg.tensor(idx), shape),
              torch.unravel_index(torch.tensor(idx), shape))
    with pytest.raises((ValueError, RuntimeError)):
        dg.unravel_index(dg.tensor(12), (3, 4))


def test_scatters_into_copies_with_gradients():
    x, tx = pair(4, 5)
    s, ts = pair(5)
    got, want = dg.select_scatter(x, s, 0, 2), torch.select_scatter(tx, ts, 0, 2)
    check(got, want)
    check_grads([(x, tx), (s, ts)], got, want)
    x.grad = tx.grad = None
    s, ts = pair(4, 2)
    got, want = dg.slice_scatter(x, s, 1, 1, 5, 2), torch.slice_scatter(tx, ts, 1, 1, 5, 2)
    check(got, want)
    check_grads([(x, tx), (s, ts)], got, want)
    x.grad = tx.grad = None
    s, ts = pair(4)
    got, want = x.diagonal_scatter(s, 1), tx.diagonal_scatter(ts, 1)
    check(got, want)
    check_grads([(x, tx), (s, ts)], got, want)
    assert not np.shares_memory(got.detach().numpy(), x.detach().numpy())


def test_scatters_compile_as_eager():
    def f(x, s):
        return dg.slice_scatter(x, s * 2, 0, 1, 3) + dg.select_scatter(x, s[0], 0, 3).sum()
    x, s = dg.randn(4, 3), dg.randn(2, 3)
    np.testing.assert_allclose(dg.compile(f)(x, s).numpy(), f(x, s).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique_consecutive(dim):
    a = np.array([[1, 1, 2], [1, 1, 2], [3, 1, 2], [3, 1, 2], [1, 1, 2]])
    for inverse, counts in [(False, False), (True, False), (False, True), (True, True)]:
        flags = dict(return_inverse=inverse, return_counts=counts, dim=dim)
        check(dg.unique_consecutive(dg.tensor(a), **flags),
              torch.unique_consecutive(torch.tensor(a), **flags))
    v = dg.tensor([2.0, 2.0, 1.0, 1.0, 2.0])
    check(v.unique_consecutive(return_counts=True),
          torch.tensor([2.0, 2.0, 1.0, 1.0, 2.0]).unique_consecutive(return_counts=True))


@pytest.mark.parametrize("n,increasing", [(None, False), (4, True), (1, False), (0, True)])
def test_vander(n, increasing):
    x, tx = pair(3)
    got, want = dg.vander(x, n, increasing), torch.vander(tx, n, increasing)
    check(got, want, rtol=1e-5)
    # (torch's own vander backward fails: its in-place cumprod; against the derivative)
    cols = got.shape[1]
    if cols > 1:
        w = RNG.standard_normal((3, cols))
        (got * dg.tensor(w.astype(np.float32))).sum().backward()
        powers = np.arange(cols) if increasing else np.arange(cols)[::-1]
        xs = x.detach().numpy().astype(np.float64)[:, None]
        expect = (w * powers * xs ** np.maximum(powers - 1, 0)).sum(1)
        np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-4, atol=1e-5)
    check(dg.vander(dg.tensor([0, 2, 3])), torch.vander(torch.tensor([0, 2, 3])))


@pytest.mark.parametrize("kwargs", [{}, {"spacing": 0.5}, {"dim": 1, "edge_order": 2},
                                    {"spacing": [2.0, 0.5]}, {"dim": [0], "spacing": 3.0}])
def test_gradient_uniform(kwargs):
    x, tx = pair(5, 6)
    got, want = dg.gradient(x, **kwargs), torch.gradient(tx, **kwargs)
    check(got, want, rtol=1e-5, atol=1e-5)
    check_grads([(x, tx)], got[0], want[0])


def test_gradient_with_coordinates():
    x, tx = pair(6, 4)
    coords = np.array([0.0, 0.5, 1.5, 1.7, 3.0, 4.2], np.float32)
    got = dg.gradient(x, spacing=(dg.tensor(coords),), dim=0)
    want = torch.gradient(tx, spacing=(torch.tensor(coords),), dim=0)
    check(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="edge_order"):
        dg.gradient(x, edge_order=3)
    with pytest.raises(RuntimeError, match="at least"):
        dg.gradient(dg.zeros(2, 5), dim=0, edge_order=2)


def test_queries_and_real_views():
    x = dg.tensor([[1.0, 2.0]])
    t = torch.tensor([[1.0, 2.0]])
    assert dg.is_same_size(x, dg.zeros(1, 2)) and not x.is_same_size(dg.zeros(2, 1))
    assert dg.is_nonzero(dg.tensor([3])) and not dg.tensor([0.0]).is_nonzero()
    for bad in (x, dg.zeros(0)):
        with pytest.raises(RuntimeError, match="ambiguous"):
            bad.is_nonzero()
    for dtype in (dg.float32, dg.int64, dg.uint8, dg.bool, dg.int8, dg.float16):
        tdtype = getattr(torch, str(dtype).split(".")[-1])
        assert dg.zeros(1, dtype=dtype).is_signed() == torch.zeros(1, dtype=tdtype).is_signed()
    assert dg.is_complex(x) is x.is_complex() is t.is_complex() is False
    assert x.is_conj() is x.is_neg() is False
    assert x.real is x and dg.real(x) is x and x.conj() is x and x.resolve_conj() is x
    assert dg.resolve_neg(x) is x
    with pytest.raises(RuntimeError, match="non-complex"):
        x.imag
    m = dg.randn(3, 4)
    check(m.mH, torch.tensor(m.numpy()).mH)
    check(m.adjoint(), torch.tensor(m.numpy()).adjoint())
    check(m.H, torch.tensor(m.numpy()).H)
    with pytest.raises(RuntimeError, match="2-D"):
        dg.zeros(2, 3, 4).H


def test_in_place_comparisons_and_products():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([1.0, 3.0, 2.0], np.float32)
    for name in ("eq_", "ne_", "lt_", "le_", "gt_", "ge_", "hypot_"):
        x, t = dg.tensor(a), torch.tensor(a)
        assert getattr(x, name)(dg.tensor(b)) is x
        getattr(t, name)(torch.tensor(b))
        check(x, t)
    i = dg.tensor([1, 2, 3])
    i.gt_(2)
    check(i, torch.tensor([1, 2, 3]).gt_(2))
    c, tc = dg.zeros(2, 5), torch.zeros(2, 5)
    p, tp = pair(2, 3)
    q, tq = pair(3, 5)
    c.addmm_(p.detach(), q.detach(), beta=0.5, alpha=2)
    tc.addmm_(tp.detach(), tq.detach(), beta=0.5, alpha=2)
    check(c, tc)
    c3, tc3 = dg.ones(4, 2, 5), torch.ones(4, 2, 5)
    p3, tp3 = pair(4, 2, 3)
    q3, tq3 = pair(4, 3, 5)
    c3.baddbmm_(p3.detach(), q3.detach())
    tc3.baddbmm_(tp3.detach(), tq3.detach())
    check(c3, tc3, atol=1e-5)
    c.addbmm_(p3.detach(), q3.detach())
    tc.addbmm_(tp3.detach(), tq3.detach())
    check(c, tc, atol=1e-5)
    x, tx = pair(3, 4)
    check(x.hardshrink(0.3), tx.hardshrink(0.3))
    w = dg.tensor([0.25])
    check(x.prelu(w), tx.prelu(torch.tensor([0.25])))
    e = dg.zeros(2).new_empty_strided((2, 3), (3, 1))
    assert tuple(e.shape) == (2, 3) and e.dtype == dg.float32
    s = dg.empty_strided((2, 3), (1, 2), dtype=dg.float64)
    assert tuple(s.shape) == (2, 3) and s.dtype == dg.float64
    r = dg.randint_like(dg.zeros(3, 4), 2, 5)
    assert tuple(r.shape) == (3, 4) and r.dtype == dg.float32
    assert ((r >= 2) & (r < 5)).all()


def test_anomaly_and_default_device():
    assert dg.is_anomaly_enabled() is False
    dg.set_anomaly_enabled(True)
    try:
        assert dg.is_anomaly_enabled() is True
    finally:
        dg.set_anomaly_enabled(False)
    assert dg.is_anomaly_enabled() is False
    assert str(dg.get_default_device()) == "cpu"
    dg.set_default_device("cpu")
    dg.set_default_device(None)
    with pytest.raises(RuntimeError, match="CPU"):
        dg.set_default_device("cuda")


def test_nll_loss_2d_and_data_parallel():
    x, tx = pair(2, 3, 4, 4)
    y = RNG.integers(0, 3, (2, 4, 4))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.nn.NLLLoss2d()(tx.log_softmax(1), torch.tensor(y))
    check(dg.nn.NLLLoss2d()(x.log_softmax(1), dg.tensor(y)), want)
    inner = dg.nn.Linear(3, 2)
    model = dg.nn.DataParallel(inner)
    assert list(model.state_dict()) == ["module.weight", "module.bias"]
    assert model.module is inner
    out = model(dg.ones(4, 3))
    np.testing.assert_array_equal(out.detach().numpy(), inner(dg.ones(4, 3)).detach().numpy())
    assert dg.nn.parallel.DataParallel is dg.nn.DataParallel
    with pytest.raises(RuntimeError, match="CPU"):
        dg.nn.DataParallel(inner, device_ids=[0, 1])


def test_stack_dataset():
    from dualgraph.utils.data import StackDataset
    s = StackDataset([1, 2, 3], "abc")
    assert len(s) == 3 and s[1] == (2, "b")
    d = StackDataset(image=[1, 2], text=["x", "y"])
    assert d[0] == {"image": 1, "text": "x"}
    with pytest.raises(ValueError, match="mismatch"):
        StackDataset([1], [1, 2])
    with pytest.raises(ValueError, match="both"):
        StackDataset([1], a=[1])


@pytest.mark.parametrize("x_shape,w_shape,kwargs", [
    ((2, 4, 3, 5, 4), (4, 3, 2, 3, 2), {}),
    ((1, 4, 4, 3, 5), (4, 2, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((2, 6, 3, 4, 4), (6, 2, 3, 2, 2), dict(stride=(3, 1, 2), padding=(2, 0, 1), groups=3,
                                            dilation=(2, 1, 1))),
    ((1, 2, 2, 3, 3), (2, 3, 1, 1, 1), dict(stride=2)),
    ((4, 3, 5, 5), (4, 2, 2, 2, 2), dict(stride=2, output_padding=(1, 0, 1),
                                         dilation=(1, 2, 2))),     # unbatched
    ((1, 2, 3, 3, 3), (2, 2, 3, 3, 3), dict(padding=2)),
])
def test_conv_transpose3d_against_torch(x_shape, w_shape, kwargs):
    x, tx = pair(*x_shape)
    w, tw = pair(*w_shape)
    b, tb = pair(w_shape[1] * kwargs.get("groups", 1))
    got = F.conv_transpose3d(x, w, b, **kwargs)
    want = torch.nn.functional.conv_transpose3d(tx, tw, tb, **kwargs)
    check(got, want, rtol=1e-4, atol=1e-4)
    check_grads([(x, tx), (w, tw), (b, tb)], got, want, rtol=1e-4, atol=1e-4)


def test_conv_transpose3d_modules_and_compiled():
    m = dg.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1)
    tm = torch.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1)
    tm.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in m.state_dict().items()})
    x, tx = pair(1, 4, 3, 4, 5)
    check(m(x), tm(tx), rtol=1e-4, atol=1e-4)
    check(m(x, output_size=(6, 8, 10)), tm(tx, output_size=(6, 8, 10)), rtol=1e-4, atol=1e-4)
    lazy = dg.nn.LazyConvTranspose3d(2, 3)
    assert tuple(lazy(x).shape) == (1, 2, 5, 6, 7) and type(lazy) is dg.nn.ConvTranspose3d
    step = dg.compile(lambda v: m(v).relu().sum())
    np.testing.assert_allclose(float(step(x.detach())), float(m(x.detach()).relu().sum()),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose3d(x, dg.zeros(4, 2, 3, 3, 3), output_padding=1)


def test_conv_transpose3d_exports_to_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    m = dg.nn.ConvTranspose3d(4, 2, 3, stride=2, padding=1, groups=2).eval()
    x = dg.randn(1, 4, 3, 4, 5)
    dg.onnx.export(m, (x,), str(tmp_path / "ct3.onnx"))
    session = ort.InferenceSession(str(tmp_path / "ct3.onnx"))
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_sync_batch_norm_in_one_process_is_batch_norm():
    model = dg.nn.Sequential(dg.nn.Conv2d(3, 4, 3), dg.nn.BatchNorm2d(4),
                             dg.nn.Sequential(dg.nn.ReLU(), dg.nn.BatchNorm2d(4, momentum=None)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    synced = dg.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(synced[1], dg.nn.SyncBatchNorm)
    assert isinstance(synced[2][1], dg.nn.SyncBatchNorm) and synced[2][1].momentum is None
    assert synced[1].weight is model[1].weight          # (the parameters themselves, as torch)
    assert list(synced.state_dict()) == list(before)
    x = dg.randn(2, 3, 6, 6)
    plain = dg.nn.Sequential(dg.nn.Conv2d(3, 4, 3), dg.nn.BatchNorm2d(4),
                             dg.nn.Sequential(dg.nn.ReLU(), dg.nn.BatchNorm2d(4, momentum=None)))
    plain.load_state_dict(before)
    np.testing.assert_array_equal(synced(x).detach().numpy(), plain(x).detach().numpy())
    a = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    ours, theirs = dg.nn.SyncBatchNorm(4), torch.nn.SyncBatchNorm(4)
    check(ours(dg.tensor(a)), theirs(torch.tensor(a)))
    check(ours.running_var, theirs.running_var)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    with pytest.raises(ValueError, match="at least 2D"):
        ours(dg.zeros(4))


@pytest.mark.parametrize("shape,out", [((2, 3, 5, 6, 7), (2, 3, 4)), ((1, 2, 7, 5, 4),
                                                                    (3, None, 2)),
                                       ((2, 4, 4, 4), 2)])
def test_3d_adaptive_max_pool_unpool_and_power_pool(shape, out):
    a = RNG.standard_normal(shape).astype(np.float32)
    a[..., 1] = a[..., 0]   # (ties: the first in (D, H, W) order, as torch's)
    x, tx = dg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    tf = torch.nn.functional
    got, want = F.adaptive_max_pool3d(x, out, True), tf.adaptive_max_pool3d(tx, out, True)
    check(got, want)
    check_grads([(x, tx)], got[0], want[0])
    check(dg.nn.AdaptiveMaxPool3d(out)(x.detach()), torch.nn.AdaptiveMaxPool3d(out)(tx.detach()))
    pooled, where = F.max_pool3d(x.detach(), 2, return_indices=True)
    tpooled, twhere = tf.max_pool3d(tx.detach(), 2, return_indices=True)
    check(F.max_unpool3d(pooled, where, 2, output_size=shape[-3:]),
          tf.max_unpool3d(tpooled, twhere, 2, output_size=shape[-3:]))
    check(dg.nn.MaxUnpool3d(2)(pooled, where, shape[-3:]),
          torch.nn.MaxUnpool3d(2)(tpooled, twhere, shape[-3:]))
    check(F.lp_pool3d(x.detach(), 2.0, 2), tf.lp_pool3d(tx.detach(), 2.0, 2))
    check(dg.nn.LPPool3d(3.0, (2, 1, 2))(x.detach()),
          torch.nn.LPPool3d(3.0, (2, 1, 2))(tx.detach()), rtol=1e-4)


def test_histogram_typename_asarray_and_process_settings():
    x = RNG.standard_normal(50).astype(np.float32)
    for kwargs in (dict(bins=5), dict(bins=4, range=(-1.0, 1.0), density=True)):
        check(dg.histogram(dg.tensor(x), **kwargs), torch.histogram(torch.tensor(x), **kwargs),
              atol=1e-6)
    w = RNG.random(50).astype(np.float32)
    edges = [-2.0, 0.0, 1.0, 3.0]
    check(dg.histogram(dg.tensor(x), dg.tensor(edges), weight=dg.tensor(w)),
          torch.histogram(torch.tensor(x), torch.tensor(edges), weight=torch.tensor(w)),
          atol=1e-5)
    assert dg.typename(dg.zeros(1)) == "dualgraph.FloatTensor"
    assert dg.typename(3) == torch.typename(3) == "int"
    a = dg.zeros(3)
    assert dg.asarray(a) is a and dg.asarray(a, copy=True) is not a
    assert dg.asarray([1, 2]).dtype == dg.int64 and dg.asarray(np.ones(2)).dtype == dg.float64
    assert dg.asarray([1.0], requires_grad=True).requires_grad
    with pytest.raises(ValueError, match="copy=False"):
        dg.asarray(a, dtype=dg.float64, copy=False)
    check(dg.adjoint(dg.tensor(x[:6].reshape(2, 3))), torch.adjoint(torch.tensor(x[:6]
                                                                                .reshape(2, 3))))
    dg.set_num_interop_threads(2)
    assert dg.get_num_interop_threads() == 2
    assert dg.set_flush_denormal(True) is False
    dg.set_warn_always(True)
    assert dg.is_warn_always_enabled()
    dg.set_warn_always(False)
    assert dg.is_autocast_cpu_enabled() is False
    with dg.autocast("cpu", dtype=dg.bfloat16):
        assert dg.is_autocast_cpu_enabled() and dg.get_autocast_cpu_dtype() == dg.bfloat16
