"""Embedding (a lookup table of learned vectors) and EmbeddingBag (the sum, mean or max of
bags of them), as ``torch.nn``'s."""
from __future__ import annotations

from ...autograd import no_grad
from .. import functional as F
from .. import init
from ..module import Module
from ..parameter import Parameter
from ._util import new_parameter


def _table(module, num_embeddings, embedding_dim, padding_idx, weight, freeze, device, dtype):
    """Give an embedding module its sizes, ``padding_idx`` (made non-negative) and weight:
    ``weight`` itself if given (shared, not re-initialised), else a new N(0, 1) table."""
    module.num_embeddings = num_embeddings
    module.embedding_dim = embedding_dim
    if padding_idx is not None:
        if not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(f"padding_idx ({padding_idx}) must be within "
                             f"[-{num_embeddings}, {num_embeddings})")
        if padding_idx < 0:
            padding_idx += num_embeddings
    module.padding_idx = padding_idx
    if weight is None:
        module.weight = new_parameter((num_embeddings, embedding_dim), device, dtype)
        module.weight.requires_grad_(not freeze)
        _reset_table(module)
    else:
        if tuple(weight.shape) != (num_embeddings, embedding_dim):
            raise ValueError(f"_weight of shape {tuple(weight.shape)} does not match "
                             f"({num_embeddings}, {embedding_dim})")
        module.weight = Parameter(weight, requires_grad=not freeze)


def _reset_table(module) -> None:
    init.normal_(module.weight)
    if module.padding_idx is not None:
        with no_grad():
            module.weight[module.padding_idx] = 0.0


def _table_repr(module, bag_mode: str | None = None) -> str:
    """torch's printed settings of an Embedding, or of an EmbeddingBag of ``bag_mode``
    (defaults left out; the two orders are torch's)."""
    padding = "" if module.padding_idx is None else f", padding_idx={module.padding_idx}"
    s = f"{module.num_embeddings}, {module.embedding_dim}" + ("" if bag_mode else padding)
    if module.max_norm is not None:
        s += f", max_norm={module.max_norm}"
    if module.norm_type != 2:
        s += f", norm_type={module.norm_type}"
    if module.scale_grad_by_freq is not False:
        s += ", scale_grad_by_freq=True"
    if bag_mode:
        return s + f", mode={bag_mode!r}" + padding
    return s + (", sparse=True" if module.sparse is not False else "")


def _pretrained_sizes(embeddings) -> tuple:
    if embeddings.ndim != 2:
        raise ValueError(f"Embeddings parameter is expected to be 2-dimensional, got "
                         f"shape {tuple(embeddings.shape)}")
    return tuple(embeddings.shape)


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
        _table(self, num_embeddings, embedding_dim, padding_idx, _weight, _freeze, device, dtype)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse

    def reset_parameters(self) -> None:
        _reset_table(self)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        return _table_repr(self)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, sparse: bool = False):
        """An Embedding whose weight is ``embeddings`` (2-D, shared, not re-initialised),
        frozen unless ``freeze=False``."""
        rows, cols = _pretrained_sizes(embeddings)
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)


class EmbeddingBag(Module):
    """The sum, mean or max of bags of rows of ``weight`` (``F.embedding_bag``): each row of
    a 2-D input is a bag, or a 1-D input is split into bags at ``offsets``. Entries equal
    to ``padding_idx`` are left out of their bags.

    >>> import dualgraph as dg
    >>> bag = dg.nn.EmbeddingBag(10, 3, mode="sum")
    >>> bag(dg.tensor([1, 2, 4, 5, 4]), dg.tensor([0, 2])).shape
    dualgraph.Size([2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight=None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device=None, dtype=None):
        super().__init__()
        _table(self, num_embeddings, embedding_dim, padding_idx, _weight, False, device, dtype)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        self.mode, self.include_last_offset = mode, include_last_offset

    def reset_parameters(self) -> None:
        _reset_table(self)

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        return _table_repr(self, self.mode)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False, padding_idx: int | None = None):
        """An EmbeddingBag whose weight is ``embeddings`` (2-D, shared, not re-initialised),
        frozen unless ``freeze=False``."""
        rows, cols = _pretrained_sizes(embeddings)
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                  embeddings, include_last_offset, padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag
