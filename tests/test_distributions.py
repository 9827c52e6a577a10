"""dg.distributions against torch.distributions (float64): log_prob, entropy, moments,
cdf / icdf and kl_divergence by value and gradient; samples by shape, dtype and statistics;
rsample's gradients through their expectation; compiled draws equal to eager draws; and a
SAC-style squashed-Gaussian policy trained eagerly and compiled."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)


def real(*shape):
    return RNG.standard_normal(shape)


def pos(*shape, low=0.5, high=2.0):
    return RNG.uniform(low, high, shape)


def unit(*shape):
    return RNG.uniform(0.1, 0.9, shape)


def counts(*shape):
    return RNG.integers(0, 6, shape).astype(np.float64)


def _tril(lib, a):
    """A lower Cholesky factor from any square matrices ``a``."""
    eye = lib.eye(a.shape[-1], dtype=a.dtype)
    return lib.tril(a, -1) + eye * lib.exp(a)


def _spd(lib, a):
    t = _tril(lib, a)
    return t @ t.transpose(-1, -2)


# name -> (build(D, *params), params, value, the statistics to compare). Parameters are
# float64 arrays (their gradients are checked); the value is a fixed array in the support.
CASES = {
    "Normal": (lambda D, m, s: D.Normal(m, s), [real(3), pos(3)], real(3),
               "log_prob entropy mean variance stddev mode cdf icdf"),
    "Uniform": (lambda D, lo, w: D.Uniform(lo, lo + w), [real(3), pos(3)], None,
                "log_prob entropy mean variance stddev cdf icdf"),
    "Exponential": (lambda D, r: D.Exponential(r), [pos(3)], pos(3),
                    "log_prob entropy mean variance stddev mode cdf icdf"),
    "Laplace": (lambda D, m, s: D.Laplace(m, s), [real(3), pos(3)], real(3),
                "log_prob entropy mean variance stddev mode cdf icdf"),
    "Cauchy": (lambda D, m, s: D.Cauchy(m, s), [real(3), pos(3)], real(3),
               "log_prob entropy mean variance mode cdf icdf"),
    "Gumbel": (lambda D, m, s: D.Gumbel(m, s), [real(3), pos(3)], real(3),
               "log_prob entropy mean variance stddev mode cdf icdf"),
    "HalfNormal": (lambda D, s: D.HalfNormal(s), [pos(3)], pos(3),
                   "log_prob entropy mean variance mode cdf icdf"),
    "LogNormal": (lambda D, m, s: D.LogNormal(m, s), [real(3), pos(3, high=1.0)], pos(3),
                  "log_prob entropy mean variance mode cdf icdf"),
    "Gamma": (lambda D, c, r: D.Gamma(c, r), [pos(2, 3), pos(3)], pos(2, 3),
              "log_prob entropy mean variance mode"),
    "Chi2": (lambda D, df: D.Chi2(df), [pos(3, low=2.5, high=5.0)], pos(3),
             "log_prob entropy mean variance mode"),
    "Beta": (lambda D, a, b: D.Beta(a, b), [pos(3, low=1.2), pos(3, low=1.2)], unit(3),
             "log_prob entropy mean variance mode"),
    "Dirichlet": (lambda D, c: D.Dirichlet(c), [pos(2, 4, low=1.2)], None,
                  "log_prob entropy mean variance mode"),
    "StudentT": (lambda D, df, m, s: D.StudentT(df, m, s), [pos(3, low=2.5, high=6), real(3),
                                                              pos(3)], real(3),
                 "log_prob entropy mean variance mode"),
    "Bernoulli": (lambda D, p: D.Bernoulli(probs=p), [np.array([0.2, 0.5, 0.9])],
                  np.array([0.0, 1.0, 1.0]), "log_prob entropy mean variance mode"),
    "BernoulliLogits": (lambda D, z: D.Bernoulli(logits=z), [np.array([0.0, -1.2, 0.7])],
                        np.array([1.0, 0.0, 1.0]), "log_prob entropy mean variance"),
    "CategoricalZero": (lambda D, p: D.Categorical(probs=p),
                        [np.array([[0.0, 0.3, 0.7], [0.2, 0.5, 0.3]])], np.array([0.0, 2.0]),
                        "log_prob entropy mode"),
    "Poisson": (lambda D, r: D.Poisson(r), [pos(3)], counts(3), "log_prob mean variance mode"),
    "Binomial": (lambda D, p: D.Binomial(7, probs=p), [unit(3)], counts(3),
                 "log_prob mean variance mode"),
    "BinomialLogits": (lambda D, z: D.Binomial(7, logits=z), [np.array([0.0, -1.2, 0.7])],
                       counts(3),
                       "log_prob mean variance"),
    "NegativeBinomial": (lambda D, n, z: D.NegativeBinomial(n, logits=z),
                         [pos(3, low=1.5, high=4), real(3)], counts(3),
                         "log_prob mean variance mode"),
    "Multinomial": (lambda D, z: D.Multinomial(6, logits=z), [real(2, 4)],
                    np.array([[1.0, 2.0, 0.0, 3.0], [0.0, 0.0, 6.0, 0.0]]),
                    "log_prob mean variance"),
    "Geometric": (lambda D, p: D.Geometric(p), [unit(3)], counts(3),
                  "log_prob entropy mean variance mode"),
    "OneHotCategorical": (lambda D, z: D.OneHotCategorical(logits=z), [real(2, 4)],
                          np.eye(4)[[1, 3]], "log_prob entropy mean variance mode"),
    "MVNScaleTril": (lambda D, m, a: D.MultivariateNormal(m, scale_tril=_tril(D.lib, a)),
                     [real(2, 3), real(3, 3) * 0.3], real(2, 3),
                     "log_prob entropy mean variance covariance_matrix precision_matrix"),
    "MVNCovariance": (lambda D, m, a: D.MultivariateNormal(m, covariance_matrix=_spd(D.lib, a)),
                      [real(3), real(2, 3, 3) * 0.3], real(2, 3),
                      "log_prob entropy variance scale_tril"),
    "MVNPrecision": (lambda D, m, a: D.MultivariateNormal(m, precision_matrix=_spd(D.lib, a)),
                     [real(3), real(3, 3) * 0.3], real(4, 3), "log_prob entropy variance"),
    "LowRankMVN": (lambda D, m, w, d: D.LowRankMultivariateNormal(m, w, d),
                   [real(2, 3), real(2, 3, 2), pos(3)], real(4, 2, 3),
                   "log_prob entropy mean variance covariance_matrix scale_tril "
                   "precision_matrix"),
    "TanhNormal": (lambda D, m, s: D.TransformedDistribution(
        D.Normal(m, s), [D.AffineTransform(0.5, 2.0), D.TanhTransform()]),
        [real(3), pos(3)], unit(3) * 1.6 - 0.8, "log_prob"),
    "AffineSigned": (lambda D, m, s: D.TransformedDistribution(
        D.Normal(m, s), D.AffineTransform(1.0, s * D.lib.tensor([1.0, -1.0, 2.0],
                                                                 dtype=D.lib.float64))),
        [real(3), pos(3)], real(3), "log_prob cdf icdf"),
    "ComposeExpSigmoid": (lambda D, m, s: D.TransformedDistribution(
        D.Normal(m, s), D.ComposeTransform([D.SigmoidTransform(), D.ExpTransform()])),
        [real(3), pos(3)], pos(3, low=1.1, high=2.5), "log_prob cdf icdf"),
    "AffineVector": (lambda D, m, s, b: D.TransformedDistribution(
        D.Independent(D.Normal(m, s), 1), D.AffineTransform(b, s * 2, event_dim=1)),
        [real(2, 3), pos(2, 3), real(3)], real(2, 3), "log_prob"),
    "RelaxedBernoulli": (lambda D, t, z: D.RelaxedBernoulli(t, logits=z), [pos(3), real(3)],
                         unit(3), "log_prob"),
    "RelaxedOneHot": (lambda D, t, z: D.RelaxedOneHotCategorical(t, logits=z),
                      [pos(1), real(2, 4)], None, "log_prob"),
    "Mixture": (lambda D, z, m, s: D.MixtureSameFamily(D.Categorical(logits=z),
                                                       D.Normal(m, s)),
                [real(2, 3), real(2, 3), pos(2, 3)], real(5, 2), "log_prob mean variance cdf"),
    "MixtureMVN": (lambda D, z, m: D.MixtureSameFamily(
        D.Categorical(logits=z), D.Independent(D.Normal(m, m * 0 + 1.5), 1)),
        [real(3), real(3, 2)], real(4, 2), "log_prob mean variance"),
}
_SIMPLEX = RNG.dirichlet(np.ones(4), 2)
VALUES = {"Uniform": lambda lo, w: lo + 0.3 * w, "Dirichlet": lambda c: _SIMPLEX,
          "RelaxedOneHot": lambda t, z: _SIMPLEX}
PROBABILITIES = unit(3)


class _Lib:
    """``lib.distributions`` with ``lib`` itself at ``.lib`` (the builders need both)."""

    def __init__(self, lib):
        self.lib, self.module = lib, lib.distributions

    def __getattr__(self, name):
        return getattr(self.module, name)


def _stat(lib, name, what, params):
    build, _, value, _ = CASES[name]
    d = build(_Lib(lib), *params)
    if value is None:
        value = VALUES[name](*(p.detach().numpy() for p in params))
    if what in ("log_prob", "cdf"):
        return getattr(d, what)(lib.tensor(value))
    if what == "icdf":
        return d.icdf(lib.tensor(PROBABILITIES))
    return d.entropy() if what == "entropy" else getattr(d, what)


def _compare(fn, arrays, atol=1e-9, rtol=1e-7):
    """``fn(lib, tensors)`` with dualgraph and torch: the value and the gradients of all
    ``arrays`` for a random cotangent."""
    ours = [dg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(dg, ours), fn(torch, theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), atol=atol,
                               rtol=rtol)
    cotangent = RNG.standard_normal(tuple(ref.shape))
    if not ref.requires_grad:
        return
    (out * dg.tensor(cotangent)).sum().backward()
    (ref * torch.tensor(cotangent)).sum().backward()
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if b.grad is None:
            continue
        assert a.grad is not None, f"no gradient for parameter {i}"
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=atol, rtol=rtol,
                                   err_msg=f"gradient of parameter {i}")


@pytest.mark.parametrize("name", list(CASES))
def test_statistics_match_torch(name):
    _, params, _, whats = CASES[name]
    for what in whats.split():
        try:
            _compare(lambda lib, ts, what=what: _stat(lib, name, what, ts), params)
        except AssertionError as error:
            raise AssertionError(f"{name}.{what}: {error}") from None


def test_gamma_cdf_matches_torch_and_refuses_the_concentration_gradient():
    """``P(concentration, rate * x)``: value and gradients in rate and x as torch's; a
    concentration that requires grad raises at backward, as in torch."""
    c, rate, x = pos(2, 3, low=0.5, high=5.0), pos(3), pos(2, 3, low=0.1, high=4.0)

    def cdf(lib, ts):
        D = lib.distributions
        gamma = D.Gamma(lib.tensor(c), ts[0]).cdf(ts[1])
        return gamma + D.Chi2(lib.tensor(c) * 2).cdf(ts[1])
    _compare(cdf, [rate, x])
    d = dg.distributions.Gamma(dg.tensor(c, requires_grad=True), 1.0)
    with pytest.raises(NotImplementedError, match="igamma"):
        d.cdf(dg.tensor(x)).sum().backward()


# -- kl_divergence -------------------------------------------------------------------------
# name -> (build(D, *params) of p and q alike, params of p, params of q)
KL_PAIRS = {
    "Normal": ("Normal", [real(3), pos(3)], [real(3), pos(3)]),
    "Exponential": ("Exponential", [pos(3)], [pos(3)]),
    "Laplace": ("Laplace", [real(3), pos(3)], [real(3), pos(3)]),
    "Gamma": ("Gamma", [pos(2, 3), pos(3)], [pos(2, 3), pos(3)]),
    "Beta": ("Beta", [pos(3), pos(3)], [pos(3), pos(3)]),
    "Dirichlet": ("Dirichlet", [pos(2, 4)], [pos(2, 4)]),
    "Poisson": ("Poisson", [pos(3)], [pos(3)]),
    "OneHotCategorical": ("OneHotCategorical", [real(2, 4)], [real(2, 4)]),
    "MVN": ("MVNScaleTril", [real(2, 3), real(3, 3) * 0.3], [real(3), real(2, 3, 3) * 0.3]),
    "Categorical": (lambda D, z: D.Categorical(logits=z), [real(2, 4)], [real(2, 4)]),
    "Bernoulli": (lambda D, p: D.Bernoulli(probs=p), [unit(3)], [unit(3)]),
    "Independent": (lambda D, m, s: D.Independent(D.Normal(m, s), 1), [real(2, 3), pos(2, 3)],
                    [real(2, 3), pos(2, 3)]),
}


@pytest.mark.parametrize("name", list(KL_PAIRS))
def test_kl_divergence_matches_torch(name):
    build, p_params, q_params = KL_PAIRS[name]
    build = CASES[build][0] if isinstance(build, str) else build
    n = len(p_params)

    def kl(lib, ts):
        D = _Lib(lib)
        return lib.distributions.kl_divergence(build(D, *ts[:n]), build(D, *ts[n:]))
    _compare(kl, p_params + q_params)


def test_kl_of_uniforms_is_infinite_outside_the_support():
    D = dg.distributions
    low, high = dg.tensor([0.0, 0.0]), dg.tensor([1.0, 1.0])
    q_low, q_high = dg.tensor([-1.0, 0.5]), dg.tensor([2.0, 2.0])
    got = D.kl_divergence(D.Uniform(low, high), D.Uniform(q_low, q_high))
    want = torch.distributions.kl_divergence(
        torch.distributions.Uniform(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 1.0])),
        torch.distributions.Uniform(torch.tensor([-1.0, 0.5]), torch.tensor([2.0, 2.0])))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert got[1].item() == float("inf")


def test_kl_of_an_unregistered_pair_names_it_and_register_kl_adds_one():
    D = dg.distributions
    with pytest.raises(NotImplementedError, match=r"kl_divergence\(Normal, Laplace\)"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Laplace(0.0, 1.0))

    class Wide(D.Normal):
        pass

    # a subclass uses its parent's pair until it registers a more specific one
    assert D.kl_divergence(Wide(0.0, 1.0), D.Normal(1.0, 1.0)).item() == 0.5
    D.register_kl(Wide, D.Normal)(lambda p, q: p.loc * 0 + 7.0)
    assert D.kl_divergence(Wide(0.0, 1.0), D.Normal(1.0, 1.0)).item() == 7.0


# -- samples -------------------------------------------------------------------------------
def _moments(d):
    return d.mean.detach().numpy(), d.variance.detach().numpy()


SAMPLED = [
    ("Normal", dict(loc=1.0, scale=2.0)), ("Uniform", dict(low=-1.0, high=3.0)),
    ("Exponential", dict(rate=1.5)), ("Laplace", dict(loc=0.5, scale=1.5)),
    ("Gumbel", dict(loc=0.5, scale=1.5)), ("HalfNormal", dict(scale=1.5)),
    ("LogNormal", dict(loc=0.2, scale=0.4)), ("Gamma", dict(concentration=2.5, rate=1.5)),
    ("Chi2", dict(df=3.0)), ("Beta", dict(concentration1=2.0, concentration0=3.0)),
    ("StudentT", dict(df=8.0, loc=1.0, scale=2.0)), ("Poisson", dict(rate=3.5)),
    ("Binomial", dict(total_count=10, probs=0.3)), ("Geometric", dict(probs=0.3)),
    ("Bernoulli", dict(probs=0.3)), ("NegativeBinomial", dict(total_count=3.0, probs=0.4)),
]


@pytest.mark.parametrize("name,kwargs", SAMPLED, ids=[n for n, _ in SAMPLED])
def test_samples_have_the_distributions_moments(name, kwargs):
    """20000 draws of a batch of 2: shape, dtype, and mean / variance within a few
    standard errors of the distribution's (computed from its sample, so heavy tails count)."""
    dg.manual_seed(3)
    params = {k: dg.tensor([v, v], dtype=dg.float64) if isinstance(v, float) else v
              for k, v in kwargs.items()}
    d = getattr(dg.distributions, name)(**params)
    x = d.sample((20000,))
    assert x.shape == (20000, 2) and x.dtype == dg.float64, (x.shape, x.dtype)
    draws = x.numpy()
    mean, variance = _moments(d)
    n = draws.shape[0]
    se_mean = np.sqrt(variance / n)
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * se_mean)
    # (the variance's standard error from the fourth central moment of the draws)
    m4 = ((draws - draws.mean(0)) ** 4).mean(0)
    se_var = np.sqrt(np.maximum(m4 - variance ** 2, 0) / n)
    np.testing.assert_array_less(np.abs(draws.var(0) - variance), 5 * se_var + 1e-12)
    assert not np.array_equal(draws[:, 0], draws[:, 1])


