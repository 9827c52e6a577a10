"""Fast neural style transfer (Johnson et al.), written the way the PyTorch example is: a
``TransformerNet`` of ``ConvLayer``s (``nn.ReflectionPad2d`` then ``nn.Conv2d``),
``nn.InstanceNorm2d(affine=True)``, ``ResidualBlock``s and ``UpsampleConvLayer``s that call
``F.interpolate(x_in, mode="nearest", scale_factor=...)``; a frozen loss network (a small
VGG-like ``nn.Sequential`` sliced into stages, ``requires_grad = False`` on its
parameters) whose outputs come back as a ``namedtuple``; ``gram_matrix`` by ``view`` and
``bmm`` of the features with their ``transpose(1, 2)`` divided by ``ch * h * w``;
``normalize_batch`` with ``batch.new_tensor(...).view(-1, 1, 1)`` and ``div_(255.0)``;
content loss ``mse_loss`` on one stage, style loss summed over the stages' Gram
matrices, Adam, and a stylised image ``clamp(0, 255)``'d under ``no_grad``."""
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        return self.conv2d(out)


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + residual


class UpsampleConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = F.interpolate(x_in, mode="nearest", scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        return self.conv2d(out)


class TransformerNet(torch.nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv1 = ConvLayer(3, c, kernel_size=5, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(c, affine=True)
        self.conv2 = ConvLayer(c, 2 * c, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(2 * c, affine=True)
        self.res1 = ResidualBlock(2 * c)
        self.res2 = ResidualBlock(2 * c)
        self.deconv1 = UpsampleConvLayer(2 * c, c, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(c, affine=True)
        self.deconv3 = ConvLayer(c, 3, kernel_size=5, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.relu(self.in4(self.deconv1(y)))
        return self.deconv3(y)


class LossNet(torch.nn.Module):
    """A VGG-like feature extractor in stages, frozen."""

    def __init__(self, requires_grad=False):
        super().__init__()
        features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(inplace=True),
            torch.nn.MaxPool2d(kernel_size=2, stride=2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(inplace=True))
        self.slice1 = torch.nn.Sequential()
        self.slice2 = torch.nn.Sequential()
        for x in range(4):
            self.slice1.add_module(str(x), features[x])
        for x in range(4, 7):
            self.slice2.add_module(str(x), features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        vgg_outputs = namedtuple("VggOutputs", ["relu1_2", "relu2_2"])
        return vgg_outputs(h_relu1_2, h_relu2_2)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    return features.bmm(features_t) / (ch * h * w)


def normalize_batch(batch):
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def init_weights(model, seed, scale=0.3):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor((rng.uniform(-scale, scale, tuple(v.shape))
                            + (1.0 if name.startswith("in") or ".in" in name and
                               name.endswith("weight") else 0.0)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch_size=2, size=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    transformer = TransformerNet()
    init_weights(transformer, seed)
    optimizer = torch.optim.Adam(transformer.parameters(), 1e-3)
    mse_loss = torch.nn.MSELoss()
    vgg = LossNet(requires_grad=False)
    init_weights(vgg, seed + 2)
    style = torch.from_numpy(rng.uniform(0, 255, (1, 3, size, size)).astype(np.float32))
    style = style.repeat(batch_size, 1, 1, 1)
    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]
    content_weight, style_weight = 1e2, 1e5
    images = rng.uniform(0, 255, (steps + 1, batch_size, 3, size, size)).astype(np.float32)

    def train_step(x):
        n_batch = len(x)
        optimizer.zero_grad()
        y = transformer(x)
        y = normalize_batch(y)
        x = normalize_batch(x)
        features_y = vgg(y)
        features_x = vgg(x)
        content_loss = content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)
        style_loss = 0.0
        for ft_y, gm_s in zip(features_y, gram_style):
            gm_y = gram_matrix(ft_y)
            style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
        style_loss *= style_weight
        total_loss = content_loss + style_loss
        total_loss.backward()
        optimizer.step()
        return content_loss, style_loss

    if compile == "model":
        transformer = torch.compile(transformer)
    elif compile:
        train_step = torch.compile(train_step)
    transformer.train()
    content, style_losses = [], []
    for i in range(steps):
        c, s = train_step(torch.from_numpy(images[i]))
        content.append(c.item())
        style_losses.append(s.item())
    transformer.eval()
    with torch.no_grad():
        output = transformer(torch.from_numpy(images[steps][:1])).clamp(0, 255)
    return {"content_losses": content, "style_losses": style_losses,
            "stylized": output[0, :, :2, :2].flatten().tolist()}
