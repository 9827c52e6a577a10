"""Dropout layers: Dropout (elements), Dropout1d, Dropout2d and Dropout3d (whole channels),
AlphaDropout and FeatureAlphaDropout (for SELU networks).

They are active in training mode only: ``model.eval()`` makes them the identity.
"""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class _DropoutNd(Module):
    _fn = None

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return self._fn(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """In training, zero each element with probability ``p`` and scale the others by
    ``1 / (1 - p)`` (so the expected value is unchanged); in eval mode, the identity.

    >>> import dualgraph as dg
    >>> drop = dg.nn.Dropout(0.5).eval()
    >>> bool((drop(dg.ones(4)) == 1).all())
    True
    """

    _fn = staticmethod(F.dropout)


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) or (C, L) input with probability ``p``."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) or (C, H, W) input with probability ``p``."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input with probability ``p``."""

    _fn = staticmethod(F.dropout3d)


class AlphaDropout(_DropoutNd):
    """Dropout for SELU networks: keeps zero mean and unit variance (dropped values take
    SELU's saturation value, then all are scaled and shifted)."""

    _fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels of (N, C, *) input."""

    _fn = staticmethod(F.feature_alpha_dropout)
