"""W11 resnet_cifar_train: one training step of a CIFAR-size ResNet-20 (He et al. 2016,
section 4.2) on 3x32x32 images.

A 3x3 stem to 16 channels, three stages of three BasicBlocks (16, 32, 64 channels; the
first block of the second and third stage strides 2, with a 1x1 conv + BatchNorm
shortcut, the paper's option B), global average pooling and a 10-way linear head;
BatchNorm in training mode (batch statistics, running stats updated), batch 64,
cross-entropy, SGD momentum 0.9 with Nesterov and weight decay 5e-4, lr 0.1. Written once
against the torch-style API.
"""
import numpy as np

from .common import random_state, torch_style_impls, training_step
from .w8_resnet18_infer import basic_block

ID, NAME = "W11", "resnet_cifar_train"
WARMUP, TIMED = 3, 10
BATCH = 64


def resnet20(lib, classes=10):
    nn = lib.nn
    blocks, cin = [], 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            blocks.append(basic_block(lib, cin, cout, stride if i == 0 else 1))
            cin = cout
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


def make_data(batch=BATCH):
    import dualgraph as dg
    rng = np.random.default_rng(11)
    return {"params": random_state(resnet20(dg), 11),
            "x": rng.standard_normal((batch, 3, 32, 32), dtype=np.float32),
            "y": rng.integers(0, 10, batch).astype(np.int64)}


def build(lib, data):
    model = resnet20(lib)
    model.train()
    return training_step(lib, model, data, lambda ps: lib.optim.SGD(
        ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4))


IMPLS = torch_style_impls(build)