def test_vector_samples_shapes_and_moments():
    dg.manual_seed(4)
    D = dg.distributions
    c = dg.tensor([[2.0, 3.0, 5.0]], dtype=dg.float64)
    d = D.Dirichlet(c)
    x = d.sample((20000,))
    assert x.shape == (20000, 1, 3) and d.event_shape == (3,) and d.batch_shape == (1,)
    np.testing.assert_allclose(x.numpy().sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_array_less(np.abs(x.numpy().mean(0) - d.mean.numpy()), 0.01)
    cov = dg.tensor([[2.0, 0.6], [0.6, 1.0]], dtype=dg.float64)
    m = D.MultivariateNormal(dg.tensor([1.0, -1.0], dtype=dg.float64), covariance_matrix=cov)
    y = m.rsample((20000,)).numpy()
    np.testing.assert_allclose(np.cov(y.T), cov.numpy(), atol=0.06)
    np.testing.assert_allclose(y.mean(0), [1.0, -1.0], atol=0.05)
    low = D.LowRankMultivariateNormal(dg.tensor([1.0, -1.0], dtype=dg.float64),
                                      dg.tensor([[1.0], [0.6]], dtype=dg.float64),
                                      dg.tensor([1.0, 0.64], dtype=dg.float64))
    y = low.rsample((20000,)).numpy()
    np.testing.assert_allclose(np.cov(y.T), cov.numpy(), atol=0.06)
    np.testing.assert_allclose(y.mean(0), [1.0, -1.0], atol=0.05)
    counts_ = D.Multinomial(10, probs=dg.tensor([0.2, 0.3, 0.5])).sample((4000,))
    assert counts_.shape == (4000, 3) and (counts_.sum(-1) == 10).all().item()
    np.testing.assert_allclose(counts_.numpy().mean(0), [2.0, 3.0, 5.0], atol=0.1)
    o = D.OneHotCategorical(probs=dg.tensor([0.2, 0.8]))
    z = o.sample((4000,))
    assert z.shape == (4000, 2) and (z.sum(-1) == 1).all().item()
    assert abs(z[:, 1].mean().item() - 0.8) < 0.03
    mix = D.MixtureSameFamily(D.Categorical(probs=dg.tensor([0.25, 0.75])),
                              D.Normal(dg.tensor([-5.0, 5.0]), dg.tensor([0.5, 0.5])))
    w = mix.sample((8000,))
    assert w.shape == (8000,) and abs((w > 0).float().mean().item() - 0.75) < 0.03
    r = D.RelaxedOneHotCategorical(0.5, logits=dg.zeros(3, 4))
    s = r.rsample((5,))
    assert s.shape == (5, 3, 4) and np.allclose(s.sum(-1).numpy(), 1.0, atol=1e-5)
    b = D.RelaxedBernoulli(0.5, probs=dg.tensor([0.1, 0.9]))
    u = b.rsample((4000,))
    assert ((u > 0) & (u < 1)).all().item() and u.mean(0)[1].item() > 0.7


# name, kwargs, the closed form of E[x] its rsample's gradient is checked against (by torch)
RSAMPLED = [
    ("Normal", dict(loc=0.3, scale=1.2)), ("Uniform", dict(low=-0.5, high=1.5)),
    ("Exponential", dict(rate=1.5)), ("Laplace", dict(loc=0.5, scale=1.5)),
    ("Gumbel", dict(loc=0.5, scale=1.5)), ("HalfNormal", dict(scale=1.5)),
    ("LogNormal", dict(loc=0.2, scale=0.4)),
]


@pytest.mark.parametrize("name,kwargs", RSAMPLED, ids=[n for n, _ in RSAMPLED])
def test_rsample_gradients_match_torchs_in_expectation(name, kwargs):
    """The gradient of the mean of 40000 rsample draws (x and x^2) is the gradient of
    torch's closed-form E[x] and E[x^2] = mean^2 + variance, within sampling error."""
    dg.manual_seed(5)
    ours = {k: dg.tensor(v, dtype=dg.float64, requires_grad=True) for k, v in kwargs.items()}
    theirs = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for k, v in kwargs.items()}
    d, t = getattr(dg.distributions, name)(**ours), getattr(torch.distributions, name)(**theirs)
    x = d.rsample((40000,))
    for estimate, closed in ((x.mean(), t.mean), ((x * x).mean(), t.mean ** 2 + t.variance)):
        got = dg.autograd.grad(estimate, list(ours.values()), retain_graph=True)
        want = torch.autograd.grad(closed, list(theirs.values()), allow_unused=True)
        for name_, g, w in zip(ours, got, want):
            g, w = (0.0 if g is None else g.item()), (0.0 if w is None else w.item())
            assert abs(g - w) < 0.03 * (1 + abs(w)), (name_, g, w)


