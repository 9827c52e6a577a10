"""torch.nn.modules' import paths: ``from dualgraph.nn.modules.linear import Linear``,
``dualgraph.nn.modules.batchnorm._BatchNorm``, ``dualgraph.nn.modules.module.Module``.

Programs import layers and their private base classes by these paths (to test
``isinstance(m, _BatchNorm)`` when grouping parameters for weight decay, say). dualgraph's
layers live in other files, so each path is a module object, registered in ``sys.modules``,
holding the names of the files that define what torch's file of that name defines.
"""
from __future__ import annotations

import sys
import types

from . import attention, containers, module, rnn
from .attention import *  # noqa: F401,F403
from .containers import (ModuleDict, ModuleList, ParameterDict, ParameterList,  # noqa: F401
                         Sequential)
from .layers import (activation, adaptive, conv, dropout, embedding, linear, loss, norm,
                     pooling, resample)
from .layers import *  # noqa: F401,F403
from .module import Module  # noqa: F401
from .rnn import *  # noqa: F401,F403

# torch's file under nn/modules -> the dualgraph modules that define its names
_PATHS = {
    "module": (module,), "container": (containers,), "linear": (linear,),
    "flatten": (linear,), "conv": (conv,), "activation": (activation, attention),
    "loss": (loss,), "dropout": (dropout,), "pooling": (pooling,), "batchnorm": (norm,),
    "instancenorm": (norm,), "normalization": (norm,), "sparse": (embedding,),
    "rnn": (rnn,), "transformer": (attention,), "distance": (loss,),
    "pixelshuffle": (resample,), "upsampling": (resample,), "padding": (resample,),
    "fold": (conv,), "adaptive": (adaptive,),
}


def _path_module(name: str, sources) -> types.ModuleType:
    path = types.ModuleType(f"{__name__}.{name}", f"torch.nn.modules.{name}'s names.")
    for source in sources:
        path.__dict__.update({k: v for k, v in vars(source).items()
                              if not k.startswith("__")})
    return path


for _name, _sources in _PATHS.items():
    globals()[_name] = sys.modules[f"{__name__}.{_name}"] = _path_module(_name, _sources)
