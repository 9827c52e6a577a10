"""Inference folding for the ONNX export: the model's parameters are constants of the
exported graph, so what only they determine is computed once here rather than written as
nodes. Constant subgraphs fold (``fold_constants`` with the parameters known: an eval-mode
BatchNorm's ``1 / sqrt(running_var + eps)``, its reshapes), and a per-channel affine chain
after a convolution or linear layer (eval-mode BatchNorm) folds into that layer's weight
and bias (``passes/affine.py``, whose precondition the lowering rule ``fold_batchnorm``
shares).

>>> import dualgraph as dg, dualgraph.nn as nn
>>> m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).eval()
>>> [n.op_type for n in dg.onnx.export(m, dg.randn(1, 3, 8, 8), "m.onnx").graph.node]
['Conv']
"""
from __future__ import annotations

from ..passes.affine import affine_chains, fold_affine_chains
from ..passes.fold import fold_constants


def fold_for_inference(graph, known: dict):
    """``graph`` with its constant subgraphs and per-channel affine chains folded;
    ``known`` maps the inputs that hold parameters to their arrays."""
    graph, _ = fold_constants(graph, known=known)
    arrays = {**known, **graph.constants}
    chains = affine_chains(graph, arrays)
    return fold_affine_chains(graph, chains, arrays) if chains else graph
