"""The eager per-op shortcuts give what the general path gives: grad mode read from the
thread only while some thread departs from the default (other threads, nesting, anomaly,
exceptions), ``x[i]`` with an int (one select op), the float32 sine's kept loop entry, ``sum``,
the engine's inline gradient checks (dtype and number gradients), the user's line of a node,
``stack`` as one op, the one-op smooth L1 loss, keys of ints and slices without the general
parse, the mean kernel without ``np.mean``, small float sums without the general checks,
``var`` as one op, and sums in NumPy's order whatever the shortcut or the layout."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import dualgraph as dg
from dualgraph.autograd.tape import departures, grad_mode


def _chain(lib, x):
    y = x
    for _ in range(3):
        y = y * 0.9 + 0.1 * lib.sin(y)
    return y.sum()


def test_departures_count_blocks_and_return_to_zero_after_an_exception():
    before = dict(departures)   # (0 and 0, unless a test left a block suspended)
    with dg.no_grad():
        assert departures["enabled"] == before["enabled"] + 1
        with dg.enable_grad():   # back to the default: not a departure
            assert departures["enabled"] == before["enabled"] + 1
            x = dg.ones(3, requires_grad=True)
            assert (x * 2).requires_grad   # this thread's flag is read: grad is on
        assert not (x * 2).requires_grad
    with pytest.raises(ValueError):
        with dg.no_grad(), dg.autograd.detect_anomaly():
            raise ValueError
    assert departures == before


def test_no_grad_in_another_thread_leaves_this_thread_recording():
    x0 = np.random.default_rng(0).random(5).astype(np.float32)
    inside, release = threading.Event(), threading.Event()

    def other():
        with dg.no_grad():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    try:
        assert departures["enabled"] >= 1 and grad_mode.enabled
        x = dg.tensor(x0, requires_grad=True)
        loss = _chain(dg, x)
        loss.backward()
    finally:
        release.set()
        t.join()
    xt = torch.tensor(x0, requires_grad=True)
    _chain(torch, xt).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)


def test_a_thread_started_inside_no_grad_records():
    out = {}

    def other():
        x = dg.ones(3, requires_grad=True)
        out["y"] = x * 3

    with dg.no_grad():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert out["y"].requires_grad and out["y"].grad_fn is not None


def test_anomaly_still_caught_with_the_shortcut():
    x = dg.tensor([-1.0, 1.0], requires_grad=True)
    with dg.autograd.detect_anomaly():
        with pytest.raises(FloatingPointError, match="test_eager_fast_paths.py"):
            dg.sqrt(x)
    dg.sqrt(x)   # outside: NaN allowed, no error


def test_set_detect_anomaly_as_a_call_and_as_a_block():
    """(torch.autograd.set_detect_anomaly was missing.) A plain call switches anomaly mode
    for the thread until switched back; a block puts it back at its end."""
    x = dg.tensor([-1.0, 1.0], requires_grad=True)
    with dg.autograd.set_detect_anomaly(True):
        with pytest.raises(FloatingPointError, match="test_eager_fast_paths.py"):
            dg.sqrt(x)
    dg.sqrt(x)
    dg.autograd.set_detect_anomaly(True)
    try:
        with pytest.raises(FloatingPointError):
            dg.sqrt(x)
        with dg.autograd.set_detect_anomaly(False):
            dg.sqrt(x)
        with pytest.raises(FloatingPointError):
            dg.sqrt(x)
    finally:
        dg.autograd.set_detect_anomaly(False)
    dg.sqrt(x)


@pytest.mark.parametrize("key", [0, 2, -1, -3])
def test_int_index_matches_torch_values_and_gradient(key):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, xt = dg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, yt = x[key], xt[key]
    np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
    (y * y).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_int_index_is_a_view_and_out_of_range_names_the_dim():
    x = dg.zeros(3, 2)
    x[1].add_(5.0)
    assert x.tolist() == [[0.0, 0.0], [5.0, 5.0], [0.0, 0.0]]
    with pytest.raises(IndexError, match="index 3 is out of range for dim 0 with size 3"):
        x[3]
    with pytest.raises(IndexError):
        dg.tensor(1.0)[0]


def test_float32_sine_same_values_for_unaligned_and_strided_inputs():
    a = np.random.default_rng(1).standard_normal(17).astype(np.float32)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    raw[1:] = a.view(np.uint8)
    unaligned = np.frombuffer(raw.data, np.float32, a.size, offset=1)
    assert not unaligned.flags.aligned
    expect = dg.sin(dg.tensor(a)).numpy()
    np.testing.assert_array_equal(dg.sin(dg.tensor(unaligned)).numpy(), expect)
    m = np.stack([a, a])
    np.testing.assert_array_equal(dg.cos(dg.tensor(m).t()).numpy(),
                                  dg.cos(dg.tensor(np.ascontiguousarray(m.T))).numpy())
    np.testing.assert_allclose(expect, np.sin(a), atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_sum_dtypes_match_torch(dtype):
    a = (np.random.default_rng(2).random((3, 4)) * 5).astype(dtype)
    for dim in (None, 0, (0, 1), -1):
        got = dg.sum(dg.tensor(a), dim=dim) if dim is not None else dg.tensor(a).sum()
        want = torch.sum(torch.tensor(a), dim=dim) if dim is not None else torch.tensor(a).sum()
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sums_of_a_few_elements_per_result_have_numpys_bits(dtype):
    """Big arrays summed over a few (2-8) elements per result add strided slices (the
    kernel's shortcut), in ``np.add.reduce``'s order: pairwise along the dims after the
    last kept one (eight as a tree), row after row along the others, and +0.0 for an
    all -0.0 sum; the fused kernels sum so too."""
    import itertools
    rng = np.random.default_rng(5)
    for shape in [(1024, 8), (1024, 7), (2, 1024, 4), (8, 1024), (4, 1, 1024, 2), (512, 1, 8)]:
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        x.flat[::7] = -0.0
        x[..., :1] = -0.0
        for r in range(1, len(shape) + 1):
            for dims in itertools.combinations(range(len(shape)), r):
                if not 1 < np.prod([shape[d] for d in dims]) <= 8:
                    continue
                got = dg.tensor(x).sum(dim=dims).numpy()
                want = np.add.reduce(x, axis=dims)
                assert got.tobytes() == want.tobytes(), (shape, dims)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_float_sums_take_the_shortcut_with_the_general_paths_bits(dtype):
    """A float32/float64 sum of fewer than ``kernels.MIN_ELEMENTS`` elements with no dtype
    asked for is the kernel's last call alone: the same bits as the general path (an
    explicit dtype of the same kind takes it), torch's values and gradients, over odd
    shapes, every dims, keepdim, a 0-d and an empty tensor, ``out=`` and a transposed
    view (by its rows, as before)."""
    from dualgraph.ops import reduce
    rng = np.random.default_rng(7)
    shapes = [(), (0,), (1,), (3, 5), (1, 3, 7), (3, 1, 5, 2), (5, 0, 2)]
    for shape in shapes:
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        dims_all = [None] + [(d,) for d in range(len(shape))] + [tuple(range(len(shape)))]
        for dims in dims_all:
            norm = tuple(range(len(shape))) if dims is None else dims
            for keepdim in (False, True):
                fast = reduce._sum_kernel(x, norm, keepdim)
                general = reduce._sum_kernel(x, norm, keepdim, dtype=x.dtype)
                assert fast.dtype == general.dtype == x.dtype
                assert fast.shape == general.shape
                assert fast.tobytes() == general.tobytes(), (shape, dims, keepdim)
                got = dg.sum(dg.tensor(x), dim=dims, keepdim=keepdim) if dims is not None \
                    else dg.tensor(x).sum()
                want = torch.sum(torch.tensor(x), dim=dims, keepdim=keepdim) \
                    if dims is not None else torch.tensor(x).sum()
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-4)
    m = (rng.standard_normal((6, 9)) * 100).astype(dtype)
    into = np.empty(9, dtype)
    assert reduce._sum_kernel(m, (0,), False, out=into) is into
    assert into.tobytes() == np.add.reduce(m, axis=0).tobytes()
    for dim in (0, 1):   # (not contiguous: the general path, its rows' order)
        got = dg.tensor(m).t().sum(dim=dim).numpy()
        assert got.tobytes() == np.add.reduce(np.ascontiguousarray(m.T), axis=dim).tobytes()
    w = dg.tensor(m, requires_grad=True)
    tw = torch.tensor(m, requires_grad=True)
    (w.sum(1) * dg.tensor(np.arange(6.0, dtype=dtype))).sum().backward()
    (tw.sum(1) * torch.tensor(np.arange(6.0, dtype=dtype))).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())


def test_a_transposed_view_sums_as_its_rows_do():
    """NumPy sums in memory order; eager sums and means read a float array by rows, as a
    compiled kernel does, so the bits do not depend on the layout."""
    x = (np.random.default_rng(6).standard_normal((300, 96)) * 100).astype(np.float32)
    t = dg.tensor(x).t()
    c = np.ascontiguousarray(x.T)
    for dim in (0, 1):
        assert t.sum(dim=dim).numpy().tobytes() == np.add.reduce(c, axis=dim).tobytes()
        assert t.mean(dim=dim).numpy().tobytes() == np.mean(c, axis=dim).tobytes()


def test_engine_converts_vjp_gradients_of_another_dtype_and_plain_numbers():
    x = dg.tensor([1.0, 2.0], dtype=dg.float64, requires_grad=True)
    y = (x.float() * 3).sum()   # the cast's VJP gets a float32 gradient
    y.backward()
    assert x.grad.dtype == dg.float64 and x.grad.tolist() == [3.0, 3.0]


def test_node_names_the_user_line_of_a_deep_call():
    gru = dg.nn.GRU(3, 4, batch_first=True)
    out, _ = gru(dg.ones(1, 2, 3))   # the line every node of the layer names
    line = test_node_names_the_user_line_of_a_deep_call.__code__.co_firstlineno + 2
    assert out.grad_fn.location.endswith(f"test_eager_fast_paths.py:{line}")


def test_int_index_and_unbind_record_one_node_each_and_compile_alike():
    x = dg.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4), requires_grad=True)
    row = x[1]
    assert row.grad_fn.op.name == "select" and row.grad_fn.next[0][0].leaf is x
    parts = dg.unbind(x, 1)
    assert [p.grad_fn.op.name for p in parts] == ["select"] * 4

    def f(x):
        return sum(p * (i + 1) for i, p in enumerate(x.unbind(1))).sum() + x[2].sum()
    f(x).backward()
    eager_grad = x.grad.numpy().copy()
    x.grad = None
    dg.compile(f)(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), eager_grad)
    np.testing.assert_array_equal(eager_grad, [[1, 2, 3, 4], [1, 2, 3, 4], [2, 3, 4, 5]])


def test_a_one_d_int_index_is_a_zero_d_view():
    x = dg.zeros(3)
    y = x[2]
    assert y.shape == () and y._data.base is not None
    y.add_(4.0)
    assert x.tolist() == [0.0, 0.0, 4.0]


def test_stack_is_one_op_recorded_or_not():
    rng = np.random.default_rng(3)
    arrays = [rng.random((2, 3)).astype(np.float32) for _ in range(3)]
    for dim in (0, 1, 2, -1):
        plain = dg.stack([dg.tensor(a) for a in arrays], dim)
        leaves = [dg.tensor(a, requires_grad=True) for a in arrays]
        recorded = dg.stack(leaves, dim)
        assert plain.grad_fn is None and recorded.grad_fn.op.name == "stack"
        np.testing.assert_array_equal(plain.numpy(), recorded.detach().numpy())
        np.testing.assert_array_equal(plain.numpy(), np.stack(arrays, dim))
    mixed = dg.stack([dg.tensor([1, 2]), dg.tensor([0.5, 1.5])])
    assert mixed.dtype == dg.float32 and mixed.tolist() == [[1.0, 2.0], [0.5, 1.5]]


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_smooth_l1_is_one_node_and_mixed_dtypes_take_the_composite(beta):
    F = dg.nn.functional
    x = dg.tensor([0.2, -3.0, 1.1], requires_grad=True)
    loss = F.smooth_l1_loss(x, dg.tensor([0.0, 0.0, 0.0]), beta=beta)
    assert loss.grad_fn.op.name == "smooth_l1_loss"
    loss.backward()
    xt = torch.tensor([0.2, -3.0, 1.1], requires_grad=True)
    want = torch.nn.functional.smooth_l1_loss(xt, torch.zeros(3), beta=beta)
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    # a float64 target against float32 input: promoted as torch does, by the composite
    got = F.smooth_l1_loss(dg.tensor([0.2, -3.0]), dg.tensor([0.0, 1.0], dtype=dg.float64),
                           beta=beta)
    ref = torch.nn.functional.smooth_l1_loss(torch.tensor([0.2, -3.0]),
                                             torch.tensor([0.0, 1.0], dtype=torch.float64),
                                             beta=beta)
    assert got.dtype == dg.float64 and ref.dtype == torch.float64
    np.testing.assert_allclose(got.item(), ref.item(), rtol=1e-6)
    zero_d = F.smooth_l1_loss(dg.tensor(0.3), dg.tensor(1.0), beta=beta, reduction="none")
    ref = torch.nn.functional.smooth_l1_loss(torch.tensor(0.3), torch.tensor(1.0), beta=beta,
                                             reduction="none")
    assert zero_d.shape == () and abs(zero_d.item() - ref.item()) < 1e-6


BASIC_KEYS = [slice(None, 3), (slice(None, 3), slice(None)), (slice(1, None, 2), -1), (-1,),
              2, (0, 0), (0, 0, 0), (slice(-3, -1), slice(10, 20)), (slice(None, None, 3),),
              (slice(4, 1),), (1, slice(2, 5), slice(None, None, 2)), slice(None)]


@pytest.mark.parametrize("key", BASIC_KEYS, ids=repr)
def test_keys_of_ints_and_slices_match_torch_eager_and_compiled(key):
    """``x[:6, :]``, ``x[:, -1]``: the keys the general parse is skipped for."""
    data = np.random.default_rng(4).random((5, 6, 7)).astype(np.float32)
    x, xt = dg.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    y, yt = x[key], xt[key]
    assert tuple(y.shape) == tuple(yt.shape)
    np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
    w = np.random.default_rng(5).random(tuple(yt.shape)).astype(np.float32)
    (y * dg.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
    if y.numel():
        x2 = dg.tensor(data)
        x2[key] = 0.0     # a view: written through, as torch
        assert (x2.numpy() == 0).sum() >= y.numel()
    compiled = dg.compile(lambda t: t[key] * 2)(dg.tensor(data))
    np.testing.assert_array_equal(compiled.numpy(), yt.detach().numpy() * 2)


@pytest.mark.parametrize("key, error", [((5,), IndexError), ((0, 7), IndexError),
                                        ((slice(None, None, -1),), ValueError),
                                        ((0, 0, 0, 0), IndexError)])
def test_bad_keys_of_ints_and_slices_raise_as_before(key, error):
    with pytest.raises(error):
        dg.zeros(5, 6, 7)[key]


def test_mean_kernel_gives_numpys_bits():
    """The mean kernel is NumPy's sum and division without ``np.mean``'s wrapper."""
    from dualgraph.ops.reduce import _mean_kernel
    rng = np.random.default_rng(6)
    for dtype in (np.float32, np.float64, np.float16):
        for shape, dims in (((12, 4, 16), (0, 1)), ((1000, 37), (0,)), ((5, 7), (1,)),
                            ((2, 3, 4), (0, 1, 2)), ((3,), ()), ((), ())):
            x = (rng.standard_normal(shape) * 100).astype(dtype)
            for keepdim in (True, False):
                wide = x.astype(np.float32) if dtype == np.float16 else x
                want = np.asarray(np.mean(wide, axis=dims, keepdims=keepdim)).astype(dtype)
                got = _mean_kernel(x, dims, keepdim)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)


def test_saved_outputs_give_second_derivatives_and_guard_in_place_writes():
    """The VJPs that read their outputs (exp, tanh) and ``var`` as one op give torch's
    second derivatives; a write into a saved output before backward raises."""
    data = np.array([0.3, -1.2, 0.8], np.float32)
    x, xt = dg.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    (g,) = dg.autograd.grad((x.exp() * x.tanh()).sum() + x.var(), x, create_graph=True)
    (gt,) = torch.autograd.grad((xt.exp() * xt.tanh()).sum() + xt.var(), xt,
                                create_graph=True)
    (gg,) = dg.autograd.grad(g.sum(), x)
    (ggt,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(g.detach().numpy(), gt.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(gg.numpy(), ggt.numpy(), rtol=1e-5)
    y = x.exp()
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.sum().backward()
