"""Neural-network modules, layers, functional and init (mirrors torch.nn)."""
from . import functional, utils  # noqa: F401
from . import init  # noqa: F401
from .containers import (ModuleDict, ModuleList, ParameterDict, ParameterList,  # noqa: F401
                         Sequential)
from .attention import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .module import Module  # noqa: F401
from .parameter import Parameter  # noqa: F401
from .layers.lazy import UninitializedBuffer, UninitializedParameter  # noqa: F401
from .rnn import *  # noqa: F401,F403
from . import modules  # noqa: F401,E402  (torch.nn.modules.* import paths)
from . import parallel  # noqa: F401,E402
from .parallel import DataParallel  # noqa: F401,E402
