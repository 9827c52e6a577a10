"""``dg.special``: ``torch.special``'s functions, each an op or a composite of dualgraph's
(ops/special.py, ops/special_series.py) under torch's name for it.

>>> import dualgraph as dg
>>> dg.special.ndtr(dg.tensor([0.0])).item()
0.5
"""
from __future__ import annotations

from .ops.elementwise import erf, erfc, exp2, expm1, log1p, round, sigmoid as expit  # noqa: F401
from .ops.reduce import log_softmax, logsumexp, softmax  # noqa: F401
from .ops.special import digamma, erfinv, lgamma as gammaln, logit, polygamma  # noqa: F401
from .ops.special import xlog1py, xlogy  # noqa: F401
from .ops.special import digamma as psi  # noqa: F401
from .ops.special_series import (bessel_j0, bessel_j1, entr, erfcx, i0, i0e, i1,  # noqa: F401
                                 i1e, log_ndtr, ndtr, ndtri, sinc, zeta)
from .ops.special_series import mvlgamma as multigammaln  # noqa: F401

__all__ = ["bessel_j0", "bessel_j1", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
           "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit",
           "logsumexp", "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round",
           "sinc", "softmax", "xlog1py", "xlogy", "zeta"]
