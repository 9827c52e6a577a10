"""The op families. Importing this package registers every op and binds Tensor methods."""
from . import creation, conv, elementwise, fused, index, linalg, methods, reduce, shape  # noqa: F401
from .opdef import REGISTRY, OpDef, defop, get  # noqa: F401

methods.install([elementwise.METHODS, reduce.METHODS, shape.METHODS, index.METHODS,
                 linalg.METHODS, conv.METHODS, creation.METHODS])
