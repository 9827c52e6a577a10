"""tril / triu (the ``trilu`` primitive) beyond its op-table rows, and multinomial sampling:
torch's shapes, errors and distributions (a draw can't equal torch's, so frequencies are
checked against the weights)."""
import numpy as np
import pytest
import torch

import dualgraph as dg

X = np.arange(1, 25, dtype=np.float32).reshape(2, 3, 4)


@pytest.mark.parametrize("diagonal", [-3, -1, 0, 1, 2, 5])
@pytest.mark.parametrize("name", ["tril", "triu"])
def test_trilu_matches_torch_and_its_decomposition(name, diagonal):
    got = getattr(dg, name)(dg.tensor(X), diagonal).numpy()
    np.testing.assert_array_equal(got, getattr(torch, name)(torch.tensor(X), diagonal).numpy())
    # the composite it replaces: keep where col - row is on the right side of diagonal
    offset = np.arange(4)[None, :] - np.arange(3)[:, None]
    keep = offset <= diagonal if name == "tril" else offset >= diagonal
    np.testing.assert_array_equal(got, np.where(keep, X, 0))


def test_trilu_inplace_methods():
    a, t = dg.tensor(X), torch.tensor(X)
    assert a.tril_(-1) is a
    t.tril_(-1)
    a.triu_(-1)
    t.triu_(-1)
    np.testing.assert_array_equal(a.numpy(), t.numpy())


def test_trilu_second_derivative():
    x = dg.tensor(X[0], requires_grad=True)
    (g,) = dg.autograd.grad((dg.triu(x) ** 2).sum(), x, create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), np.triu(2 * X[0]))
    (gg,) = dg.autograd.grad(g.sum(), x)
    np.testing.assert_array_equal(gg.numpy(), np.triu(np.full_like(X[0], 2)))


def test_trilu_errors():
    with pytest.raises(dg.ShapeError, match=r"2 or more dims, got shape \(4,\)"):
        dg.tril(dg.ones(4))
    with pytest.raises(TypeError, match="diagonal must be an int"):
        dg.triu(dg.ones(2, 2), 0.5)


def test_trilu_compiles_with_a_free_dim():
    f = dg.compile(lambda x: dg.tril(x * 2), dynamic=True)
    for n in (3, 5):
        x = dg.ones(n, n)
        np.testing.assert_array_equal(f(x).numpy(), np.tril(np.full((n, n), 2.0)))


def test_causal_mask_uses_triu():
    mask = dg.nn.Transformer.generate_square_subsequent_mask(3)
    want = torch.nn.Transformer.generate_square_subsequent_mask(3)
    np.testing.assert_array_equal(mask.numpy(), want.numpy())


# -- multinomial ---------------------------------------------------------------------------
W = np.array([[1.0, 2.0, 0.0, 5.0], [0.0, 0.0, 3.0, 1.0]])


def _frequencies(samples, k=4):
    return np.stack([np.bincount(row, minlength=k) for row in samples]) / samples.shape[1]


def test_multinomial_with_replacement_follows_the_weights():
    dg.manual_seed(0)
    samples = dg.multinomial(dg.tensor(W, dtype=dg.float32), 20000, replacement=True)
    assert samples.dtype == dg.int64 and tuple(samples.shape) == (2, 20000)
    np.testing.assert_allclose(_frequencies(samples.numpy()),
                               W / W.sum(1, keepdims=True), atol=0.015)


def test_multinomial_without_replacement():
    dg.manual_seed(0)
    draws = np.stack([dg.multinomial(dg.tensor(W[0]), 3).numpy() for _ in range(3000)])
    # every draw is three distinct categories, never the zero-weight one
    assert all(sorted(d) == [0, 1, 3] for d in draws)
    # the first category drawn follows the weights; the second is conditional on it
    np.testing.assert_allclose(np.bincount(draws[:, 0], minlength=4) / 3000,
                               W[0] / 8, atol=0.03)
    second = (2 / 8) * (1 / 6) + (5 / 8) * (1 / 3)   # P(second draw is category 0)
    assert abs(np.mean(draws[:, 1] == 0) - second) < 0.03


def test_multinomial_zero_weights_come_last_without_replacement():
    out = dg.multinomial(dg.tensor([1.0, 0.0, 0.0]), 2)
    assert out.tolist() == torch.multinomial(torch.tensor([1.0, 0.0, 0.0]), 2).tolist()


def test_multinomial_generator_method_and_shapes():
    a = dg.multinomial(dg.tensor(W), 5, True, generator=dg.Generator(3))
    b = dg.tensor(W).multinomial(5, replacement=True, generator=dg.Generator(3))
    assert a.tolist() == b.tolist()
    assert tuple(dg.multinomial(dg.tensor([1.0, 2.0]), 1).shape) == (1,)
    assert dg.multinomial(dg.tensor([0.0, 1.0], dtype=dg.bfloat16), 2, True).tolist() == [1, 1]


@pytest.mark.parametrize("weights,n,replacement,error,match", [
    ([1.0, -1.0], 1, True, ValueError, "non-negative"),
    ([1.0, float("inf")], 1, True, ValueError, "finite"),
    ([0.0, 0.0], 1, True, ValueError, "positive sum"),
    ([1.0, 2.0], 3, False, ValueError, "without replacement"),
    ([1.0, 2.0], 0, True, ValueError, "num_samples"),
    ([[[1.0]]], 1, True, ValueError, "1-d or 2-d"),
    ([1, 2], 1, True, TypeError, "floating-point"),
])
def test_multinomial_errors(weights, n, replacement, error, match):
    with pytest.raises(error, match=match):
        dg.multinomial(dg.tensor(weights), n, replacement)
    with pytest.raises(RuntimeError):   # torch refuses the same inputs
        torch.multinomial(torch.tensor(weights), n, replacement)
