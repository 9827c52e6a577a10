"""Long-horizon forecasting as the Time-Series-Library (DLinear, Informer, PatchTST) writes
it: reversible instance normalisation (RevIN: mean and ``sqrt(var + eps)`` over time,
detached, with an affine ``nn.Parameter`` pair, undone on the forecast), DLinear's series
decomposition by a moving average (the ends padded by ``repeat`` of the first and last
steps, ``nn.AvgPool1d`` on ``permute``d series), Informer's token embedding by an
``nn.Conv1d(padding=1, padding_mode="circular")`` initialised by
``nn.init.kaiming_normal_(mode="fan_in", nonlinearity="leaky_relu")``, time features
embedded by ``nn.Embedding`` per calendar field, ``torch.diff`` features with ``prepend=``,
channel-independent linear heads on the trend and seasonal parts, an ``nn.L1Loss`` plus
``nn.MSELoss``, Adam and ``CosineAnnealingLR``; evaluated on a rolling window made with
``Tensor.unfold``."""
import numpy as np
import torch
import torch.nn as nn

SEQ, PRED, CH = 16, 4, 3


class RevIN(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.affine_weight = nn.Parameter(torch.ones(channels))
        self.affine_bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x, mode):
        if mode == "norm":
            self.mean = torch.mean(x, dim=1, keepdim=True).detach()
            self.stdev = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False)
                                    + self.eps).detach()
            x = (x - self.mean) / self.stdev
            return x * self.affine_weight + self.affine_bias
        x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return x * self.stdev + self.mean


class MovingAvg(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=1, padding=0)

    def forward(self, x):
        front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        return self.avg(x.permute(0, 2, 1)).permute(0, 2, 1)


class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super().__init__()
        self.conv = nn.Conv1d(c_in, d_model, 3, padding=1, padding_mode="circular",
                              bias=False)

    def forward(self, x):
        return self.conv(x.permute(0, 2, 1)).transpose(1, 2)


class Model(nn.Module):
    def __init__(self, d_model=8):
        super().__init__()
        self.revin = RevIN(CH)
        self.decomp = MovingAvg(5)
        self.token = TokenEmbedding(2 * CH, d_model)
        self.hour = nn.Embedding(24, d_model)
        self.weekday = nn.Embedding(7, d_model)
        self.mix = nn.Linear(d_model, CH)
        self.seasonal = nn.Linear(SEQ, PRED)
        self.trend = nn.Linear(SEQ, PRED)

    def forward(self, x, marks):
        x = self.revin(x, "norm")
        feats = torch.cat([x, torch.diff(x, dim=1, prepend=x[:, :1])], dim=-1)
        emb = self.token(feats) + self.hour(marks[..., 0]) + self.weekday(marks[..., 1])
        x = x + 0.1 * self.mix(emb)
        trend = self.decomp(x)
        seasonal = x - trend
        out = self.seasonal(seasonal.permute(0, 2, 1)) + self.trend(trend.permute(0, 2, 1))
        return self.revin(out.permute(0, 2, 1), "denorm")


def series(rng, length):
    t = np.arange(length)
    base = np.stack([np.sin(2 * np.pi * t / 12), np.cos(2 * np.pi * t / 7), 0.01 * t], 1)
    values = 3 + base + rng.normal(0, 0.1, (length, CH))
    marks = np.stack([t % 24, (t // 24) % 7], 1)
    return torch.tensor(values, dtype=torch.float32), torch.from_numpy(marks)


def windows(values, marks, starts):
    x = torch.stack([values[s:s + SEQ] for s in starts])
    y = torch.stack([values[s + SEQ:s + SEQ + PRED] for s in starts])
    m = torch.stack([marks[s:s + SEQ] for s in starts])
    return x, m, y


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "affine" not in name:
                p.copy_(torch.from_numpy(rng.normal(0, 0.3, tuple(p.shape))
                                         .astype(np.float32)))
    weight = torch.empty_like(model.token.conv.weight)
    nn.init.kaiming_normal_(weight, mode="fan_in", nonlinearity="leaky_relu")
    assert abs(weight.std().item() - np.sqrt(2 / 1.0001) / np.sqrt(18)) < 0.15
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=1e-4)
    l1, mse = nn.L1Loss(), nn.MSELoss()
    values, marks = series(rng, 80)
    net = torch.compile(model) if compile == "model" else model

    def step(x, m, y):
        optimizer.zero_grad()
        pred = net(x, m)
        loss = mse(pred, y) + 0.5 * l1(pred, y)
        loss.backward()
        optimizer.step()
        return loss

    if compile is True:
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        starts = rng.integers(0, 80 - SEQ - PRED, 6)
        losses.append(step(*windows(values, marks, starts)).item())
        scheduler.step()
    rolled = values[:SEQ + PRED + 3].unfold(0, SEQ + PRED, 1).permute(0, 2, 1)
    marks_rolled = marks[:SEQ + PRED + 3].unfold(0, SEQ + PRED, 1).permute(0, 2, 1)
    with torch.no_grad():
        pred = net(rolled[:, :SEQ].contiguous(), marks_rolled[:, :SEQ])
    return {"losses": losses, "forecast": pred.flatten().tolist(),
            "affine": model.revin.affine_weight.tolist()}
