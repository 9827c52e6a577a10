"""A WaveNet vocoder (van den Oord et al.) written the way r9y9's ``wavenet_vocoder`` and the
popular small reimplementations are: mu-law companding by hand (``torch.sign(x) *
torch.log1p(mu * torch.abs(x)) / np.log1p(mu)``, quantised with ``((y + 1) / 2 * mu +
0.5).long()``, and its inverse with ``torch.expm1``), a causal ``nn.Conv1d`` padded by
``(kernel_size - 1) * dilation`` and cut with ``x[:, :, :-self.padding]``, residual blocks
with dilations ``2 ** (i % 4)``, gated activation ``torch.tanh(a) * torch.sigmoid(b)`` after
``x.split(x.size(1) // 2, dim=1)``, a local conditioning on an upsampled mel-like feature
(``F.interpolate(c, scale_factor=hop, mode="nearest")`` through a 1x1 conv), skip
connections summed and scaled by ``math.sqrt(1.0 / len(self.conv_layers))``, an
``nn.Embedding``-free one-hot input (``F.one_hot(...).transpose(1, 2).float()``),
``F.cross_entropy`` over ``(N, C, T)`` logits shifted by one sample, Adam with
``clip_grad_norm_`` and an ``ExponentialLR``, and incremental greedy generation under
``torch.no_grad`` (one sample at a time over the full receptive field)."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def mulaw(x, mu=255):
    return torch.sign(x) * torch.log1p(mu * torch.abs(x)) / np.log1p(mu)


def mulaw_quantize(x, mu=255):
    y = mulaw(x, mu)
    return ((y + 1) / 2 * mu + 0.5).long()


def inv_mulaw_quantize(y, mu=255):
    y = 2 * y.float() / mu - 1
    return torch.sign(y) * (1.0 / mu) * torch.expm1(torch.abs(y) * math.log1p(mu))


class CausalConv1d(nn.Conv1d):
    def __init__(self, in_channels, out_channels, kernel_size, dilation=1, **kwargs):
        self.padding_ = (kernel_size - 1) * dilation
        super().__init__(in_channels, out_channels, kernel_size, padding=self.padding_,
                         dilation=dilation, **kwargs)

    def forward(self, x):
        out = super().forward(x)
        return out[:, :, :-self.padding_] if self.padding_ > 0 else out


class ResidualConv1dGLU(nn.Module):
    def __init__(self, residual_channels, gate_channels, kernel_size, skip_out_channels,
                 cin_channels, dilation=1):
        super().__init__()
        self.conv = CausalConv1d(residual_channels, gate_channels, kernel_size,
                                 dilation=dilation)
        self.conv1x1c = nn.Conv1d(cin_channels, gate_channels, kernel_size=1, bias=False)
        gate_out_channels = gate_channels // 2
        self.conv1x1_out = nn.Conv1d(gate_out_channels, residual_channels, 1)
        self.conv1x1_skip = nn.Conv1d(gate_out_channels, skip_out_channels, 1)

    def forward(self, x, c):
        residual = x
        x = self.conv(x)
        splitdim = 1
        a, b = x.split(x.size(splitdim) // 2, dim=splitdim)
        c = self.conv1x1c(c)
        ca, cb = c.split(c.size(splitdim) // 2, dim=splitdim)
        a, b = a + ca, b + cb
        x = torch.tanh(a) * torch.sigmoid(b)
        s = self.conv1x1_skip(x)
        x = self.conv1x1_out(x)
        x = (x + residual) * math.sqrt(0.5)
        return x, s


class WaveNet(nn.Module):
    def __init__(self, out_channels=32, layers=8, stacks=2, residual_channels=12,
                 gate_channels=16, skip_out_channels=12, kernel_size=2, cin_channels=5,
                 hop=4):
        super().__init__()
        self.out_channels = out_channels
        self.hop = hop
        layers_per_stack = layers // stacks
        self.first_conv = nn.Conv1d(out_channels, residual_channels, 1)
        self.conv_layers = nn.ModuleList()
        for layer in range(layers):
            dilation = 2 ** (layer % layers_per_stack)
            self.conv_layers.append(ResidualConv1dGLU(
                residual_channels, gate_channels, kernel_size, skip_out_channels,
                cin_channels, dilation=dilation))
        self.last_conv_layers = nn.ModuleList([
            nn.ReLU(inplace=True), nn.Conv1d(skip_out_channels, skip_out_channels, 1),
            nn.ReLU(inplace=True), nn.Conv1d(skip_out_channels, out_channels, 1)])

    def receptive_field(self):
        return sum(layer.conv.padding_ for layer in self.conv_layers) + 1

    def forward(self, x, c):
        c = F.interpolate(c, scale_factor=self.hop, mode="nearest")
        x = self.first_conv(x)
        skips = 0
        for f in self.conv_layers:
            x, h = f(x, c)
            skips += h
        skips *= math.sqrt(1.0 / len(self.conv_layers))
        x = skips
        for f in self.last_conv_layers:
            x = f(x)
        return x


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.normal(0, 0.25, tuple(v.shape)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=3, frames=8, hop=4):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    mu = 31
    model = WaveNet(out_channels=mu + 1, hop=hop)
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
    t = np.arange(frames * hop)
    data = []
    for _ in range(steps):
        f = rng.uniform(0.05, 0.3, (batch, 1))
        audio = 0.8 * np.sin(2 * np.pi * f * t) * rng.uniform(0.2, 1.0, (batch, 1))
        mel = rng.normal(0, 1, (batch, 5, frames)).astype(np.float32)
        data.append((torch.tensor(audio, dtype=torch.float32), torch.from_numpy(mel)))

    def train_step(audio, mel):
        y = mulaw_quantize(audio, mu)
        x = F.one_hot(y, mu + 1).transpose(1, 2).float()
        y_hat = model(x, mel)
        loss = F.cross_entropy(y_hat[:, :, :-1], y[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for audio, mel in data:
        model.train()
        losses.append(train_step(audio, mel).item())
        scheduler.step()
    model.eval()
    mel = data[0][1][:1]
    samples = torch.zeros(1, mu + 1, frames * hop)
    samples[0, mu // 2 + 1, 0] = 1.0
    generated = []
    with torch.no_grad():
        for i in range(1, 6):
            y_hat = model(samples, mel)
            nxt = y_hat[0, :, i - 1].argmax().item()
            samples[0, nxt, i] = 1.0
            generated.append(nxt)
    waveform = inv_mulaw_quantize(torch.tensor(generated), mu)
    return {"losses": losses, "generated": generated, "waveform": waveform.tolist()}