# name, kwargs, d x / d parameter as a function of the draw x and the parameters: the
# derivatives of torch's own transforms (loc + scale * z, -log1p(-u) / rate, ...)
PATHWISE = [
    ("Normal", dict(loc=0.3, scale=1.2), lambda x, loc, scale: (1.0, (x - loc) / scale)),
    ("Laplace", dict(loc=0.3, scale=1.2), lambda x, loc, scale: (1.0, (x - loc) / scale)),
    ("Gumbel", dict(loc=0.3, scale=1.2), lambda x, loc, scale: (1.0, (x - loc) / scale)),
    ("Cauchy", dict(loc=0.3, scale=1.2), lambda x, loc, scale: (1.0, (x - loc) / scale)),
    ("Uniform", dict(low=-0.5, high=1.5),
     lambda x, low, high: ((high - x) / (high - low), (x - low) / (high - low))),
    ("Exponential", dict(rate=1.5), lambda x, rate: (-x / rate,)),
    ("HalfNormal", dict(scale=1.5), lambda x, scale: (x / scale,)),
    ("LogNormal", dict(loc=0.2, scale=0.4),
     lambda x, loc, scale: (x, x * (np.log(x) - loc) / scale)),
    ("Gamma", dict(rate=1.5), lambda x, rate: (-x / rate,)),
    ("StudentT", dict(loc=0.3, scale=1.2), lambda x, loc, scale: (1.0, (x - loc) / scale)),
]


