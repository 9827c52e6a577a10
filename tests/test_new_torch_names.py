"""The names real programs met missing (issue 26): each compiled equals eager, values and
gradients (their forward and gradients against torch and finite differences are rows of
tests/optable/), and the memory-format constants are accepted where torch takes them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 5)).astype(np.float32)
Y = rng.standard_normal((3, 5)).astype(np.float32)

FUNCTIONS = {
    "diag_embed": lambda m, x, y: m.diag_embed(x, 1).sum(0) * 2,
    "index_fill": lambda m, x, y: x.index_fill(1, m.tensor([0, 3]), -2.0) * y,
    "index_fill_": lambda m, x, y: (x * 1).index_fill_(0, m.tensor([1]), 0.5) + y,
    "index_copy": lambda m, x, y: x.index_copy(0, m.tensor([2, 0]), y[:2] * 3),
    "index_copy_": lambda m, x, y: (x + 0).index_copy_(1, m.tensor([4]), y[:, :1]),
    "kthvalue": lambda m, x, y: m.kthvalue(x * y, 2, dim=1).values,
    "nansum": lambda m, x, y: m.nansum(m.where(y > 1, float("nan"), x), 1),
    "nanmean": lambda m, x, y: m.where(y > 1, float("nan"), x).nanmean(0),
    "logcumsumexp": lambda m, x, y: m.logcumsumexp(x * 10, 1) * y,
    "cummax": lambda m, x, y: m.cummax(x + y, 1).values,
    "cummin": lambda m, x, y: (x * y).cummin(0)[0],
    "logaddexp": lambda m, x, y: m.logaddexp(x, y * 5),
    "logaddexp2": lambda m, x, y: x.logaddexp2(y),
    "masked_scatter": lambda m, x, y: x.masked_scatter(y > 0, y * 7),
    "scatter_reduce": lambda m, x, y: x.scatter_reduce(0, m.tensor([[0, 1, 0, 2, 2]] * 3), y,
                                                       "amax", include_self=False),
    "scatter_reduce_": lambda m, x, y: (x * 1).scatter_reduce_(1, m.tensor([[0, 1, 0, 1, 0]] * 3),
                                                               y * 2, "mean"),
    "masked_scatter_": lambda m, x, y: (x * 1).masked_scatter_(y < 0, x.flip(0)),
    "aminmax": lambda m, x, y: m.aminmax(x * y, dim=1, keepdim=True).min + (x * 2).round().aminmax().max,
    "hypot": lambda m, x, y: m.hypot(x, y * 3) + x.hypot(y * 1e200) * 1e-200,
    "flip": lambda m, x, y: x.flip(0, 1) * y + m.flip(y, dims=(1,)) + x.flip(-1),
    # i-names: the torch functions and Tensor methods programs met missing
    "tan": lambda m, x, y: m.tan(x * 0.5) * y + (x * 0.3).tan_(),
    "lgamma": lambda m, x, y: m.lgamma(x.abs() + 0.5) * y,
    "digamma": lambda m, x, y: (x.abs() + 0.5).digamma() + m.polygamma(1, y.abs() + 1),
    "erfinv": lambda m, x, y: m.erfinv(m.tanh(x)) * y,
    "xlogy": lambda m, x, y: m.xlogy(x, y.abs() + 0.1) + x.xlogy(2.0),
    "logit": lambda m, x, y: m.logit(m.sigmoid(x), eps=0.1) * y,
    "hstack": lambda m, x, y: m.hstack([x, y]) * 2 + m.vstack([y, x]).t()[:, :3].sum(),
    "kron": lambda m, x, y: m.kron(x[:, :2], y[:2, :3]),
    "cross": lambda m, x, y: m.cross(x[:, :3], y[:, 1:4], dim=1),
    "diff": lambda m, x, y: m.diff(x * y, 2, dim=1, prepend=y[:, :1]),
    "rot90": lambda m, x, y: m.rot90(x, 1) * y.t() + m.fliplr(x).t(),
    "tensor_split": lambda m, x, y: m.tensor_split(x, 2, dim=1)[1] * y[:, :2],
    "take": lambda m, x, y: m.take(x, m.tensor([0, 14, -1])) * y[0, :3],
    "trace": lambda m, x, y: m.trace(x * y) * x,
    "t_": lambda m, x, y: (x * 1).t_().unsqueeze_(0) * y.t(),
    "fill_diagonal_": lambda m, x, y: (x * y).fill_diagonal_(0.5, wrap=True),
    "sum_to_size": lambda m, x, y: (x * y).sum_to_size(1, 5) + x,
    "cumsum_": lambda m, x, y: (x * 1).cumsum_(1) * y,
    # the names met next: torch.special, float bits, selections and compositions
    "erfcx": lambda m, x, y: m.special.erfcx(x * 3) * y,
    "ndtr": lambda m, x, y: m.special.ndtr(x) + m.special.log_ndtr(y * 10),
    "ndtri": lambda m, x, y: m.special.ndtri(m.sigmoid(x)) * y,
    "bessel": lambda m, x, y: m.special.i0(x) + m.special.i0e(y * 9) + m.special.i1(x * y)
    + m.special.i1e(x * 40),
    "bessel_j": lambda m, x, y: (m.special.bessel_j0(x * 9) + m.special.bessel_j1(x * 40)) * y,
    "zeta": lambda m, x, y: m.special.zeta(3.0, x.abs() + 0.5) * y,
    "xlog1py": lambda m, x, y: m.special.xlog1py(x, y.abs()),
    "sinc": lambda m, x, y: m.sinc(x) * y + m.special.entr(y.abs()),
    "mvlgamma": lambda m, x, y: m.mvlgamma(x.abs() + 2, 3) * y,
    "copysign": lambda m, x, y: m.copysign(x, y) + x.copysign(-1.0),
    "nextafter": lambda m, x, y: m.nextafter(x, y) * y,
    "mode": lambda m, x, y: m.mode((x * 2).round() + y, 1).values,
    "nanmedian": lambda m, x, y: m.where(y > 0.5, float("nan"), x).nanmedian(0).values,
    "msort": lambda m, x, y: m.msort(x * y),
    "trapezoid": lambda m, x, y: m.trapezoid(x, y, dim=0).sum() + m.cumulative_trapezoid(x * y),
    "block_diag": lambda m, x, y: m.block_diag(x, y[0], y[:2, :2]) * 2,
    "cartesian_prod": lambda m, x, y: m.cartesian_prod(x[0], y[1, :2]),
    "renorm": lambda m, x, y: m.renorm(x * y, 2, 0, 1.0),
    # round 13: torch.linalg's forms of the products (cross, vecdot, matmul, diagonal,
    # matrix_power)
    "linalg_products": lambda m, x, y: m.linalg.cross(x[:, :3], y[:, 1:4]).sum(1)
    + m.linalg.vecdot(x, y) + m.linalg.diagonal(m.linalg.matmul(x, y.mT))
    + m.linalg.matrix_power(x[:, :3], 2).sum(0) + m.linalg.diagonal(x[None], offset=1).sum(0),
    # round 13 (deepfm_pnn): the pairs of fields, and every variant of r and replacement
    "combinations": lambda m, x, y: m.combinations(x[0], 2).prod(1) * y[0, :10].sum()
    + m.combinations(y[1, :3], 3, with_replacement=True).sum(0).sum()
    + m.combinations(x[2], 1).sum() + m.combinations(x[1, :2], 3).sum()
    + m.combinations(y[2], 0).sum() + m.combinations(x[1, :0], 2).sum(),
    "put_": lambda m, x, y: (x * 1).put_(m.tensor([0, 14, 3, 3]), y[0, :4], accumulate=True),
    "index_reduce": lambda m, x, y: x.index_reduce(1, m.tensor([0, 0, 4]), y[:, :3], "mean"),
    "cholesky_solve": lambda m, x, y: m.cholesky_solve(
        x, m.linalg.cholesky(y @ y.mT + 3 * m.eye(3))),
    "hyperbolic": lambda m, x, y: m.asinh(x) + m.acosh(y.abs() + 1.5) * m.atanh(x.tanh()),
    "deg2rad": lambda m, x, y: m.deg2rad(x) * y.rad2deg(),
    "fmax": lambda m, x, y: m.fmax(x, m.where(y > 0.5, float("nan"), y)) + x.fmin(y),
    "float_power": lambda m, x, y: m.float_power(x, 2).float() * y,
    "products": lambda m, x, y: m.inner(x, y).sum() + m.addr(x[:, :2], x[:, 0], y[1, :2])
    .sum() * m.addmv(y[:, 0], x, y[0]),
    "matrix_power": lambda m, x, y: m.matrix_power(x[:, :3] * y[:, :3] + 4 * m.eye(3), -2)
    + m.matrix_power(x[:, :3], 3),
    "cov": lambda m, x, y: m.cov(x * y) + m.corrcoef(x) * m.dist(x, y),
    # round 14 (longformer_window): overlapping windows by strides (gradients add up)
    "as_strided": lambda m, x, y: (x * y).as_strided((3, 2, 3), (4, 1, 2)).sum(1)
    + m.as_strided(x, (3, 3), (4, 1)) + x.t().contiguous().as_strided((3, 2), (1, 2)).sum(),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_compiled_matches_eager_and_torch(name):
    fn = FUNCTIONS[name]

    def run(lib, call):
        x = lib.tensor(X, requires_grad=True)
        y = lib.tensor(Y, requires_grad=True)
        out = call(x, y)
        out.backward(lib.ones_like(out))
        return [out.detach().numpy()] + [np.zeros(X.shape) if t.grad is None
                                         else t.grad.numpy() for t in (x, y)]

    want = run(torch, lambda x, y: fn(torch, x, y))
    eager = run(dg, lambda x, y: fn(dg, x, y))
    compiled = dg.compile(lambda x, y: fn(dg, x, y), fullgraph=True)
    got = run(dg, compiled)
    for e, w in zip(eager, want):
        np.testing.assert_allclose(e, w, rtol=1e-5, atol=1e-6)
    for g, e in zip(got, eager):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_bad_arguments_name_what_to_do():
    x = dg.zeros(2, 3)
    with pytest.raises(IndexError, match="k counts from 1"):
        x.kthvalue(0)
    with pytest.raises(IndexError, match="out of range for dim 0 with size 2"):
        x.masked_scatter(dg.ones(2, 3, dtype=dg.bool), dg.zeros(2))
    with pytest.raises(TypeError, match="needs a floating point"):
        dg.tensor([1, 2]).logcumsumexp(0)
    with pytest.raises(ValueError, match="dim1 and dim2"):
        dg.diag_embed(x, dim1=0, dim2=-3)


@pytest.mark.parametrize("fmt", ["contiguous_format", "preserve_format", "channels_last"])
def test_memory_formats_are_accepted_where_torch_takes_them(fmt):
    """Every format gives the row-major tensor with torch's values."""
    f = getattr(dg, fmt)
    assert isinstance(f, dg.memory_format) and repr(f) == f"dualgraph.{fmt}"
    x = dg.arange(24.0).reshape(2, 3, 4).transpose(1, 2)
    for y in (x.contiguous(memory_format=f), x.clone(memory_format=f),
              dg.zeros_like(x, memory_format=f) + x, x.to(memory_format=f)):
        assert y.is_contiguous() or y is x
        np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert dg.nn.Linear(2, 2).to(memory_format=f) is not None
    with pytest.raises(TypeError, match="memory_format must be"):
        x.contiguous(memory_format="channels_last")


