"""The op families. Importing this package registers every op and binds Tensor methods."""
from . import (arrange, attention, batch_norm, collective, compose, control, conv,  # noqa: F401
               creation, ctc, decompositions, dynamic, elementwise, elementwise_compose,
               epilogue, excite, float_bits, fused, index, layout, linalg, loss, lu, methods,
               norm, prologue, recurrent, recurrent_gru_elman, recurrent_layer, reduce,
               selection, shape, signal, special, special_series, tensor_methods)
from .opdef import REGISTRY, OpDef, defop, get  # noqa: F401

methods.install([arrange.METHODS, control.METHODS, elementwise.METHODS, reduce.METHODS,
                 shape.METHODS, index.METHODS, linalg.METHODS, conv.METHODS, creation.METHODS,
                 decompositions.METHODS, special.METHODS, tensor_methods.METHODS,
                 compose.METHODS, elementwise_compose.METHODS, float_bits.METHODS, selection.METHODS,
                 special_series.METHODS, lu.METHODS])
