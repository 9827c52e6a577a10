"""W8 resnet18_infer: ResNet-18 inference on 3x224x224 images, eval-mode BatchNorm.

torchvision's architecture (BasicBlock, [2, 2, 2, 2], a 7x7 stride-2 stem and max pooling,
1x1 stride-2 downsampling shortcuts, global average pooling, a 1000-way linear head),
written once against the torch-style API (``lib`` is ``dualgraph`` or ``torch``). Batch 1
(``W8``) and 16 (``W8/16``); forward only, no gradient tracking. The value compared across
implementations is the mean absolute logit, taken in NumPy. onnxruntime runs the model as
``torch.onnx.export`` writes it.
"""

from .common import image_classifier

ID, NAME = "W8", "resnet18_infer"
WARMUP, TIMED = 3, 10     # steps of 0.05-2 s
BATCH = 1


def basic_block(lib, cin, cout, stride):
    nn = lib.nn

    class BasicBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)
    return BasicBlock()


def resnet18(lib, classes=1000):
    nn = lib.nn
    layers = []
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers.append(nn.Sequential(basic_block(lib, cin, cout, stride),
                                    basic_block(lib, cout, cout, 1)))
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(512, classes))


make_data, build, check, IMPLS = image_classifier(resnet18, 8, NAME, BATCH)
