"""The op families. Importing this package registers every op and binds Tensor methods."""
from . import (arrange, attention, batch_norm, collective, control, conv, creation, ctc,  # noqa: F401
               decompositions, dynamic, elementwise, epilogue, excite, fused, index, layout,
               linalg, loss, methods, norm, recurrent, recurrent_gru_elman, recurrent_layer,
               reduce, shape,
               signal, special, tensor_methods)
from .opdef import REGISTRY, OpDef, defop, get  # noqa: F401

methods.install([arrange.METHODS, control.METHODS, elementwise.METHODS, reduce.METHODS,
                 shape.METHODS, index.METHODS, linalg.METHODS, conv.METHODS, creation.METHODS,
                 decompositions.METHODS, special.METHODS, tensor_methods.METHODS])