@pytest.mark.parametrize("name,kwargs,derivative", PATHWISE, ids=[p[0] for p in PATHWISE])
def test_rsample_gradients_are_those_of_torchs_transforms(name, kwargs, derivative):
    """Per draw: the gradient of ``sum(w * x)`` is ``sum(w * dx/dparam)`` (float64)."""
    dg.manual_seed(6)
    params = {k: dg.tensor(v, dtype=dg.float64, requires_grad=True) for k, v in kwargs.items()}
    fixed = {"Gamma": {"concentration": dg.tensor(2.5, dtype=dg.float64)},
             "StudentT": {"df": dg.tensor(4.0, dtype=dg.float64)}}.get(name, {})
    x = getattr(dg.distributions, name)(**fixed, **params).rsample((200,))
    w = RNG.standard_normal(200)
    got = dg.autograd.grad((x * dg.tensor(w)).sum(), list(params.values()))
    values = [p.item() for p in params.values()]
    want = derivative(x.detach().numpy(), *values)
    for g, d in zip(got, want):
        np.testing.assert_allclose(g.item(), (w * d).sum(), rtol=1e-9, atol=1e-12)


def test_straight_through_rsample_is_the_draw_with_the_probs_gradient():
    logits = dg.tensor([[0.3, -0.2, 1.0]], requires_grad=True)
    d = dg.distributions.OneHotCategoricalStraightThrough(logits=logits)
    dg.manual_seed(2)
    x = d.rsample()
    dg.manual_seed(2)
    np.testing.assert_array_equal(x.detach().numpy(), d.sample().numpy())
    weights = dg.tensor([1.0, 2.0, 3.0])
    (x * weights).sum().backward()
    t_logits = torch.tensor([[0.3, -0.2, 1.0]], requires_grad=True)
    (torch.softmax(t_logits, -1) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), t_logits.grad.numpy(), rtol=1e-6)


