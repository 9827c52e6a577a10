"""x[key] and x[key] = v against torch (values and gradients), views sharing memory, and
the errors for bad indices and shapes."""
import numpy as np
import pytest
import torch

import dualgraph as dg


def pair(shape, seed=0, requires_grad=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    return (dg.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def both(key):
    """The key for dualgraph and for torch: lists of ints stay lists, arrays become tensors."""
    def convert(k, lib):
        return lib.tensor(k) if isinstance(k, np.ndarray) else k
    if isinstance(key, tuple):
        return tuple(convert(k, dg) for k in key), tuple(convert(k, torch) for k in key)
    return convert(key, dg), convert(key, torch)


KEYS = [
    1, -1, (0, 2), slice(1, None), (slice(None), slice(None, None, 2)), (Ellipsis, 0),
    (None, 1, None), (0, Ellipsis, None), (slice(-3, -1), -2, slice(1, 10)),
    [0, 2, 2], ([0, 1], [1, 1]), (slice(None), [0, 2], [1, 3]), ([0, 2], slice(None), [1, 3]),
    (1, slice(None), [0, 3]), ([1, 0], Ellipsis, [2, 2]), (None, [0, 1], None),
    np.array([[0, 1], [2, 0]]), (np.array([[0], [2]]), np.array([1, 2])),
    np.array([True, False, True]), (slice(None), np.array([False, True, True])),
    np.array([[True, False, True], [False, False, True], [True, True, False]]),
    (), Ellipsis, (True,), (slice(None), 1), (slice(None), slice(None), -2),
    (slice(None), -3, slice(None)), (slice(None), slice(1, 3), 0),
    # integer tensors on the leading dims, then Nones (getitem's shortcut: one index op)
    (np.array([2, -1, 0]), np.array([1, 1, 2]), None), (np.array([0, 2]), None),
    (np.array([0, 2]), np.array([1, 0]), np.array([3, -4]), None, None),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k)[:40] for k in KEYS])
def test_getitem_matches_torch(key):
    x, tx = pair((3, 3, 4), requires_grad=True)
    dk, tk = both(key)
    got, want = x[dk], tx[tk]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy())
    if want.numel():
        ct = np.random.default_rng(1).standard_normal(tuple(want.shape))
        (got * dg.tensor(ct)).sum().backward()
        (want * torch.tensor(ct)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


SET_KEYS = [
    (1, ()), ((0, 2), (4,)), (slice(1, None), (1, 4)), ((Ellipsis, 0), (3,)),
    ((slice(None), slice(None, None, 2)), ()), ([0, 2, 2][:2], (4,)),
    (([0, 1], [1, 2]), (2, 1)), ((1, slice(None), [0, 3]), (3, 1)),
    (([1, 0], Ellipsis, [2, 3]), (2, 3)), ((None, 0), (1, 3, 4)),
    (np.array([True, False, True]), (3, 4)), (np.array([True, False, True]), (2, 3, 4)),
    ((slice(None), np.array([False, True, True])), (4,)),
]


@pytest.mark.parametrize("key,vshape", SET_KEYS, ids=[repr(k)[:40] for k, _ in SET_KEYS])
def test_setitem_matches_torch_with_gradients(key, vshape):
    x, tx = pair((3, 3, 4), requires_grad=True)
    v, tv = pair(vshape, seed=2, requires_grad=True)
    dk, tk = both(key)
    y, ty = x * 2, tx * 2
    y[dk] = v * 1
    ty[tk] = tv * 1
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy())
    ct = np.random.default_rng(1).standard_normal((3, 3, 4))
    (y * dg.tensor(ct)).sum().backward()
    (ty * torch.tensor(ct)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy())


@pytest.mark.parametrize("value", [1.5, 3, dg.tensor(2.0)])
def test_setitem_scalars_and_dtypes(value):
    x = dg.zeros(2, 3, dtype=dg.int64)
    x[0, 1:] = value
    tx = torch.zeros(2, 3, dtype=torch.int64)
    tx[0, 1:] = torch.tensor(value.item()) if isinstance(value, dg.Tensor) else value
    assert x.dtype == dg.int64
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_setitem_without_grad_writes_in_place():
    x = dg.zeros(3, 4)
    before = x._data
    x[1, [0, 2]] = 5.0
    x[x > 4] = 7.0
    assert x._data is before
    np.testing.assert_array_equal(x.numpy()[1], [7, 0, 7, 0])


