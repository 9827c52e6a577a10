"""AdaptiveLogSoftmaxWithLoss, as in ``torch.nn`` (Grave et al., efficient softmax
approximation for GPUs): a head over the frequent classes and one token per cluster of
rarer ones, each cluster a low-rank two-layer projection of its own."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...ops import creation, elementwise as ew, index as index_ops, reduce as red
from ...ops import shape as shape_ops
from ..containers import ModuleList, Sequential
from ..module import Module
from .linear import Linear

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """``forward(input, target)`` gives each row's log-probability of its target
    (``output``) and their negated mean (``loss``); ``log_prob`` the full log-probabilities,
    ``predict`` their argmax. The classes below ``cutoffs[0]`` are scored by ``head``,
    cluster ``i``'s (``cutoffs[i]`` up to the next) by ``tail[i]`` (hidden size
    ``in_features // div_value ** (i + 1)``) plus the head's score of the cluster.

    torch gathers each cluster's rows by ``nonzero`` (sizes that depend on the targets);
    here every cluster scores every row and a mask keeps the rows whose target is in it, so
    that a compiled step is one graph: the same numbers, a cluster's work for every row."""

    def __init__(self, in_features: int, n_classes: int, cutoffs, div_value: float = 4.0,
                 head_bias: bool = False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if (len(cutoffs) == 0 or cutoffs != sorted(cutoffs) or min(cutoffs) <= 0
                or max(cutoffs) > n_classes - 1 or len(set(cutoffs)) != len(cutoffs)
                or any(int(c) != c for c in cutoffs)):
            raise ValueError("cutoffs should be a sequence of unique, positive integers "
                             "sorted in an increasing order, where each value is between "
                             "1 and n_classes-1")
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device,
                           dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(
                Linear(in_features, hidden, bias=False, device=device, dtype=dtype),
                Linear(hidden, size, bias=False, device=device, dtype=dtype)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for projection in self.tail:
            for layer in projection:
                layer.reset_parameters()

    def forward(self, input, target):
        batched = input.ndim == 2
        if input.ndim not in (1, 2) or target.ndim != input.ndim - 1 or (
                batched and input.shape[0] != target.shape[0]):
            raise RuntimeError("Input and target should have the same size in the batch "
                               "dimension" if batched else "1D target tensor expected, "
                               "multi-target not supported")
        if type(target._data) is np.ndarray and target.numel() and (   # (eager: checked)
                red.amin(target).item() < 0 or red.amax(target).item() >= self.n_classes):
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{red.amin(target).item()}, "
                               f"{red.amax(target).item()}] were found. ")
        x = input if batched else shape_ops.unsqueeze(input, 0)
        t = target if batched else shape_ops.unsqueeze(target, 0)
        head = red.log_softmax(self.head(x), 1)
        column = t   # (the head's column of each row: its class, or its cluster's token)
        output = creation.zeros_like(head[:, 0])
        for i, projection in enumerate(self.tail):
            low, high = self.cutoffs[i], self.cutoffs[i + 1]
            inside = (t >= low) & (t < high)
            column = ew.where(inside, self.shortlist_size + i, column)
            local = ew.clamp(t - low, 0, high - low - 1)
            scores = red.log_softmax(projection(x), 1)
            picked = shape_ops.squeeze(index_ops.gather(scores, 1,
                                                        shape_ops.unsqueeze(local, 1)), 1)
            output = output + ew.where(inside, picked, 0.0)
        output = output + shape_ops.squeeze(
            index_ops.gather(head, 1, shape_ops.unsqueeze(column, 1)), 1)
        loss = red.mean(-output)
        return _ASMoutput(output if batched else shape_ops.squeeze(output, 0), loss)

    def log_prob(self, input):
        """The log-probabilities of every class, (N, n_classes) (or (n_classes,))."""
        batched = input.ndim == 2
        x = input if batched else shape_ops.unsqueeze(input, 0)
        head = red.log_softmax(self.head(x), 1)
        parts = [head[:, :self.shortlist_size]]
        for i, projection in enumerate(self.tail):
            cluster = head[:, self.shortlist_size + i:self.shortlist_size + i + 1]
            parts.append(red.log_softmax(projection(x), 1) + cluster)
        out = shape_ops.cat(parts, 1)
        return out if batched else shape_ops.squeeze(out, 0)

    def predict(self, input):
        """The most likely class of each row (of the one input)."""
        return red.argmax(self.log_prob(input), -1)
