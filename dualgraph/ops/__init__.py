"""The op families. Importing this package registers every op and binds Tensor methods."""
from . import creation, elementwise, methods, reduce, shape  # noqa: F401
from .opdef import REGISTRY, OpDef, defop, get  # noqa: F401

methods.install([elementwise.METHODS, reduce.METHODS, shape.METHODS, creation.METHODS])