def test_rsample_refuses_the_implicit_gamma_gradient():
    D = dg.distributions
    c = dg.tensor([2.0], requires_grad=True)
    rate = dg.tensor([1.5], requires_grad=True)
    for d in (D.Gamma(c, 1.0), D.Beta(c, 1.0), D.Dirichlet(c * dg.ones(3)), D.StudentT(c)):
        with pytest.raises(NotImplementedError, match="implicit.*use sample"):
            d.rsample()
        assert not d.sample((2,)).requires_grad
        with dg.no_grad():   # (no gradient asked for: the draw is fine)
            assert d.rsample((2,)).shape[0] == 2
    # a gradient with respect to the rate is exact: d(x / rate) / d rate = -x / rate
    x = D.Gamma(2.0, rate).rsample((3,))
    (g,) = dg.autograd.grad(x.sum(), [rate])
    np.testing.assert_allclose(g.numpy(), [-(x.detach().numpy() / 1.5).sum()], rtol=1e-6)
    with pytest.raises(NotImplementedError, match="rsample"):
        D.Poisson(rate).rsample()


# -- arguments, shapes, constraints --------------------------------------------------------
def test_validation_messages_are_torchs():
    D = dg.distributions
    with pytest.raises(ValueError, match=r"Expected parameter scale .* to satisfy the "
                                         r"constraint GreaterThan\(lower_bound=0.0\)"):
        D.Normal(dg.zeros(2), dg.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match=r"Expected parameter probs .*Interval\(lower_bound"
                                         r"=0.0, upper_bound=1.0\)"):
        D.Bernoulli(probs=dg.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match="Expected parameter concentration"):
        D.Gamma(dg.tensor([-1.0]), 1.0)
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix"):
        D.MultivariateNormal(dg.zeros(2))
    with pytest.raises(ValueError, match="low must be below high"):
        D.Uniform(1.0, 0.0)
    D.Normal(dg.zeros(2), dg.tensor([1.0, -1.0]), validate_args=False)   # (not checked)