def test_next_names_raise_torch_errors():
    """Bad input to the names met next raises torch's error, with the shapes or values."""
    x = dg.zeros(3, 4)
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        dg.mode(dg.zeros(0, 3), 0)
    with pytest.raises(RuntimeError, match="one of prod, mean, amax or amin but got sum"):
        x.index_reduce(0, dg.tensor([0]), dg.ones(1, 4), "sum")
    with pytest.raises(IndexError, match=r"index \(shape \(2,\)\) must be 1-D"):
        x.index_reduce(0, dg.tensor([0, 1]), dg.ones(1, 4), "prod")
    with pytest.raises(RuntimeError, match="Input 1 has 3 dimensions"):
        dg.block_diag(x, dg.ones(1, 1, 1))
    with pytest.raises(RuntimeError, match=r"Expect a 1D vector, but got shape \[3, 4\]"):
        dg.cartesian_prod(x)
    with pytest.raises(RuntimeError, match=r"Expect a 1D vector, but got shape \[3, 4\]"):
        dg.combinations(x)
    with pytest.raises(RuntimeError, match="Expect a non-negative number, but got -1"):
        dg.combinations(x[0], -1)
    with pytest.raises(RuntimeError, match="non-positive-norm not supported"):
        dg.renorm(x, 0, 0, 1.0)
    with pytest.raises(RuntimeError, match="one `x` value for each sample point"):
        dg.trapezoid(x, dg.ones(3))
    with pytest.raises(ValueError, match=r"greater than \(p-1\)/2 = 1.0"):
        dg.mvlgamma(dg.ones(2), 3)
    with pytest.raises(TypeError, match="floating-point inputs only"):
        dg.nextafter(dg.tensor([1]), dg.tensor([2]))
    with pytest.raises(RuntimeError, match="b should have at least 2 dimensions"):
        dg.cholesky_solve(dg.ones(3), dg.eye(3))
    q = dg.tensor([3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="the derivative for 'zeta' is not implemented"):
        dg.special.zeta(q, 2.0).backward()


def test_as_strided_reads_storage_where_torch_does_and_refuses_what_it_cannot():
    """``storage_offset`` counts from the storage's start (a slice's offset taken off), as
    torch's; a non-contiguous tensor, positions outside the tensor's own elements, and an
    explicit offset while tracing (where the storage is not known) are refused, not
    guessed; the result is a copy (torch's is a view)."""
    base = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    for lib in (torch, dg):
        got = lib.tensor(base)[1:].as_strided((2, 2), (4, 1), 5)
        np.testing.assert_array_equal(got.numpy(), [[5, 6], [9, 10]])
    x = dg.tensor(base)
    with pytest.raises(NotImplementedError, match="non-contiguous"):
        x.t().as_strided((2, 2), (1, 1))
    with pytest.raises(NotImplementedError, match="outside the tensor"):
        x[1:].as_strided((2, 2), (4, 1), 0)
    with pytest.raises(ValueError, match="as long as"):
        x.as_strided((2, 2), (1,))
    f = dg.compile(lambda t: t.as_strided((2,), (1,), 1) * 2, fullgraph=True)
    with pytest.raises(Exception, match="storage_offset"):
        f(x)


def test_next_names_special_cases():
    """What torch gives at the edges the op table's rows do not reach: put_ out of range,
    nanmedian of an all-NaN slice, the torch.special names bound to the same functions."""
    with pytest.raises(IndexError):
        dg.zeros(3).put_(dg.tensor([5]), dg.ones(1))
    values, indices = dg.nanmedian(dg.tensor([[float("nan")] * 3, [1.0, float("nan"), 0.5]]), 1)
    np.testing.assert_array_equal(values.numpy(), [np.nan, 0.5])
    assert indices.tolist()[1] == 2
    assert dg.special.expit is dg.sigmoid and dg.special.gammaln is dg.lgamma
    assert dg.special.multigammaln is dg.mvlgamma and dg.special.sinc is dg.sinc


FUNCTIONAL = {
    "cosine_similarity": lambda m, x, y: m.cosine_similarity(x, y, 0),
    "pairwise_distance": lambda m, x, y: m.pairwise_distance(x, y, 3, 1e-6, True),
    "pixel_shuffle": lambda m, x, y: m.pixel_shuffle(x.repeat(1, 4).reshape(1, 4, 3, 5), 2),
    "pixel_unshuffle": lambda m, x, y: m.pixel_unshuffle(x.repeat(2, 2).reshape(1, 1, 6, 10), 2),
    "prelu": lambda m, x, y: m.prelu(x, m.tensor([0.25])),
    "threshold": lambda m, x, y: m.threshold(x, 0.1, -2.0) + m.threshold_(y * 1, 0.2, 5.0),
    "hardshrink": lambda m, x, y: m.hardshrink(x, 0.7),
    "selu_": lambda m, x, y: m.selu_(x * 1) + m.celu_(y * 1, 0.5),
    "rrelu": lambda m, x, y: m.rrelu(x, 0.1, 0.3, False),
    "alpha_dropout": lambda m, x, y: m.alpha_dropout(x, 0.5, False),
    "channel_shuffle": lambda m, x, y: m.channel_shuffle(x.reshape(1, 3, 5, 1).repeat(1, 2, 1, 1),
                                                         2),
    "bilinear": lambda m, x, y: m.bilinear(x, y, m.ones(2, 5, 5) * 0.1, m.tensor([0.5, -1.0])),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_top_level_functional_names_are_torch_s(name):
    """torch's top-level forms of nn.functional's functions take the same positional
    arguments: the same function, with torch's values."""
    want = FUNCTIONAL[name](torch, torch.tensor(X), torch.tensor(Y))
    got = FUNCTIONAL[name](dg, dg.tensor(X), dg.tensor(Y))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert getattr(dg, name) is getattr(dg.nn.functional, name)


def test_float_constants_are_torch_s():
    """``torch.inf``, ``nan``, ``pi`` and ``e`` (Mamba-2's segsum masks with
    ``-torch.inf``; they were missing): Python floats equal to torch's."""
    for name in ("inf", "pi", "e"):
        assert type(getattr(dg, name)) is float and getattr(dg, name) == getattr(torch, name)
    assert np.isnan(dg.nan)
    x = dg.zeros(2, 2).masked_fill(dg.tensor([[True, False], [False, True]]), -dg.inf)
    np.testing.assert_array_equal(x.exp().numpy(), [[0.0, 1.0], [1.0, 0.0]])
