"""An EfficientDet-style detector head (Tan et al.) written the way the popular
``Yet-Another-EfficientDet-Pytorch`` code is: a small backbone of depthwise-separable
convolutions (``groups=in_channels``) with ``nn.BatchNorm2d(momentum=0.01, eps=1e-3)`` and a
hand-written ``Swish`` (``x * torch.sigmoid(x)``) next to ``MemoryEfficientSwish``-free
``nn.SiLU``, ``nn.ZeroPad2d``-free "same" padding by ``F.pad`` computed from the input size
(``math.ceil(w / stride)``), a BiFPN layer with fast normalised fusion (weights
``nn.Parameter(torch.ones(2, dtype=torch.float32))`` through ``nn.ReLU()``, divided by
``torch.sum(w, dim=0) + self.epsilon``), top-down ``nn.Upsample(scale_factor=2,
mode='nearest')`` and bottom-up ``nn.MaxPool2d(3, 2)`` after same-padding, class and box
heads shared across levels whose outputs are ``permute(0, 2, 3, 1).contiguous().view(...)``
and ``torch.cat``-ed, and a focal loss (``torch.where(torch.eq(targets, 1.), alpha_factor,
1. - alpha_factor)``, ``focal_weight * torch.pow(...)``, ``F.binary_cross_entropy``
on clamped sigmoids) with a smooth-L1 box loss over positive anchors picked by a mask.
AdamW with ``ReduceLROnPlateau``-free ``MultiStepLR``; ``model.eval()`` inference counts."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class Conv2dStaticSamePadding(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, bias=True, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              bias=bias, groups=groups)
        self.stride = self.conv.stride
        self.kernel_size = self.conv.kernel_size

    def forward(self, x):
        h, w = x.shape[-2:]
        extra_h = (math.ceil(w / self.stride[1]) - 1) * self.stride[1] - w + self.kernel_size[1]
        extra_v = (math.ceil(h / self.stride[0]) - 1) * self.stride[0] - h + self.kernel_size[0]
        left = extra_h // 2
        right = extra_h - left
        top = extra_v // 2
        bottom = extra_v - top
        x = F.pad(x, [left, right, top, bottom])
        return self.conv(x)


class MaxPool2dStaticSamePadding(nn.Module):
    def __init__(self, kernel_size, stride):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride)
        self.stride = [stride] * 2
        self.kernel_size = [kernel_size] * 2

    def forward(self, x):
        h, w = x.shape[-2:]
        extra_h = (math.ceil(w / self.stride[1]) - 1) * self.stride[1] - w + self.kernel_size[1]
        extra_v = (math.ceil(h / self.stride[0]) - 1) * self.stride[0] - h + self.kernel_size[0]
        left = extra_h // 2
        top = extra_v // 2
        return self.pool(F.pad(x, [left, extra_h - left, top, extra_v - top]))


class SeparableConvBlock(nn.Module):
    def __init__(self, in_channels, out_channels=None, norm=True, activation=False):
        super().__init__()
        out_channels = out_channels or in_channels
        self.depthwise_conv = Conv2dStaticSamePadding(in_channels, in_channels, 3, stride=1,
                                                      groups=in_channels, bias=False)
        self.pointwise_conv = Conv2dStaticSamePadding(in_channels, out_channels, 1, stride=1)
        self.norm = norm
        if self.norm:
            self.bn = nn.BatchNorm2d(num_features=out_channels, momentum=0.01, eps=1e-3)
        self.activation = activation
        if self.activation:
            self.swish = Swish()

    def forward(self, x):
        x = self.depthwise_conv(x)
        x = self.pointwise_conv(x)
        if self.norm:
            x = self.bn(x)
        if self.activation:
            x = self.swish(x)
        return x


class BiFPN(nn.Module):
    def __init__(self, num_channels, epsilon=1e-4):
        super().__init__()
        self.epsilon = epsilon
        self.conv4_up = SeparableConvBlock(num_channels)
        self.conv3_up = SeparableConvBlock(num_channels)
        self.conv4_down = SeparableConvBlock(num_channels)
        self.conv5_down = SeparableConvBlock(num_channels)
        self.p4_upsample = nn.Upsample(scale_factor=2, mode='nearest')
        self.p3_upsample = nn.Upsample(scale_factor=2, mode='nearest')
        self.p4_downsample = MaxPool2dStaticSamePadding(3, 2)
        self.p5_downsample = MaxPool2dStaticSamePadding(3, 2)
        self.swish = Swish()
        self.p4_w1 = nn.Parameter(torch.ones(2, dtype=torch.float32))
        self.p4_w1_relu = nn.ReLU()
        self.p3_w1 = nn.Parameter(torch.ones(2, dtype=torch.float32))
        self.p3_w1_relu = nn.ReLU()
        self.p4_w2 = nn.Parameter(torch.ones(3, dtype=torch.float32))
        self.p4_w2_relu = nn.ReLU()
        self.p5_w2 = nn.Parameter(torch.ones(2, dtype=torch.float32))
        self.p5_w2_relu = nn.ReLU()

    def forward(self, inputs):
        p3_in, p4_in, p5_in = inputs
        p4_w1 = self.p4_w1_relu(self.p4_w1)
        weight = p4_w1 / (torch.sum(p4_w1, dim=0) + self.epsilon)
        p4_up = self.conv4_up(self.swish(weight[0] * p4_in + weight[1] * self.p4_upsample(p5_in)))
        p3_w1 = self.p3_w1_relu(self.p3_w1)
        weight = p3_w1 / (torch.sum(p3_w1, dim=0) + self.epsilon)
        p3_out = self.conv3_up(self.swish(weight[0] * p3_in + weight[1] * self.p3_upsample(p4_up)))
        p4_w2 = self.p4_w2_relu(self.p4_w2)
        weight = p4_w2 / (torch.sum(p4_w2, dim=0) + self.epsilon)
        p4_out = self.conv4_down(self.swish(weight[0] * p4_in + weight[1] * p4_up
                                            + weight[2] * self.p4_downsample(p3_out)))
        p5_w2 = self.p5_w2_relu(self.p5_w2)
        weight = p5_w2 / (torch.sum(p5_w2, dim=0) + self.epsilon)
        p5_out = self.conv5_down(self.swish(weight[0] * p5_in + weight[1] * self.p5_downsample(p4_out)))
        return p3_out, p4_out, p5_out


class Backbone(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.stem = nn.Sequential(Conv2dStaticSamePadding(3, channels, 3, stride=2, bias=False),
                                  nn.BatchNorm2d(channels, momentum=0.01, eps=1e-3), nn.SiLU())
        self.stages = nn.ModuleList([nn.Sequential(
            Conv2dStaticSamePadding(channels, channels, 3, stride=2, groups=channels, bias=False),
            nn.BatchNorm2d(channels, momentum=0.01, eps=1e-3), nn.SiLU(),
            Conv2dStaticSamePadding(channels, channels, 1, bias=False),
            nn.BatchNorm2d(channels, momentum=0.01, eps=1e-3)) for _ in range(3)])

    def forward(self, x):
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats


class Head(nn.Module):
    def __init__(self, channels, num_anchors, num_outputs, sigmoid):
        super().__init__()
        self.conv = SeparableConvBlock(channels, channels, norm=False)
        self.header = SeparableConvBlock(channels, num_anchors * num_outputs, norm=False)
        self.swish = Swish()
        self.num_outputs = num_outputs
        self.sigmoid = sigmoid

    def forward(self, inputs):
        feats = []
        for feat in inputs:
            feat = self.header(self.swish(self.conv(feat)))
            feat = feat.permute(0, 2, 3, 1)
            feat = feat.contiguous().view(feat.shape[0], -1, self.num_outputs)
            feats.append(feat)
        feats = torch.cat(feats, dim=1)
        return feats.sigmoid() if self.sigmoid else feats


class EfficientDet(nn.Module):
    def __init__(self, channels=8, num_classes=3, num_anchors=2):
        super().__init__()
        self.backbone = Backbone(channels)
        self.bifpn = nn.Sequential(BiFPN(channels), BiFPN(channels))
        self.classifier = Head(channels, num_anchors, num_classes, sigmoid=True)
        self.regressor = Head(channels, num_anchors, 4, sigmoid=False)

    def forward(self, x):
        features = self.bifpn(self.backbone(x))
        return self.regressor(features), self.classifier(features)


def focal_loss(classification, regression, cls_targets, reg_targets, alpha=0.25, gamma=2.0):
    classification = torch.clamp(classification, 1e-4, 1.0 - 1e-4)
    alpha_factor = torch.ones_like(cls_targets) * alpha
    alpha_factor = torch.where(torch.eq(cls_targets, 1.), alpha_factor, 1. - alpha_factor)
    focal_weight = torch.where(torch.eq(cls_targets, 1.), 1. - classification, classification)
    focal_weight = alpha_factor * torch.pow(focal_weight, gamma)
    bce = F.binary_cross_entropy(classification, cls_targets, reduction="none")
    positive = cls_targets.sum(dim=2) > 0
    num_positive = positive.sum().clamp(min=1.0)
    cls_loss = (focal_weight * bce).sum() / num_positive
    reg_diff = torch.abs(reg_targets - regression)
    reg_loss = torch.where(torch.le(reg_diff, 1.0 / 9.0), 0.5 * 9.0 * torch.pow(reg_diff, 2),
                           reg_diff - 0.5 / 9.0)
    reg_loss = (reg_loss.mean(dim=2) * positive).sum() / num_positive
    return cls_loss, reg_loss


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, v in model.state_dict().items():
        if name.endswith("num_batches_tracked") or name.endswith("running_var") \
                or name.endswith("running_mean") or "_w" in name.split(".")[-1]:
            state[name] = v
        elif name.endswith("bn.weight") or (v.dim() == 1 and "stem" not in name
                                            and "stages" not in name):
            state[name] = torch.tensor(rng.normal(0, 0.1, tuple(v.shape)).astype(np.float32))
        else:
            fan_in = max(1, int(np.prod(v.shape[1:])))
            state[name] = torch.tensor(rng.normal(0, 1.2 / math.sqrt(fan_in), tuple(v.shape))
                                       .astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=2, size=32):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = EfficientDet()
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 3], gamma=0.5)
    n_anchors = None
    with torch.no_grad():
        model.eval()
        n_anchors = model(torch.zeros(1, 3, size, size))[0].shape[1]
    data = []
    for _ in range(steps):
        imgs = torch.tensor(rng.normal(0, 1, (batch, 3, size, size)).astype(np.float32))
        cls = np.zeros((batch, n_anchors, 3), np.float32)
        pos = rng.random((batch, n_anchors)) < 0.2
        cls[pos, rng.integers(0, 3, pos.sum())] = 1.0
        reg = rng.normal(0, 0.3, (batch, n_anchors, 4)).astype(np.float32)
        data.append((imgs, torch.from_numpy(cls), torch.from_numpy(reg)))

    def train_step(imgs, cls_targets, reg_targets):
        optimizer.zero_grad()
        regression, classification = model(imgs)
        cls_loss, reg_loss = focal_loss(classification, regression, cls_targets, reg_targets)
        loss = cls_loss.mean() + reg_loss.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        return loss, cls_loss, reg_loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, cls_losses, detections = [], [], []
    for imgs, cls_targets, reg_targets in data:
        model.train()
        loss, cls_loss, _ = train_step(imgs, cls_targets, reg_targets)
        losses.append(loss.item())
        cls_losses.append(float(cls_loss))
        scheduler.step()
        model.eval()
        with torch.no_grad():
            _, classification = model(imgs)
            scores, classes = torch.max(classification, dim=2)
            detections.append(int((scores > 0.3).sum()))
    fusion = [p.item() for n, p in model.named_parameters() if n.endswith("p4_w2")
              for p in p.flatten()]
    return {"losses": losses, "cls_losses": cls_losses, "detections": detections,
            "fusion_weights": fusion}
