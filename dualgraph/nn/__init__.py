"""Neural-network modules, layers, functional and init (mirrors torch.nn)."""
from . import functional, utils  # noqa: F401
