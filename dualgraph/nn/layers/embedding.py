"""Embedding: a lookup table of learned vectors, as ``torch.nn.Embedding``."""
from __future__ import annotations

from ...autograd import no_grad
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from ._util import new_parameter


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) looked up by integer indices of
    any shape; the output adds a trailing ``embedding_dim``. The weight starts N(0, 1), with
    the ``padding_idx`` row zero (and kept out of the gradient).

    >>> import dualgraph as dg
    >>> emb = dg.nn.Embedding(10, 3, padding_idx=0)
    >>> emb(dg.tensor([[0, 2], [4, 9]])).shape
    dualgraph.Size([2, 2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False, _weight=None,
                 _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"padding_idx ({padding_idx}) must be within "
                                 f"[-{num_embeddings}, {num_embeddings})")
            if padding_idx < 0:
                padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = new_parameter((num_embeddings, embedding_dim), device, dtype)
            self.weight.requires_grad_(not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"_weight of shape {tuple(_weight.shape)} does not match "
                                 f"({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += ", scale_grad_by_freq=True"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False):
        """An Embedding whose weight is ``embeddings`` (2-D, shared, not re-initialised),
        frozen unless ``freeze=False``."""
        if embeddings.ndim != 2:
            raise ValueError(f"Embeddings parameter is expected to be 2-dimensional, got "
                             f"shape {tuple(embeddings.shape)}")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)
