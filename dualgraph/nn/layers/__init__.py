"""The layers of ``dg.nn`` (``Linear``, ``Conv2d``, ``BatchNorm2d``, ``CrossEntropyLoss``,
...), with torch's names, arguments, defaults, initialisation, state-dict keys and printed
form. See docs/nn_layers.md."""
from .activation import (CELU, ELU, GELU, GLU, SELU, Hardsigmoid, Hardswish,  # noqa: F401
                         Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU, ReLU,
                         ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softsign, Tanh,
                         Tanhshrink, Threshold)
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d  # noqa: F401
from .dropout import Dropout, Dropout1d, Dropout2d  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .linear import Bilinear, Flatten, Identity, Linear, Unflatten  # noqa: F401
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss,  # noqa: F401
                   KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss)
from .norm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm,  # noqa: F401
                   InstanceNorm1d, InstanceNorm2d, LayerNorm, RMSNorm)
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d,  # noqa: F401
                      AvgPool2d, MaxPool1d, MaxPool2d)

__all__ = [
    # activations
    "CELU", "ELU", "GELU", "GLU", "SELU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU",
    "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU", "ReLU6", "Sigmoid", "SiLU",
    "Softmax", "Softmin", "Softplus", "Softsign", "Tanh", "Tanhshrink", "Threshold",
    # linear, shape, convolution, pooling
    "Identity", "Linear", "Bilinear", "Flatten", "Unflatten", "Conv1d", "Conv2d",
    "ConvTranspose1d", "ConvTranspose2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    # normalisation, dropout, embedding
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
    "LayerNorm", "GroupNorm", "RMSNorm", "Dropout", "Dropout1d", "Dropout2d", "Embedding",
    # losses
    "L1Loss", "MSELoss", "SmoothL1Loss", "HuberLoss", "NLLLoss", "CrossEntropyLoss",
    "BCELoss", "BCEWithLogitsLoss", "KLDivLoss",
]
