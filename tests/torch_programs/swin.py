"""A two-stage Swin-style transformer classifier, written the way the Swin reference code
and its timm descendants are: a patch embedding by a strided ``nn.Conv2d`` and
``flatten(2).transpose(1, 2)``; window attention over ``window_partition`` /
``window_reverse`` (``view`` + ``permute(0, 1, 3, 2, 4, 5).contiguous()``), a learned
relative position bias table indexed by a ``relative_position_index`` buffer built with
``torch.meshgrid(..., indexing="ij")``, ``torch.stack``, ``torch.flatten`` and broadcast
subtraction; shifted windows by ``torch.roll`` with the attention mask built by slice
assignment into an ``img_mask`` and ``masked_fill(mask != 0, -100.0)``; patch merging
from ``x[:, 0::2, 1::2, :]``-style strided slices; ``nn.Identity`` drop paths, a
``qkv.reshape(B_, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)`` split, AdamW with
weight decay only on the weights (the usual parameter groups), label smoothing and a
linear warmup by ``LambdaLR``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn


def window_partition(x, window_size):
    B, H, W, C = x.shape
    x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)


def window_reverse(windows, window_size, H, W):
    B = int(windows.shape[0] / (H * W / window_size / window_size))
    x = windows.view(B, H // window_size, W // window_size, window_size, window_size, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim, window_size, num_heads):
        super().__init__()
        self.window_size, self.num_heads = window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size),
                                            indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative = relative.permute(1, 2, 0).contiguous()
        relative[:, :, 0] += window_size - 1
        relative[:, :, 1] += window_size - 1
        relative[:, :, 0] *= 2 * window_size - 1
        self.register_buffer("relative_position_index", relative.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        bias = bias.view(N, N, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nW = mask.shape[0]
            attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, N, N)
        attn = self.softmax(attn)
        return self.proj((attn @ v).transpose(1, 2).reshape(B_, N, C))


class SwinBlock(nn.Module):
    def __init__(self, dim, resolution, num_heads, window_size=2, shift_size=0):
        super().__init__()
        self.resolution, self.window_size, self.shift_size = resolution, window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size, num_heads)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        if shift_size > 0:
            H = W = resolution
            img_mask = torch.zeros((1, H, W, 1))
            cnt = 0
            for h in (slice(0, -window_size), slice(-window_size, -shift_size),
                      slice(-shift_size, None)):
                for w in (slice(0, -window_size), slice(-window_size, -shift_size),
                          slice(-shift_size, None)):
                    img_mask[:, h, w, :] = cnt
                    cnt += 1
            mask_windows = window_partition(img_mask, window_size).view(-1, window_size ** 2)
            attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0))
            attn_mask = attn_mask.masked_fill(attn_mask == 0, float(0.0))
        else:
            attn_mask = None
        self.register_buffer("attn_mask", attn_mask)

    def forward(self, x):
        H = W = self.resolution
        B, L, C = x.shape
        shortcut = x
        x = self.norm1(x).view(B, H, W, C)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
        windows = window_partition(x, self.window_size).view(-1, self.window_size ** 2, C)
        windows = self.attn(windows, mask=self.attn_mask)
        x = window_reverse(windows.view(-1, self.window_size, self.window_size, C),
                           self.window_size, H, W)
        if self.shift_size > 0:
            x = torch.roll(x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
        x = shortcut + self.drop_path(x.view(B, H * W, C))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    def __init__(self, resolution, dim):
        super().__init__()
        self.resolution = resolution
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x):
        H = W = self.resolution
        B, L, C = x.shape
        x = x.view(B, H, W, C)
        x = torch.cat([x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :], x[:, 0::2, 1::2, :],
                       x[:, 1::2, 1::2, :]], -1).view(B, -1, 4 * C)
        return self.reduction(self.norm(x))


class Swin(nn.Module):
    def __init__(self, img=16, patch=2, dim=16, classes=5):
        super().__init__()
        res = img // patch
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        self.layers = nn.ModuleList([
            nn.Sequential(SwinBlock(dim, res, 2, 4, 0), SwinBlock(dim, res, 2, 4, 2),
                          PatchMerging(res, dim)),
            nn.Sequential(SwinBlock(2 * dim, res // 2, 4, 2, 0),
                          SwinBlock(2 * dim, res // 2, 4, 2, 1))])
        self.norm = nn.LayerNorm(2 * dim)
        self.avgpool = nn.AdaptiveAvgPool1d(1)
        self.head = nn.Linear(2 * dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        for layer in self.layers:
            x = layer(x)
        x = self.avgpool(self.norm(x).transpose(1, 2))
        return self.head(torch.flatten(x, 1))


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: (torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.2).astype(np.float32))
            if v.is_floating_point() else v)
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, batch=4):
    model = Swin()
    init_weights(model, seed)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=2e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    rng = np.random.default_rng(seed + 1)
    images = torch.tensor(rng.standard_normal((steps, batch, 3, 16, 16)).astype(np.float32))
    labels = torch.tensor(rng.integers(0, 5, (steps, batch)))

    def train_step(x, y):
        loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for s in range(steps):
        model.train()
        losses.append(train_step(images[s], labels[s]).item())
        scheduler.step()
    model.eval()
    with torch.no_grad():
        logits = model(images[0])
    return {"losses": losses, "logits": logits.flatten().tolist(),
            "pred": logits.argmax(-1).tolist()}