def test_basic_indexing_gives_views():
    x = dg.arange(12.0).reshape(3, 4)
    row = x[0]
    with dg.no_grad():
        row.mul_(10)
    np.testing.assert_array_equal(x.numpy()[0], [0, 10, 20, 30])
    x[1][2] = -1.0     # setitem on a view writes through
    assert x[1, 2].item() == -1.0
    col = x[:, 1:3]
    col[...] = 0.0
    np.testing.assert_array_equal(x.numpy()[:, 1:3], 0)
    last = x[:, -1]    # (an int among whole slices: one select)
    last += 100.0
    np.testing.assert_array_equal(x.numpy()[:, 3], [130, 107, 111])
    w = dg.ones(3, 4, requires_grad=True)
    y = w * 2
    y[:, 0].mul_(3)    # a write through the view: the gradient of w is 6 in column 0
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], 6)
    np.testing.assert_array_equal(w.grad.numpy()[:, 1:], 2)
    assert x[[0, 1]]._data.base is None or not np.shares_memory(x[[0, 1]]._data, x._data)


def test_views_from_shape_ops_share_memory():
    x = dg.zeros(2, 3, 4)
    for view in (x.transpose(0, 2), x.T, x.narrow(1, 1, 2), x.split(2, dim=2)[1],
                 x.unbind(0)[1], x.squeeze(), x.unsqueeze(0), x.chunk(3, 1)[2]):
        assert np.shares_memory(view._data, x._data)
    y = x.unbind(1)[2]
    with dg.no_grad():
        y.add_(1)
    assert x.numpy()[:, 2].sum() == 8
    assert x.contiguous() is x


def test_split_takes_the_methods_keyword():
    """Mamba-style code writes ``x.split(split_size=[d, d], dim=-1)`` (the method's
    keyword; the function's is ``split_size_or_sections``): it raised a TypeError."""
    x, tx = pair((2, 6))
    for got, want in zip(x.split(split_size=[2, 4], dim=-1), tx.split(split_size=[2, 4], dim=-1)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for got, want in zip(dg.split(x, split_size_or_sections=3, dim=1),
                         torch.split(tx, split_size_or_sections=3, dim=1)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_getitem_then_inplace_on_base_is_caught():
    x, _ = pair((3, 4), requires_grad=True)
    y = x * 1
    z = (y[0] * y[0]).sum()   # mul saves y[0], which the write below changes
    y[0, 0] = 3.0
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        z.backward()


def test_duplicate_indices_accumulate_gradients():
    x, tx = pair((4,), requires_grad=True)
    i = [1, 1, 3, 1]
    (x[i] * dg.tensor([1.0, 2, 3, 4])).sum().backward()
    (tx[i] * torch.tensor([1.0, 2, 3, 4])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(x.grad.numpy(), [0, 7, 0, 3])


def test_double_backward_through_indexing():
    x = dg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x[[0, 2, 2]] ** 3).sum()
    (g,) = dg.autograd.grad(y, x, create_graph=True)
    (gg,) = dg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), [6, 0, 36])


def test_sort_topk_results_are_named_tuples():
    x = dg.tensor([[3.0, 1.0, 2.0]])
    values, indices = dg.sort(x, descending=True)
    assert dg.topk(x, 2).values.tolist() == [[3.0, 2.0]]
    assert x.topk(2).indices.tolist() == [[0, 2]]
    assert indices.dtype == dg.int64 and values.tolist() == [[3.0, 2.0, 1.0]]
    nan = dg.tensor([1.0, float("nan"), 0.0])
    np.testing.assert_array_equal(nan.sort(descending=True).indices.numpy(),
                                  torch.tensor([1.0, float("nan"), 0.0]).sort(
                                      descending=True).indices.numpy())


