"""Optimisers and learning-rate schedulers (mirrors ``torch.optim``); see docs/optim.md."""
from . import lr_scheduler, swa_utils  # noqa: F401
from .adagrad import Adagrad  # noqa: F401
from .adam import Adam, AdamW  # noqa: F401
from .adaptive import Adadelta, Adamax, NAdam, RAdam, SparseAdam  # noqa: F401
from .lbfgs import LBFGS  # noqa: F401
from .matrix import Adafactor, Muon  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .rmsprop import RMSprop  # noqa: F401
from .rprop import ASGD, Rprop  # noqa: F401
from .sgd import SGD  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "SparseAdam", "NAdam", "RAdam", "Rprop", "ASGD", "LBFGS", "Adafactor", "Muon",
           "lr_scheduler"]
