"""Probability distributions, as ``torch.distributions``: the families (continuous.py,
discrete.py, gamma.py, multivariate.py, relaxed.py), transforms and transformed
distributions (transforms.py), constraints (constraints.py) and ``kl_divergence``
(kl.py).

Everything is built from ordinary ops, so ``log_prob``, ``entropy`` and ``rsample`` have
gradients and trace into compiled steps; draws read dualgraph's generator (``random``
nodes when traced, and ``random_gamma`` / ``random_poisson`` / ``random_binomial`` for the
families no transform of uniforms gives), so compiled draws equal eager ones, but their
numbers are not torch's for the same seed. torch's import paths
(``torch.distributions.normal``, ``.beta``, ``.transforms``, ``.kl``, ...) name these
modules.

>>> import dualgraph as dg
>>> d = Categorical(logits=dg.zeros(2, 4))
>>> d.log_prob(dg.tensor([0, 3]))
tensor([-1.3863, -1.3863])
>>> round(Normal(0.0, 1.0).entropy().item(), 4)
1.4189
"""
from __future__ import annotations

import sys

from . import constraints, continuous, discrete, distribution, gamma, kl, multivariate
from . import relaxed, transforms
from .continuous import (Cauchy, Exponential, Gumbel, HalfNormal, Laplace, LogNormal,
                         Normal, Uniform)
from .discrete import (Bernoulli, Binomial, Categorical, Geometric, Multinomial,
                       NegativeBinomial, OneHotCategorical, OneHotCategoricalStraightThrough,
                       Poisson)
from .distribution import Distribution
from .gamma import Beta, Chi2, Dirichlet, Gamma, StudentT
from .kl import kl_divergence, register_kl
from .multivariate import (Independent, LowRankMultivariateNormal, MixtureSameFamily,
                           MultivariateNormal)
from .relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from .transforms import (AffineTransform, ComposeTransform, ExpTransform, SigmoidTransform,
                         TanhTransform, Transform, TransformedDistribution)

__all__ = ["Distribution", "constraints", "transforms", "kl_divergence", "register_kl",
           *continuous.__all__, *discrete.__all__, *gamma.__all__, *multivariate.__all__,
           "RelaxedBernoulli", "RelaxedOneHotCategorical", *transforms.__all__]

# torch.distributions' one-class submodules (``from torch.distributions.beta import Beta``)
# name the module that defines the class
_SUBMODULES = {
    "normal": continuous, "uniform": continuous, "exponential": continuous,
    "laplace": continuous, "cauchy": continuous, "gumbel": continuous,
    "half_normal": continuous, "log_normal": continuous,
    "bernoulli": discrete, "categorical": discrete, "one_hot_categorical": discrete,
    "geometric": discrete, "poisson": discrete, "binomial": discrete,
    "multinomial": discrete, "negative_binomial": discrete, "utils": distribution,
    "gamma": gamma, "chi2": gamma, "beta": gamma, "dirichlet": gamma, "studentT": gamma,
    "multivariate_normal": multivariate, "lowrank_multivariate_normal": multivariate,
    "independent": multivariate,
    "mixture_same_family": multivariate,
    "relaxed_bernoulli": relaxed, "relaxed_categorical": relaxed,
    "transformed_distribution": transforms,
}
for _name, _module in _SUBMODULES.items():
    sys.modules.setdefault(f"{__name__}.{_name}", _module)
