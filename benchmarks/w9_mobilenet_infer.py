"""W9 mobilenet_infer: MobileNetV2 inference on 3x224x224 images (depthwise convolutions,
ReLU6, eval-mode BatchNorm).

torchvision's architecture (width 1.0: a 3x3 stride-2 stem, seventeen inverted residual
blocks of 1x1 expansion, 3x3 depthwise and 1x1 linear projection, a 1x1 conv to 1280
channels, global average pooling, a 1000-way linear head), written once against the
torch-style API. Batch 1 (``W9``) and 16 (``W9/16``); forward only. The compared value is
the mean absolute logit; onnxruntime runs the model as ``torch.onnx.export`` writes it.
"""

from .common import image_classifier

ID, NAME = "W9", "mobilenet_infer"
WARMUP, TIMED = 3, 10
BATCH = 1
# (expansion, output channels, blocks, first stride), torchvision's table
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1)]


def conv_bn(lib, cin, cout, kernel, stride, groups=1, relu=True):
    nn = lib.nn
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                        bias=False), nn.BatchNorm2d(cout)]
    return layers + [nn.ReLU6()] if relu else layers


def inverted_residual(lib, cin, cout, stride, expansion):
    nn = lib.nn
    hidden = cin * expansion
    layers = conv_bn(lib, cin, hidden, 1, 1) if expansion != 1 else []
    layers += conv_bn(lib, hidden, hidden, 3, stride, groups=hidden)   # depthwise
    layers += conv_bn(lib, hidden, cout, 1, 1, relu=False)             # linear projection

    class InvertedResidual(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.conv(x) if self.residual else self.conv(x)
    return InvertedResidual()


def mobilenet_v2(lib, classes=1000):
    nn = lib.nn
    blocks, cin = conv_bn(lib, 3, 32, 3, 2), 32
    for expansion, cout, count, stride in SETTINGS:
        for i in range(count):
            blocks.append(inverted_residual(lib, cin, cout, stride if i == 0 else 1, expansion))
            cin = cout
    blocks += conv_bn(lib, cin, 1280, 1, 1)
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(1280, classes))


make_data, build, check, IMPLS = image_classifier(mobilenet_v2, 9, NAME, BATCH)
