"""The layers of ``dg.nn`` (``Linear``, ``Conv2d``, ``BatchNorm2d``, ``CrossEntropyLoss``,
...), with torch's names, arguments, defaults, initialisation, state-dict keys and printed
form. See docs/nn_layers.md."""
from .activation import (CELU, ELU, GELU, GLU, SELU, Hardsigmoid, Hardswish,  # noqa: F401
                         Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU, ReLU,
                         ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softsign, Tanh,
                         Tanhshrink, Threshold)
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,  # noqa: F401
                   Fold, Unfold)
from .dropout import Dropout, Dropout1d, Dropout2d  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .linear import Bilinear, Flatten, Identity, Linear, Unflatten  # noqa: F401
from .loss import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss,  # noqa: F401
                   CosineSimilarity, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss,
                   MarginRankingLoss, MSELoss, NLLLoss, PairwiseDistance, SmoothL1Loss,
                   TripletMarginLoss)
from .norm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm,  # noqa: F401
                   InstanceNorm1d, InstanceNorm2d, LayerNorm, RMSNorm)
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,  # noqa: F401
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d, AvgPool3d,
                      MaxPool1d, MaxPool2d, MaxPool3d)
from .resample import (ConstantPad1d, ConstantPad2d, PixelShuffle,  # noqa: F401
                       PixelUnshuffle, ReflectionPad1d, ReflectionPad2d, ReplicationPad1d,
                       ReplicationPad2d, Upsample, UpsamplingBilinear2d,
                       UpsamplingNearest2d, ZeroPad1d, ZeroPad2d)

__all__ = [
    # activations
    "CELU", "ELU", "GELU", "GLU", "SELU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU",
    "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU", "ReLU6", "Sigmoid", "SiLU",
    "Softmax", "Softmin", "Softplus", "Softsign", "Tanh", "Tanhshrink", "Threshold",
    # linear, shape, convolution, pooling
    "Identity", "Linear", "Bilinear", "Flatten", "Unflatten", "Conv1d", "Conv2d", "Conv3d",
    "ConvTranspose1d", "ConvTranspose2d", "Unfold", "Fold", "MaxPool1d", "MaxPool2d",
    "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    # resampling and padding
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle",
    "PixelUnshuffle", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d",
    "ReplicationPad2d", "ConstantPad1d", "ConstantPad2d", "ZeroPad1d", "ZeroPad2d",
    # normalisation, dropout, embedding
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
    "LayerNorm", "GroupNorm", "RMSNorm", "Dropout", "Dropout1d", "Dropout2d", "Embedding",
    # losses
    "L1Loss", "MSELoss", "SmoothL1Loss", "HuberLoss", "NLLLoss", "CrossEntropyLoss",
    "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "MarginRankingLoss", "CosineEmbeddingLoss",
    "TripletMarginLoss",
    # distances
    "PairwiseDistance", "CosineSimilarity",
]
