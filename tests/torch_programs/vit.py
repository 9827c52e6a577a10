"""A small Vision Transformer and its training loop, written the way timm-style and tutorial
ViTs are: a patch embedding by a strided Conv2d with ``flatten(2).transpose(1, 2)``, a class
token ``expand``-ed over the batch and concatenated, a learned positional embedding added
in place, pre-norm blocks with a fused qkv projection split by ``reshape``/``permute``/
``unbind``, LayerScale and stochastic depth (DropPath, identity in eval), ``model.apply``
initialisation with ``trunc_normal_``, AdamW with a no-weight-decay group picked from
``named_parameters``, a warmup-then-cosine ``LambdaLR``, label smoothing, gradient clipping
and an evaluation loop with top-1 and top-3 accuracy. Random images stand in for a dataset.
DropPath's rate is 0 in training so that every framework computes the same losses."""
import math

import numpy as np
import torch
import torch.nn as nn


class PatchEmbed(nn.Module):
    def __init__(self, img_size=8, patch_size=2, in_chans=3, embed_dim=16):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # B, N, C


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


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-1):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Attention(nn.Module):
    def __init__(self, dim, num_heads=2, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0, drop_path=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.ls1 = LayerScale(dim)
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim)

    def forward(self, x):
        x = x + self.drop_path(self.ls1(self.attn(self.norm1(x))))
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))
        return x


class VisionTransformer(nn.Module):
    def __init__(self, img_size=8, patch_size=2, num_classes=5, embed_dim=16, depth=2,
                 num_heads=2, drop_path_rate=0.0):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, 3, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, drop_path=dpr[i])
                                      for i in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward_features(self, x):
        x = self.patch_embed(x)
        cls_token = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_token, x), dim=1)
        x += self.pos_embed
        x = self.blocks(x)
        return self.norm(x)

    def forward(self, x):
        x = self.forward_features(x)
        return self.head(x[:, 0])


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        fan_in = int(np.prod(value.shape[1:])) if value.dim() > 1 else 4
        draw = rng.uniform(-1.0, 1.0, tuple(value.shape)) / np.sqrt(fan_in)
        if name.endswith("weight") and "norm" in name:
            draw = 1.0 + 0.1 * draw
        state[name] = torch.tensor(draw.astype(np.float32))
    model.load_state_dict(state)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name in ("pos_embed", "cls_token"):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": no_decay, "weight_decay": 0.0},
            {"params": decay, "weight_decay": weight_decay}]


def main(steps=10, compile=False, seed=0, batch_size=8, warmup=3):
    torch.manual_seed(seed)
    model = VisionTransformer(drop_path_rate=0.0)
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=3e-3, betas=(0.9, 0.999))

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    rng = np.random.default_rng(seed + 1)
    images = torch.tensor(rng.normal(0, 1, (steps, batch_size, 3, 8, 8)), dtype=torch.float32)
    labels = torch.from_numpy(rng.integers(0, 5, (steps, batch_size)))

    def train_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        return loss, grad_norm

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, norms, lrs = [], [], []
    model.train()
    for i in range(steps):
        loss, grad_norm = train_step(images[i], labels[i])
        scheduler.step()
        losses.append(loss.item())
        norms.append(float(grad_norm))
        lrs.append(scheduler.get_last_lr()[0])
    model.eval()
    top1 = top3 = 0
    with torch.no_grad():
        for i in range(steps):
            output = model(images[i])
            _, pred = output.topk(3, 1, True, True)
            pred = pred.t()
            correct = pred.eq(labels[i].view(1, -1).expand_as(pred))
            top1 += correct[:1].reshape(-1).float().sum(0, keepdim=True).item()
            top3 += correct[:3].reshape(-1).float().sum(0).item()
    return {"losses": losses, "grad_norms": norms, "lrs": lrs, "top": [int(top1), int(top3)]}