def test_expand_support_and_constraints():
    D, C = dg.distributions, dg.distributions.constraints
    cases = [D.Normal(dg.zeros(3), 1.0), D.Gamma(dg.ones(3), 2.0), D.Dirichlet(dg.ones(3, 4)),
             D.MultivariateNormal(dg.zeros(3, 2), scale_tril=dg.eye(2)),
             D.Independent(D.Normal(dg.zeros(3, 2), 1.0), 1), D.OneHotCategorical(dg.ones(3, 4)),
             D.TransformedDistribution(D.Normal(dg.zeros(3), 1.0), D.TanhTransform()),
             D.Categorical(logits=dg.zeros(3, 5)), D.LogNormal(dg.zeros(3), 1.0),
             D.Chi2(dg.ones(3)), D.Multinomial(4, logits=dg.zeros(3, 2)),
             D.NegativeBinomial(dg.ones(3), logits=dg.zeros(3)),
             D.OneHotCategoricalStraightThrough(dg.ones(3, 4))]
    for d in cases:
        e = d.expand((2, 3))
        assert type(e) is type(d), type(d)
        assert e.batch_shape == (2, 3) and e.event_shape == d.event_shape, type(d)
        assert e.sample().shape == (2, 3) + tuple(d.event_shape), type(d)
        assert e.log_prob(e.sample()).shape == (2, 3), type(d)
    assert D.Normal(0.0, 1.0).support is C.real and D.Gamma(1.0, 1.0).support is C.nonnegative
    assert D.Beta(1.0, 1.0).support is C.unit_interval
    assert D.Dirichlet(dg.ones(2)).support is C.simplex
    assert D.Uniform(0.0, 2.0).support.check(dg.tensor([1.0, 2.0])).tolist() == [True, False]
    assert C.simplex.check(dg.tensor([[0.5, 0.5], [0.5, 0.6]])).tolist() == [True, False]
    assert C.positive_definite.check(dg.eye(2)).item()
    assert C.lower_cholesky.check(dg.tensor([[1.0, 0.0], [2.0, 1.0]])).item()
    assert C.integer_interval(0, 3).check(dg.tensor([0.0, 3.0, 4.0, 1.5])).tolist() == \
        [True, True, False, False]


def test_enumerate_support_expand_and_default_validation():
    D = dg.distributions
    for name, make in (("Bernoulli", lambda M: M.Bernoulli(probs=M_tensor(M, [[0.2, 0.4]]))),
                       ("Categorical", lambda M: M.Categorical(logits=M_tensor(M, [[0.0] * 3]))),
                       ("OneHotCategorical",
                        lambda M: M.OneHotCategorical(logits=M_tensor(M, [[0.0] * 3])))):
        ours, theirs = make(D), make(torch.distributions)
        for expand in (True, False):
            np.testing.assert_array_equal(ours.enumerate_support(expand).numpy(),
                                          theirs.enumerate_support(expand).numpy(), name)
    mix = D.MixtureSameFamily(D.Categorical(logits=dg.zeros(2)),
                              D.Normal(dg.tensor([-1.0, 1.0]), 1.0)).expand((4, 3))
    assert mix.batch_shape == (4, 3) and mix.sample((5,)).shape == (5, 4, 3)
    assert mix.log_prob(dg.zeros(4, 3)).shape == (4, 3)
    D.Distribution.set_default_validate_args(False)
    try:
        D.Normal(0.0, -1.0)   # (not checked)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError, match="Expected parameter scale"):
        D.Normal(0.0, -1.0)


def M_tensor(module, values):
    lib = dg if module is dg.distributions else torch
    return lib.tensor(values, dtype=lib.float64)


