"""A tiny ConvNeXt-style classifier, written the way timm-style blocks are: a patchify stem,
blocks of a 7x7 depthwise convolution, a channels-last ``LayerNorm`` reached through
``x.permute(0, 2, 3, 1)``, an inverted MLP of ``nn.Linear`` and ``nn.GELU``, a layer-scale
``gamma`` parameter and stochastic depth (``DropPath`` with ``x.new_empty(shape)
.bernoulli_(keep)`` and ``div_``; ``drop_prob`` 0 in the checked runs, the module is in
``nn.Identity``'s place when off), a channels-first ``LayerNorm`` written by hand for the
downsampling layer (``u = x.mean(1, keepdim=True)``, ``s = (x - u).pow(2).mean(1, ...)``),
``trunc_normal_``-style init replaced by NumPy weights, global average pooling with
``x.mean([-2, -1])``, ``torch.optim.AdamW`` with a ``LinearLR`` warmup chained to
``CosineAnnealingLR`` through ``SequentialLR``, ``label_smoothing`` and mixup-free
one-hot soft targets (``F.one_hot(...).float()`` into ``torch.sum(-t * log_softmax)``),
and the stem frozen halfway (``p.requires_grad = False``), as fine-tuning does."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def drop_path(x, drop_prob: float = 0.0, training: bool = False):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    return x * random_tensor.div_(keep_prob)


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class LayerNorm(nn.Module):
    """LayerNorm over channels of (N, C, H, W) ("channels_first") or (N, H, W, C)."""

    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps, self.data_format = eps, data_format
        self.normalized_shape = (normalized_shape,)

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class Block(nn.Module):
    def __init__(self, dim, drop_path=0.0, layer_scale_init_value=1e-1):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim,)))
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + self.drop_path(x)


class ConvNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=5, depths=(1, 1), dims=(8, 16)):
        super().__init__()
        self.downsample_layers = nn.ModuleList()
        self.downsample_layers.append(nn.Sequential(
            nn.Conv2d(in_chans, dims[0], kernel_size=2, stride=2),
            LayerNorm(dims[0], eps=1e-6, data_format="channels_first")))
        for i in range(len(dims) - 1):
            self.downsample_layers.append(nn.Sequential(
                LayerNorm(dims[i], eps=1e-6, data_format="channels_first"),
                nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2)))
        self.stages = nn.ModuleList(nn.Sequential(*[Block(dims[i]) for _ in range(depths[i])])
                                    for i in range(len(dims)))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward_features(self, x):
        for down, stage in zip(self.downsample_layers, self.stages):
            x = stage(down(x))
        return self.norm(x.mean([-2, -1]))

    def forward(self, x):
        return self.head(self.forward_features(x))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    state = {}
    for k, v in model.state_dict().items():
        if k.endswith("gamma"):
            value = np.full(tuple(v.shape), 0.1)
        elif "norm" in k or (k.endswith(".1.weight") and v.dim() == 1):
            value = (1.0 if k.endswith("weight") else 0.0) + rng.normal(0, 0.05, tuple(v.shape))
        else:
            value = np.clip(rng.normal(0, 0.2, tuple(v.shape)), -0.4, 0.4)
        state[k] = torch.tensor(value.astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch=4):
    model = ConvNeXt()
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=2)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps - 2, 1))
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine],
                                                      milestones=[2])
    rng = np.random.default_rng(seed + 1)
    images = rng.normal(size=(steps, batch, 3, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 5, size=(steps, batch))

    def train_step(x, y):
        logits = model(x)
        target = F.one_hot(y, 5).float() * 0.9 + 0.1 / 5
        soft = torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()
        loss = 0.5 * soft + 0.5 * F.cross_entropy(logits, y, label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, lrs = [], []
    model.train()
    for step in range(steps):
        if step == steps // 2:   # fine-tuning: the stem frozen from here on
            for p in model.downsample_layers[0].parameters():
                p.requires_grad = False
        losses.append(train_step(torch.tensor(images[step]), torch.tensor(labels[step])).item())
        lrs.append(optimizer.param_groups[0]["lr"])
        scheduler.step()
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(images[0]))
    return {"losses": losses, "lrs": lrs, "logits": logits.flatten().tolist(),
            "stem": model.downsample_layers[0][0].weight.flatten()[:8].tolist()}
