"""An EfficientNet-style classifier written the way torchvision's is: MBConv blocks
(expansion 1x1, depthwise 3x3 with stride, squeeze-excitation by
``F.adaptive_avg_pool2d`` and two 1x1 convolutions with ``nn.SiLU(inplace=True)`` and a
``nn.Sigmoid`` scale, projection without activation), every activation ``nn.SiLU(inplace=
True)`` applied after ``BatchNorm2d(eps=1e-3, momentum=0.01)``; stochastic depth as
torchvision's ``stochastic_depth`` function (``mode="row"`` and ``"batch"``, the survival
rate growing linearly with depth; its Bernoulli draws taken from NumPy so that every
framework drops the same rows); the trunk run through
``torch.utils.checkpoint.checkpoint_sequential(self.features, segments, x,
use_reentrant=False)`` while training; inputs in ``channels_last`` memory format, odd
sizes; ``nn.init`` by module type through ``self.modules()`` (replaced by NumPy draws);
``CrossEntropyLoss(label_smoothing=0.1)``, ``RMSprop`` with TensorFlow's ``eps`` and
``alpha``, weight decay by parameter groups (no decay on norms and biases), and
``ExponentialLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

DROP_RNG = np.random.default_rng(7)


def stochastic_depth(input, p, mode, training=True):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ["batch", "row"]:
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    survival_rate = 1.0 - p
    if mode == "row":
        size = [input.shape[0]] + [1] * (input.ndim - 1)
    else:
        size = [1] * input.ndim
    noise = torch.from_numpy((DROP_RNG.random(size) < survival_rate).astype(np.float32))
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise


class StochasticDepth(nn.Module):
    def __init__(self, p, mode):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input):
        return stochastic_depth(input, self.p, self.mode, self.training)


class Conv2dNormActivation(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, groups=1,
                 activation_layer=nn.SiLU):
        padding = (kernel_size - 1) // 2
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding,
                            groups=groups, bias=False),
                  nn.BatchNorm2d(out_channels, eps=1e-3, momentum=0.01)]
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels, squeeze_channels):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = nn.SiLU(inplace=True)
        self.scale_activation = nn.Sigmoid()

    def _scale(self, input):
        scale = self.avgpool(input)
        scale = self.fc1(scale)
        scale = self.activation(scale)
        scale = self.fc2(scale)
        return self.scale_activation(scale)

    def forward(self, input):
        scale = self._scale(input)
        return scale * input


class MBConv(nn.Module):
    def __init__(self, input_channels, out_channels, expand_ratio, stride, stochastic_depth_prob,
                 mode):
        super().__init__()
        self.use_res_connect = stride == 1 and input_channels == out_channels
        layers = []
        expanded_channels = input_channels * expand_ratio
        if expanded_channels != input_channels:
            layers.append(Conv2dNormActivation(input_channels, expanded_channels, 1))
        layers.append(Conv2dNormActivation(expanded_channels, expanded_channels, 3, stride,
                                           groups=expanded_channels))
        layers.append(SqueezeExcitation(expanded_channels, max(1, input_channels // 4)))
        layers.append(Conv2dNormActivation(expanded_channels, out_channels, 1,
                                           activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, mode)

    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += input
        return result


class EfficientNet(nn.Module):
    def __init__(self, num_classes=5, stochastic_depth_prob=0.3, segments=2):
        super().__init__()
        self.segments = segments
        setting = [(1, 8, 8, 1), (4, 8, 12, 2), (4, 12, 12, 1), (4, 12, 16, 2), (4, 16, 16, 1)]
        layers = [Conv2dNormActivation(3, 8, 3, stride=2)]
        for stage_block_id, (expand, cin, cout, stride) in enumerate(setting):
            sd_prob = stochastic_depth_prob * float(stage_block_id) / len(setting)
            mode = "row" if stage_block_id % 2 else "batch"
            layers.append(MBConv(cin, cout, expand, stride, sd_prob, mode))
        layers.append(Conv2dNormActivation(16, 32, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=0.0, inplace=True),
                                        nn.Linear(32, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        if self.training:
            x = checkpoint_sequential(self.features, self.segments, x, use_reentrant=False)
        else:
            x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    DROP_RNG.bit_generator.state = np.random.default_rng(7).bit_generator.state
    model = EfficientNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.from_numpy(
                    rng.normal(0, 1.5 / np.sqrt(fan_in), m.weight.shape).astype(np.float32)))
                if m.bias is not None:
                    m.bias.copy_(torch.from_numpy(
                        rng.normal(0, 0.1, m.bias.shape).astype(np.float32)))
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    optimizer = torch.optim.RMSprop([{"params": decay, "weight_decay": 1e-5},
                                     {"params": no_decay, "weight_decay": 0.0}],
                                    lr=0.01, alpha=0.9, eps=0.0316, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    net = torch.compile(model) if compile == "model" else model

    def train_step(images, target):
        optimizer.zero_grad()
        output = net(images)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        return loss, output

    if compile is True:
        train_step = torch.compile(train_step)
    losses = []
    model.train()
    for _ in range(steps):
        images = torch.from_numpy(rng.normal(0, 1, (3, 3, 15, 13)).astype(np.float32))
        images = images.to(memory_format=torch.channels_last)
        target = torch.from_numpy(rng.integers(0, 5, 3))
        loss, output = train_step(images, target)
        losses.append([loss.item()] + output.detach().flatten().tolist())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        out = net(torch.from_numpy(rng.normal(0, 1, (1, 3, 17, 11)).astype(np.float32)))
    bn = model.features[0][1]
    return {"losses": losses, "eval": out.flatten().tolist(),
            "running": torch.cat([bn.running_mean, bn.running_var]).tolist(),
            "lr": [scheduler.get_last_lr()[0]]}
