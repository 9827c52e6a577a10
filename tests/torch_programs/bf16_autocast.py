"""Mixed precision on the CPU as current recipes write it: the forward and the loss under
``torch.autocast(device_type="cpu", dtype=torch.bfloat16)`` (convolutions and matmuls run in
bfloat16, ``cross_entropy`` in float32, by torch's CPU lists), a residual MLP-Mixer-style
block whose ``LayerNorm`` reads the bfloat16 activations (torch's CPU autocast keeps its
input's dtype; dualgraph's runs norms and reductions in float32, as torch's CUDA lists do:
docs/amp.md), the logits' dtype checked (``logits.dtype == torch.bfloat16``), an explicit
``.float()`` before a custom auxiliary loss, the backward outside the context (gradients
land in float32 on the float32 parameters), an inner ``autocast(enabled=False)`` region
computing a float32 statistic, and ``torch.is_autocast_enabled()`` read in the forward; SGD
with momentum, no scaler (bfloat16 keeps float32's range)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mix = nn.Linear(tokens, tokens)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mix = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                         nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.token_mix(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mix(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, patch=4, dim=16, n_classes=4):
        super().__init__()
        self.stem = nn.Conv2d(1, dim, patch, stride=patch)
        self.block = MixerBlock(4, dim)
        self.head = nn.Linear(dim, n_classes)
        self.used_autocast = False

    def forward(self, x):
        self.used_autocast = torch.is_autocast_enabled()
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = self.block(x)
        with torch.autocast(device_type="cpu", enabled=False):
            spread = x.float().std(dim=1).mean()
        return self.head(x.mean(dim=1)), spread


def images(rng, n):
    """8x8 images of one of four quadrant blobs."""
    labels = rng.integers(0, 4, n)
    x = rng.normal(0, 0.5, (n, 1, 8, 8)).astype(np.float32)
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 2)
        x[i, 0, 4 * r:4 * r + 4, 4 * q:4 * q + 4] += 1.0
    return torch.from_numpy(x), torch.from_numpy(labels)


def init_weights(model, rng):
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_in = int(np.prod(p.shape[1:]))
            p.data.copy_(torch.from_numpy(rng.normal(0, 1 / np.sqrt(fan_in), tuple(p.shape))
                                          .astype(np.float32)))
        elif "norm" not in name:
            p.data.zero_()


def main(steps=10, compile=False, seed=0, batch=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Mixer()
    init_weights(model, rng)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = [images(rng, batch) for _ in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits, spread = net(x)
            assert logits.dtype == torch.bfloat16
            loss = F.cross_entropy(logits, y)
            aux = (logits.float() ** 2).mean() * 1e-3
        (loss + aux).backward()
        optimizer.step()
        return loss, spread

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, spreads = [], []
    for x, y in data:
        loss, spread = step(x, y)
        losses.append(loss.item())
        spreads.append(spread.item())
    x, y = images(rng, 64)
    with torch.no_grad():
        logits, _ = model(x)
    return {"losses": losses, "spreads": spreads,
            "correct": [int((logits.argmax(1) == y).sum())],
            "dtypes": [int(model.head.weight.grad.dtype == torch.float32),
                       int(loss.dtype == torch.float32), int(model.used_autocast is False)],
            "head": model.head.weight[0].tolist()}
