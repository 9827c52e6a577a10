"""``dg.nn.functional``: torch's ``nn.functional`` names in one namespace, gathered from
``functional_core`` (losses, normalisations, dropout, embedding lookup, attention and the op
families' activations, convolutions and pooling), ``functional_layers`` (embedding bags,
local response norm, channel shuffle, power-average pooling, max unpooling, RReLU, alpha
dropout, the in-place activations) and ``functional_losses`` (the margin and likelihood
losses). The last two build on the first, so the three import in that order and no cycle.

>>> import dualgraph as dg
>>> import dualgraph.nn.functional as F
>>> logits = dg.tensor([[2.0, 0.5, -1.0]])
>>> F.cross_entropy(logits, dg.tensor([0])).item() < 0.3
True
"""
from .functional_core import *  # noqa: F401,F403
from .functional_core import _REDUCTIONS, _map_same, _reduction  # noqa: F401  (the layers')
from .functional_layers import *  # noqa: F401,F403
from .functional_losses import *  # noqa: F401,F403
