"""A small MobileNetV3-style classifier and its training loop, written the way torchvision's
model code is, by hand: ``_make_divisible`` channel rounding, ``ConvBNActivation`` as an
``nn.Sequential`` subclass (conv without bias, ``nn.BatchNorm2d``, an activation class
passed in), inverted residual blocks with a 1x1 expansion, a depthwise convolution
(``groups=channels``), a squeeze-and-excitation module (``F.adaptive_avg_pool2d`` to 1x1,
two 1x1 convolutions, ``F.hardsigmoid``, ``scale * input``) and a 1x1 projection, a residual
add when the shapes allow, ``nn.Hardswish``/``nn.ReLU`` chosen per block, a classifier of
``nn.Linear``, ``nn.Hardswish`` and ``nn.Dropout``, ``torch.flatten(x, 1)``, the
torchvision weight-init loop over ``self.modules()`` (``kaiming_normal_(mode="fan_out")``,
``ones_``/``zeros_``, ``normal_(0, 0.01)``), ``nn.CrossEntropyLoss(label_smoothing=0.1)``,
SGD with Nesterov momentum and weight decay, ``CosineAnnealingLR`` and a ``no_grad``
evaluation that counts ``pred.eq(target).sum().item()``."""
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def _make_divisible(v, divisor=8, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNActivation(nn.Sequential):
    def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, groups=1,
                 norm_layer=None, activation_layer=None):
        padding = (kernel_size - 1) // 2
        norm_layer = norm_layer or nn.BatchNorm2d
        activation_layer = activation_layer or nn.ReLU6
        super().__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups,
                      bias=False),
            norm_layer(out_planes),
            activation_layer(inplace=True))
        self.out_channels = out_planes


class SqueezeExcitation(nn.Module):
    def __init__(self, input_channels, squeeze_factor=4):
        super().__init__()
        squeeze_channels = _make_divisible(input_channels // squeeze_factor, 8)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)

    def _scale(self, input):
        scale = F.adaptive_avg_pool2d(input, 1)
        scale = self.fc1(scale)
        scale = self.relu(scale)
        scale = self.fc2(scale)
        return F.hardsigmoid(scale, inplace=True)

    def forward(self, input):
        scale = self._scale(input)
        return scale * input


class InvertedResidual(nn.Module):
    def __init__(self, cnf, norm_layer):
        super().__init__()
        input_c, kernel, expanded_c, out_c, use_se, use_hs, stride = cnf
        self.use_res_connect = stride == 1 and input_c == out_c
        layers = []
        activation_layer = nn.Hardswish if use_hs else nn.ReLU
        if expanded_c != input_c:
            layers.append(ConvBNActivation(input_c, expanded_c, kernel_size=1,
                                           norm_layer=norm_layer, activation_layer=activation_layer))
        layers.append(ConvBNActivation(expanded_c, expanded_c, kernel_size=kernel, stride=stride,
                                       groups=expanded_c, norm_layer=norm_layer,
                                       activation_layer=activation_layer))
        if use_se:
            layers.append(SqueezeExcitation(expanded_c))
        layers.append(ConvBNActivation(expanded_c, out_c, kernel_size=1, norm_layer=norm_layer,
                                       activation_layer=nn.Identity))
        self.block = nn.Sequential(*layers)
        self.out_channels = out_c

    def forward(self, input):
        result = self.block(input)
        if self.use_res_connect:
            result += input
        return result


class MobileNetV3(nn.Module):
    def __init__(self, settings, last_channel, num_classes=5):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers = [ConvBNActivation(3, settings[0][0], kernel_size=3, stride=2,
                                   norm_layer=norm_layer, activation_layer=nn.Hardswish)]
        for cnf in settings:
            layers.append(InvertedResidual(cnf, norm_layer))
        lastconv_input_channels = settings[-1][3]
        lastconv_output_channels = 6 * lastconv_input_channels
        layers.append(ConvBNActivation(lastconv_input_channels, lastconv_output_channels,
                                       kernel_size=1, norm_layer=norm_layer,
                                       activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(lastconv_output_channels, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=0.0, inplace=True),
            nn.Linear(last_channel, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# input, kernel, expanded, output, squeeze-excitation, hard-swish, stride
SETTINGS = [(8, 3, 8, 8, True, False, 2), (8, 3, 24, 12, False, False, 2),
            (12, 3, 36, 12, False, False, 1), (12, 5, 36, 16, True, True, 2),
            (16, 5, 48, 16, True, True, 1)]


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, v in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            state[name] = v
        elif name.endswith("running_var"):
            state[name] = torch.ones(v.shape)
        elif v.dim() == 1 and name.endswith("weight"):
            state[name] = torch.tensor((1 + rng.uniform(-0.1, 0.1, tuple(v.shape))).astype(np.float32))
        else:
            scale = 1.0 / np.sqrt(max(1, v[0].numel())) if v.dim() > 1 else 0.1
            state[name] = torch.tensor((rng.uniform(-1, 1, tuple(v.shape)) * scale * 1.7)
                                       .astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=8, size=32):
    torch.manual_seed(seed)
    model = MobileNetV3(SETTINGS, last_channel=32, num_classes=5)
    init_weights(model, seed)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5,
                                nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    rng = np.random.default_rng(seed + 1)
    data = torch.from_numpy(rng.normal(0, 1, (steps + 1, batch, 3, size, size)).astype(np.float32))
    target = torch.from_numpy(rng.integers(0, 5, (steps + 1, batch)))

    def train_one_step(image, target):
        output = model(image)
        loss = criterion(output, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_one_step = torch.compile(train_one_step)
    losses = []
    model.train()
    for i in range(steps):
        losses.append(train_one_step(data[i], target[i]).item())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        output = model(data[steps])
        test_loss = criterion(output, target[steps]).item()
        pred = output.argmax(dim=1)
        correct = pred.eq(target[steps]).sum().item()
    bn = model.features[1].block[0][1]
    return {"losses": losses, "test_loss": [test_loss], "correct": [correct],
            "logits": output[0].tolist(), "running_mean": bn.running_mean[:4].tolist()}
