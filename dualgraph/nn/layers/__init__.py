"""The layers of ``dg.nn`` (``Linear``, ``Conv2d``, ``BatchNorm2d``, ``CrossEntropyLoss``,
...), with torch's names, arguments, defaults, initialisation, state-dict keys and printed
form. See docs/nn_layers.md."""
from .activation import (CELU, ELU, GELU, GLU, SELU, Hardshrink, Hardsigmoid,  # noqa: F401
                         Hardswish, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU,
                         ReLU, ReLU6, RReLU, Sigmoid, SiLU, Softmax, Softmax2d, Softmin,
                         Softplus, Softshrink, Softsign, Tanh, Tanhshrink, Threshold)
from .adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: F401
from .conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,  # noqa: F401
                   ConvTranspose3d, Fold, Unfold)
from .dropout import (AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d,  # noqa: F401
                      FeatureAlphaDropout)
from .embedding import Embedding, EmbeddingBag  # noqa: F401
from .lazy import (LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d,  # noqa: F401
                   LazyConv1d, LazyConv2d, LazyConv3d, LazyConvTranspose1d,
                   LazyConvTranspose2d, LazyConvTranspose3d, LazyInstanceNorm1d,
                   LazyInstanceNorm2d, LazyInstanceNorm3d, LazyLinear, LazyModuleMixin,
                   UninitializedBuffer, UninitializedParameter)
from .linear import Bilinear, Flatten, Identity, Linear, Unflatten  # noqa: F401
from .loss import (BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CTCLoss,  # noqa: F401
                   CosineSimilarity, CrossEntropyLoss, GaussianNLLLoss, HingeEmbeddingLoss,
                   HuberLoss, KLDivLoss, L1Loss, MarginRankingLoss, MSELoss,
                   MultiLabelMarginLoss, MultiLabelSoftMarginLoss, MultiMarginLoss, NLLLoss,
                   NLLLoss2d, PairwiseDistance, PoissonNLLLoss, SmoothL1Loss, SoftMarginLoss,
                   TripletMarginLoss, TripletMarginWithDistanceLoss)
from .sync_norm import SyncBatchNorm  # noqa: F401
from .norm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm,  # noqa: F401
                   InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, LayerNorm,
                   LocalResponseNorm, RMSNorm)
from .pooling import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d,  # noqa: F401
                      AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d, AvgPool1d,
                      AvgPool2d, AvgPool3d, LPPool1d, LPPool2d, LPPool3d, MaxPool1d, MaxPool2d,
                      MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d)
from .resample import (ChannelShuffle, CircularPad1d, CircularPad2d,  # noqa: F401
                       CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
                       PixelShuffle, PixelUnshuffle, ReflectionPad1d, ReflectionPad2d,
                       ReflectionPad3d, ReplicationPad1d, ReplicationPad2d, ReplicationPad3d,
                       Upsample, UpsamplingBilinear2d, UpsamplingNearest2d, ZeroPad1d,
                       ZeroPad2d, ZeroPad3d)

__all__ = [
    # activations
    "CELU", "ELU", "GELU", "GLU", "SELU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU",
    "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU", "ReLU6", "Sigmoid", "SiLU",
    "Softmax", "Softmin", "Softplus", "Softsign", "Tanh", "Tanhshrink", "Threshold",
    "Hardshrink", "Softshrink", "RReLU", "Softmax2d",
    # linear, shape, convolution, pooling
    "Identity", "Linear", "Bilinear", "Flatten", "Unflatten", "Conv1d", "Conv2d", "Conv3d",
    # lazy layers (their input size read from their first input)
    "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
    "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d", "LazyModuleMixin",
    "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Unfold", "Fold", "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d",
    "MaxUnpool3d",
    # resampling and padding
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle",
    "PixelUnshuffle", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d",
    "ReplicationPad2d", "ConstantPad1d", "ConstantPad2d", "ZeroPad1d", "ZeroPad2d",
    "ReflectionPad3d", "ReplicationPad3d", "ConstantPad3d", "ZeroPad3d", "CircularPad1d",
    "CircularPad2d", "CircularPad3d", "ChannelShuffle",
    # normalisation, dropout, embedding
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "InstanceNorm1d",
    "InstanceNorm2d",
    "LayerNorm", "GroupNorm", "RMSNorm", "Dropout", "Dropout1d", "Dropout2d", "Embedding",
    "InstanceNorm3d", "LocalResponseNorm", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "EmbeddingBag",
    # losses
    "L1Loss", "MSELoss", "SmoothL1Loss", "HuberLoss", "NLLLoss", "NLLLoss2d", "CrossEntropyLoss",
    "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "MarginRankingLoss", "CosineEmbeddingLoss",
    "TripletMarginLoss", "SoftMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss",
    "MultiLabelMarginLoss", "HingeEmbeddingLoss", "GaussianNLLLoss", "PoissonNLLLoss",
    "TripletMarginWithDistanceLoss", "CTCLoss", "AdaptiveLogSoftmaxWithLoss",
    # distances
    "PairwiseDistance", "CosineSimilarity",
]
