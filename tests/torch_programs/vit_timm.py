"""A vision transformer written the way timm's ``vision_transformer.py`` is: ``PatchEmbed``
(a strided ``Conv2d``, ``flatten(2).transpose(1, 2)``), a class token and position
embedding (``cls_token.expand(B, -1, -1)``), attention from one ``qkv`` projection
reshaped and ``permute(2, 0, 3, 1, 4)``-ed, ``unbind(0)`` and
``F.scaled_dot_product_attention``, ``LayerScale`` (``x.mul_(gamma) if inplace else x *
gamma``), stochastic depth with per-block rates from ``torch.linspace(0, rate, depth)``
and timm's ``drop_path`` (a per-sample keep mask scaled by ``div_(keep_prob)``; its draws
come from a seeded NumPy generator here, so that both frameworks drop the same samples);
parameter groups without weight decay for biases, norms and ``no_weight_decay()`` names;
mixup with a NumPy-drawn ``lam`` and timm's ``SoftTargetCrossEntropy`` against
label-smoothed one-hot targets; ``CosineAnnealingWarmRestarts`` stepped with fractional
epochs; ``clip_grad_norm_``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DROP_RNG = np.random.default_rng(123)


def drop_path(x, drop_prob=0.0, training=False, scale_by_keep=True):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = torch.from_numpy((DROP_RNG.random(shape) < keep_prob).astype(np.float32))
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self):
        return f"drop_prob={round(self.drop_prob, 3):0.3f}"


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-1, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x.mul_(self.gamma) if self.inplace else x * self.gamma


class PatchEmbed(nn.Module):
    def __init__(self, img_size=8, patch_size=4, in_chans=3, embed_dim=16):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=2, qkv_bias=True):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, drop_path=0.0, init_values=1e-1, inplace_ls=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.ls1 = LayerScale(dim, init_values, inplace=inplace_ls)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.ls2 = LayerScale(dim, init_values)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class VisionTransformer(nn.Module):
    def __init__(self, num_classes=4, embed_dim=16, depth=3, num_heads=2,
                 drop_path_rate=0.3):
        super().__init__()
        self.patch_embed = PatchEmbed(embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 1,
                                                  embed_dim))
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, drop_path=dpr[i],
                                            inplace_ls=i == 0) for i in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    @torch.jit.ignore
    def no_weight_decay(self):
        return {"pos_embed", "cls_token"}

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = self.blocks(x + self.pos_embed)
        return self.head(self.norm(x)[:, 0])


def param_groups_weight_decay(model, weight_decay=0.05, no_weight_decay_list=()):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(".bias") or name in no_weight_decay_list:
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": no_decay, "weight_decay": 0.0},
            {"params": decay, "weight_decay": weight_decay}]


class SoftTargetCrossEntropy(nn.Module):
    def forward(self, x, target):
        loss = torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1)
        return loss.mean()


def mixup_target(target, num_classes, lam=1.0, smoothing=0.0):
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    y1 = F.one_hot(target, num_classes).float() * (on_value - off_value) + off_value
    y2 = F.one_hot(target.flip(0), num_classes).float() * (on_value - off_value) + off_value
    return y1 * lam + y2 * (1.0 - lam)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                         k.endswith("weight") else rng.normal(0, 0.2, tuple(v.shape)))
                        .astype(np.float32))
        for k, v in model.state_dict().items()})


def make_images(rng, n=6, classes=4):
    y = rng.integers(0, classes, n)
    x = rng.normal(0, 1, (n, 3, 8, 8)).astype(np.float32)
    for i, c in enumerate(y):   # a bright quadrant per class
        x[i, :, (c // 2) * 4:(c // 2) * 4 + 4, (c % 2) * 4:(c % 2) * 4 + 4] += 1.5
    return torch.tensor(x), torch.tensor(y)


def main(steps=10, compile=False, seed=0):
    DROP_RNG.bit_generator.state = np.random.default_rng(123).bit_generator.state
    model = VisionTransformer()
    init_weights(model, seed)
    groups = param_groups_weight_decay(model, 0.05, model.no_weight_decay())
    optimizer = torch.optim.AdamW(groups, lr=2e-3)
    iters_per_epoch = 2
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=1,
                                                                     T_mult=2, eta_min=1e-4)
    criterion = SoftTargetCrossEntropy()
    rng = np.random.default_rng(seed + 1)

    def train_step(x, soft_target):
        loss = criterion(model(x), soft_target)
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, norm

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, norms, lrs = [], [], []
    for step in range(steps):
        epoch, i = divmod(step, iters_per_epoch)
        model.train()
        x, y = make_images(rng)
        lam = float(rng.beta(0.8, 0.8))
        x = lam * x + (1.0 - lam) * x.flip(0)
        loss, norm = train_step(x, mixup_target(y, 4, lam, smoothing=0.1))
        scheduler.step(epoch + (i + 1) / iters_per_epoch)
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(optimizer.param_groups[1]["lr"])
    model.eval()
    x, _ = make_images(np.random.default_rng(3))
    with torch.no_grad():
        logits = model(x)
    return {"losses": losses, "norms": norms, "lrs": lrs, "logits": logits.flatten().tolist()}