def test_transforms_invert_and_compose():
    D = dg.distributions
    x = dg.tensor([-0.5, 0.2, 1.0], dtype=dg.float64)
    parts = [D.AffineTransform(0.5, -2.0), D.ExpTransform(), D.SigmoidTransform(),
             D.TanhTransform()]
    t = D.ComposeTransform(parts)
    y = t(x)
    np.testing.assert_allclose(t.inv(y).numpy(), x.numpy(), rtol=1e-10)
    tx = torch.tensor(x.numpy())
    tt = torch.distributions.ComposeTransform([
        torch.distributions.AffineTransform(0.5, -2.0), torch.distributions.ExpTransform(),
        torch.distributions.SigmoidTransform(), torch.distributions.TanhTransform()])
    np.testing.assert_allclose(y.numpy(), tt(tx).numpy(), rtol=1e-12)
    np.testing.assert_allclose(t.log_abs_det_jacobian(x, y).numpy(),
                               tt.log_abs_det_jacobian(tx, tt(tx)).numpy(), rtol=1e-10)
    np.testing.assert_allclose(t.inv.log_abs_det_jacobian(y, x).numpy(),
                               -tt.log_abs_det_jacobian(tx, tt(tx)).numpy(), rtol=1e-10)
    # with a cache, the inverse of the value just made is the value it came from
    tanh = D.TanhTransform(cache_size=1)
    big = dg.tensor([30.0])
    assert tanh.inv(tanh(big)) is big


# -- compiled == eager ---------------------------------------------------------------------
def _draw_and_score(loc, scale, conc, rate, probs):
    D = dg.distributions
    dists = [D.Normal(loc, scale), D.Gamma(conc, rate), D.Beta(conc, rate), D.Poisson(rate),
             D.Binomial(5, probs=probs), D.Dirichlet(conc.unsqueeze(-1) * dg.ones(2, 3)),
             D.StudentT(conc, loc, scale), D.Uniform(loc, loc + scale), D.Laplace(loc, scale),
             D.Geometric(probs), D.Categorical(probs=probs), D.OneHotCategorical(probs=probs),
             D.MultivariateNormal(loc, scale_tril=dg.diag_embed(scale)),
             D.TransformedDistribution(D.Normal(loc, scale), D.TanhTransform(cache_size=1)),
             D.RelaxedBernoulli(0.5, probs=probs), D.NegativeBinomial(rate, probs=probs),
             D.Multinomial(3, probs=probs), D.OneHotCategoricalStraightThrough(probs=probs)]
    out = []
    for d in dists:
        x = d.rsample((4,)) if d.has_rsample and not isinstance(
            d, (D.Gamma, D.Beta, D.StudentT, D.Dirichlet)) else d.sample((4,))
        out += [x, d.log_prob(x)]
    return tuple(out)


def test_compiled_draws_equal_eager_bit_for_bit():
    args = (dg.tensor([0.5, -1.0]), dg.tensor([1.0, 2.0]), dg.tensor([1.5, 3.0]),
            dg.tensor([2.0, 0.5]), dg.tensor([0.3, 0.7]))
    compiled = dg.compile(_draw_and_score)
    for fn in (_draw_and_score, compiled):   # (the first compiled call traces)
        dg.manual_seed(11)
        runs = [[t.numpy().copy() for t in fn(*args)] for _ in range(3)]
        if fn is _draw_and_score:
            want = runs
    for call, (got_run, want_run) in enumerate(zip(runs, want)):
        for i, (got, ref) in enumerate(zip(got_run, want_run)):
            np.testing.assert_array_equal(got, ref, err_msg=f"call {call}, output {i}")
    assert not np.array_equal(want[0][0], want[1][0])   # (fresh draws each call)
    drawn = {node.op.name for node in compiled.graph.nodes if "random" in node.op.name}
    assert drawn == {"random", "random_gamma", "random_poisson", "random_binomial"}


def _sac_losses(compiled: bool, steps: int = 5):
    """A squashed-Gaussian policy (SAC's actor): log_prob of its own rsample, trained
    against a fixed critic."""
    dg.manual_seed(0)
    D = dg.distributions
    policy = dg.nn.Linear(3, 4)
    critic = dg.nn.Linear(2, 1)
    for p in critic.parameters():
        p.requires_grad_(False)
    opt = dg.optim.Adam(policy.parameters(), lr=0.05)
    states = dg.tensor(np.random.default_rng(7).standard_normal((8, 3)).astype(np.float32))

    def step(states):
        opt.zero_grad()
        mu, log_std = policy(states).chunk(2, -1)
        dist = D.TransformedDistribution(D.Normal(mu, log_std.clamp(-5, 2).exp()),
                                         [D.TanhTransform(cache_size=1)])
        action = dist.rsample()
        log_prob = dist.log_prob(action).sum(-1)
        loss = (0.2 * log_prob - critic(action).squeeze(-1)).mean()
        loss.backward()
        opt.step()
        return loss

    step = dg.compile(step) if compiled else step
    return [step(states).item() for _ in range(steps)]



def test_sac_policy_trains_the_same_compiled():
    eager, compiled = _sac_losses(False), _sac_losses(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-6, atol=1e-7)
    assert len(set(eager)) == 5   # (it trains: the loss changes each step)