def test_nonzero_and_inplace_variants():
    a = np.array([[0, 1, 0], [2, 0, 3]])
    assert dg.nonzero(dg.tensor(a)).tolist() == torch.nonzero(torch.tensor(a)).tolist()
    rows, cols = dg.tensor(a).nonzero(as_tuple=True)
    assert rows.tolist() == [0, 1, 1] and cols.tolist() == [1, 0, 2]
    # torch.where(condition), a mixture of experts' token dispatch: nonzero as a tuple
    got, want = dg.where(dg.tensor(a) == 0), torch.where(torch.tensor(a) == 0)
    assert [t.tolist() for t in got] == [t.tolist() for t in want]

    def dispatch(selected):   # compiled: a graph break there, eager's positions
        tokens, slot = dg.where(selected == 1)
        return tokens * 10 + slot

    with pytest.warns(UserWarning, match="graph break"):
        np.testing.assert_array_equal(dg.compile(dispatch)(dg.tensor(a)).numpy(), [1])
    x = dg.zeros(2, 3)
    x.masked_fill_(dg.tensor(a) > 0, 1.0)
    x.scatter_(1, dg.tensor([[2], [0]]), 5.0)
    x.index_add_(0, dg.tensor([1, 1]), dg.ones(2, 3))
    tx = torch.zeros(2, 3)
    tx.masked_fill_(torch.tensor(a) > 0, 1.0)
    tx.scatter_(1, torch.tensor([[2], [0]]), 5.0)
    tx.index_add_(0, torch.tensor([1, 1]), torch.ones(2, 3))
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


@pytest.mark.parametrize("fn,match", [
    (lambda x: x[5], "index 5 is out of range for dim 0 with size 3"),
    (lambda x: x[:, [0, 7]], "index 7 is out of range for dim 1 with size 4"),
    (lambda x: x[0, 0, 0], "too many indices"),
    (lambda x: x[::-1], "step must be positive"),
    (lambda x: x[..., ...], "single ellipsis"),
    (lambda x: x[dg.tensor([True, False])], r"mask of shape \(2,\)"),
    (lambda x: x.gather(1, dg.tensor([[4]])), "index 4 is out of range for dim 1 with size 4"),
    (lambda x: x.gather(1, dg.tensor([[1]], dtype=dg.int32)), "int64"),
    (lambda x: x.gather(1, dg.zeros(4, 1, dtype=dg.int64)), r"\(4, 1\).*\(3, 4\)"),
    (lambda x: x.index_select(0, dg.tensor([-4])), "index -4 is out of range for dim 0"),
    (lambda x: dg.cat([x, dg.zeros(3, 2, 1)]), r"\(3, 2, 1\).*\(3, 4\)"),
    (lambda x: dg.stack([x, dg.zeros(4, 3)]), r"\(3, 4\).*\(4, 3\)"),
    (lambda x: x.split([1, 1]), "sum to 3"),
    (lambda x: dg.nn.functional.pad(x, (4, 0), mode="reflect"), "reflect"),
    (lambda x: x.topk(5), "k=5 is out of range"),
])
def test_clear_errors(fn, match):
    x = dg.zeros(3, 4)
    with pytest.raises((IndexError, ValueError, TypeError, RuntimeError), match=match):
        fn(x)


def test_setitem_shape_mismatch_names_both_shapes():
    x = dg.zeros(3, 4)
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        x[0] = dg.ones(3)
    with pytest.raises(ValueError, match=r"\(2, 2\).*\(2,\)"):
        x[[0, 1], [1, 2]] = dg.ones(2, 2)


def test_advanced_indexing_of_a_later_dim_gives_a_contiguous_tensor():
    """``h.index_select(1, i).view(-1, 3)`` (and ``h[:, i]``): NumPy lays out the result
    with the indexed dim outermost, so the view raised where torch's result is contiguous
    (generated torch-API program 119)."""
    x, t = pair((4, 6))
    fn = dg.compile(lambda h: h.index_select(1, dg.tensor([1, 1, 0, 0, 2, 3])).view(-1, 3))
    want = t.index_select(1, torch.tensor([1, 1, 0, 0, 2, 3])).view(-1, 3).numpy()
    for got in (x[:, [1, 1, 0, 0, 2, 3]].view(-1, 3), fn(x), fn(x)):
        np.testing.assert_array_equal(got.numpy(), want)
    assert x[:, [2, 0]].is_contiguous() and x.t()[:, [1, 0]].is_contiguous()