def test_torch_import_paths_under_the_alias():
    """torch's submodule paths name dualgraph's modules under the torch alias."""
    import subprocess
    import sys
    code = ("import dualgraph.compat as c; c.install_torch_alias(); import torch; "
            "from torch.distributions.categorical import Categorical; "
            "from torch.distributions.normal import Normal; "
            "assert Categorical is torch.distributions.Categorical; "
            "assert Normal is torch.distributions.Normal; "
            "from torch.distributions.beta import Beta; "
            "from torch.distributions.uniform import Uniform; "
            "from torch.distributions.multivariate_normal import MultivariateNormal; "
            "from torch.distributions.transforms import TanhTransform; "
            "from torch.distributions.transformed_distribution import TransformedDistribution; "
            "from torch.distributions.kl import register_kl, kl_divergence; "
            "from torch.distributions.utils import probs_to_logits, broadcast_all; "
            "from torch.distributions import constraints; "
            "from torch.distributions.constraints import positive; "
            "assert Beta is torch.distributions.Beta and positive is constraints.positive; "
            "assert torch.distributions.Uniform is Uniform; "
            "d = torch.distributions.TransformedDistribution(torch.distributions.Normal("
            "torch.zeros(2), torch.ones(2)), [TanhTransform(cache_size=1)]); "
            "a = d.rsample(); print(d.log_prob(a).shape)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


class _HybridPolicy(dg.nn.Module):
    """Returns its distributions, as RL policies do."""

    def __init__(self):
        super().__init__()
        self.body = dg.nn.Linear(3, 4)
        self.log_std = dg.nn.Parameter(dg.tensor([-0.5, 0.2]))

    def forward(self, obs):
        D = dg.distributions
        h = self.body(obs)
        return (D.Categorical(logits=h[:, :2]),
                D.Independent(D.Normal(h[:, 2:], self.log_std.exp()), 1))


def _update(policy, old_discrete, old_continuous, obs, actions, moves):
    """A policy loss against distributions passed in (the old policy's)."""
    D = dg.distributions
    discrete, continuous = policy(obs)
    logp = discrete.log_prob(actions) + continuous.log_prob(moves)
    old = old_discrete.log_prob(actions) + old_continuous.log_prob(moves)
    kl = D.kl_divergence(old_discrete, discrete) + D.kl_divergence(old_continuous, continuous)
    loss = -((logp - old).exp()).mean() + kl.mean() - discrete.entropy().mean()
    loss.backward()
    return loss, continuous.base_dist.cdf(dg.zeros_like(moves))


def test_distributions_pass_in_and_out_of_compiled_code_as_their_tensors():
    """A distribution argument is a structure of its tensors (graph inputs, not an object
    guarded by identity: a new one each call reuses the graph), and a compiled module
    returns its distributions rebuilt around the graph's outputs; values and gradients
    are eager's."""
    D = dg.distributions
    runs = {}
    for compiled in (False, True):
        dg.manual_seed(0)
        policy = _HybridPolicy()
        step = dg.compile(_update) if compiled else _update
        net = dg.compile(policy) if compiled else policy
        out = []
        for call in range(3):
            r = np.random.default_rng(call)
            obs = dg.tensor(r.standard_normal((5, 3)).astype(np.float32))
            old = (D.Categorical(probs=dg.tensor(r.dirichlet([1, 1], 5).astype(np.float32))),
                   D.Independent(D.Normal(dg.tensor(r.standard_normal((5, 2)).astype(
                       np.float32)), dg.ones(5, 2)), 1))
            actions = dg.tensor(r.integers(0, 2, 5))
            moves = dg.tensor(r.standard_normal((5, 2)).astype(np.float32))
            policy.zero_grad()
            loss, cdf = step(net, *old, obs, actions, moves)
            discrete, continuous = net(obs)
            assert type(discrete) is D.Categorical and type(continuous) is D.Independent
            assert continuous.reinterpreted_batch_ndims == 1
            out.append([t.detach().numpy().copy() for t in (
                loss, cdf, policy.log_std.grad, policy.body.weight.grad, discrete.probs,
                continuous.base_dist.scale)])
        runs[compiled] = out
        if compiled:
            assert len(step.cache) == 1 and len(net.cache) == 1
            names = step.explain()
            assert "old_discrete.logits" in names and "same Categorical object" not in names
    for got, want in zip(runs[True], runs[False]):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_low_rank_normal_expands_and_has_the_normal_kl():
    """LowRankMultivariateNormal.expand broadcasts loc, cov_factor and an unbatched
    cov_diag to the new batch (the generic expand took cov_diag's own dims as batch dims);
    kl_divergence between two is the Gaussians' (through MultivariateNormal's rule)."""
    loc, factor, diag = real(2, 3), real(2, 3, 2), pos(3)
    value = real(4, 2, 3)

    def stats(lib, ts):
        D = lib.distributions
        p = D.LowRankMultivariateNormal(ts[0], ts[1], ts[2])
        q = D.LowRankMultivariateNormal(ts[0] * 0.5, ts[1] * 0.5, ts[2] * 2)
        e = p.expand((4, 2))
        return lib.cat([e.log_prob(lib.tensor(value)).flatten(), e.entropy().flatten(),
                        e.variance.flatten(), D.kl_divergence(p, q)])
    _compare(stats, [loc, factor, diag])
