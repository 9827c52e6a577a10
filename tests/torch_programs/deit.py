"""DeiT-style distillation of a small vision transformer from a frozen convolutional
teacher, written the way timm / DeiT training code is: a patch embedding ``self.proj(x)
.flatten(2).transpose(1, 2)``, class and distillation tokens ``expand(B, -1, -1)`` and
``torch.cat``, ``nn.init.trunc_normal_`` and ``self.apply(self._init_weights)`` with
``isinstance`` checks, attention with ``qkv.reshape(B, N, 3, heads, C // heads).permute(2,
0, 3, 1, 4)`` and ``q, k, v = qkv.unbind(0)``, a ``DropPath`` that returns its input at rate
0 or in eval, two heads averaged at inference, mixup on the batch (``x_flipped = x.flip(0).mul_(1 -
lam)``, ``x.mul_(lam).add_(x_flipped)`` on a clone) with label-smoothed one-hot targets from
``torch.full(...).scatter_(1, y, on_value)``, ``SoftTargetCrossEntropy`` (``torch.sum(
-target * F.log_softmax(x, dim=-1), dim=-1).mean()``), soft distillation with ``F.kl_div(
..., reduction="sum", log_target=True) * (T * T) / outputs_kd.numel()`` and hard
distillation ``F.cross_entropy(outputs_kd, teacher_outputs.argmax(dim=1))``, the teacher
in ``eval()`` under ``torch.no_grad()``, weight decay groups by ``param.ndim <= 1`` and
``no_weight_decay()`` names, and a warmup then cosine ``LambdaLR``; evaluation with
``nn.CrossEntropyLoss(label_smoothing=0.1)`` and top-1 counts."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

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
    return x * random_tensor / keep_prob


class DropPath(nn.Module):
    def __init__(self, drop_prob=0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0, drop_path=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(),
                                 nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class DistilledViT(nn.Module):
    def __init__(self, img_size=8, patch=4, dim=16, depth=2, heads=2, num_classes=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        num_patches = (img_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 2, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, drop_path=0.0) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        self.head_dist = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.dist_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def no_weight_decay(self):
        return {"pos_embed", "cls_token", "dist_token"}

    def forward(self, x):
        B = x.shape[0]
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls_tokens = self.cls_token.expand(B, -1, -1)
        dist_token = self.dist_token.expand(B, -1, -1)
        x = torch.cat((cls_tokens, dist_token, x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        x, x_dist = self.head(x[:, 0]), self.head_dist(x[:, 1])
        if self.training:
            return x, x_dist
        return (x + x_dist) / 2


class SoftTargetCrossEntropy(nn.Module):
    def forward(self, x, target):
        return torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1).mean()


class DistillationLoss(nn.Module):
    def __init__(self, base_criterion, teacher, distillation_type, alpha, tau):
        super().__init__()
        self.base_criterion, self.teacher = base_criterion, teacher
        self.distillation_type, self.alpha, self.tau = distillation_type, alpha, tau

    def forward(self, inputs, outputs, labels):
        outputs, outputs_kd = outputs
        base_loss = self.base_criterion(outputs, labels)
        with torch.no_grad():
            teacher_outputs = self.teacher(inputs)
        if self.distillation_type == "soft":
            T = self.tau
            distillation_loss = F.kl_div(
                F.log_softmax(outputs_kd / T, dim=1), F.log_softmax(teacher_outputs / T, dim=1),
                reduction="sum", log_target=True) * (T * T) / outputs_kd.numel()
        else:
            distillation_loss = F.cross_entropy(outputs_kd, teacher_outputs.argmax(dim=1))
        return base_loss * (1 - self.alpha) + distillation_loss * self.alpha


def mixup_target(target, num_classes, lam, smoothing):
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    y1 = torch.full((target.size(0), num_classes), off_value).scatter_(
        1, target.long().view(-1, 1), on_value)
    return y1 * lam + y1.flip(0) * (1.0 - lam)


def param_groups_weight_decay(model, weight_decay, no_weight_decay_list=()):
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


def init_weights(model, seed, scale):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: v if "running" in k or "num_batches" in k else
        torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "norm" in k and
                      k.endswith("weight") else rng.normal(0, scale, tuple(v.shape)))
                     .astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, batch=8, num_classes=4):
    teacher = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))
    init_weights(teacher, seed + 5, 0.5)
    teacher.eval()
    model = DistilledViT(num_classes=num_classes)
    init_weights(model, seed, 0.2)
    optimizer = torch.optim.AdamW(param_groups_weight_decay(
        model, 0.05, model.no_weight_decay()), lr=2e-3)
    warmup = 2
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup if
                                                  s < warmup else 0.5 * (1 + math.cos(
                                                      math.pi * (s - warmup) / steps)))
    losses_by_type = {}
    rng = np.random.default_rng(seed + 1)
    for distillation_type in ("soft", "hard"):
        criterion = DistillationLoss(SoftTargetCrossEntropy(), teacher, distillation_type,
                                     alpha=0.5, tau=2.0)

        def train_step(samples, targets, lam):
            mixed = samples.clone()
            x_flipped = mixed.flip(0).mul_(1.0 - lam)
            mixed.mul_(lam).add_(x_flipped)
            soft_targets = mixup_target(targets, num_classes, lam, smoothing=0.1)
            outputs = model(mixed)
            loss = criterion(mixed, outputs, soft_targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss

        if compile == "model" and distillation_type == "soft":
            model = torch.compile(model)
        elif compile and compile != "model":
            train_step = torch.compile(train_step)
        losses = []
        for _ in range(steps // 2):
            model.train()
            y = rng.integers(0, num_classes, batch)
            x = rng.normal(0, 0.5, (batch, 3, 8, 8)) + (y[:, None, None, None] - 1.5) * 0.5
            lam = float(rng.beta(0.8, 0.8))
            losses.append(train_step(torch.tensor(x.astype(np.float32)), torch.tensor(y),
                                     lam).item())
            scheduler.step()
        losses_by_type[distillation_type] = losses
    model.eval()
    y = rng.integers(0, num_classes, 16)
    x = rng.normal(0, 0.5, (16, 3, 8, 8)) + (y[:, None, None, None] - 1.5) * 0.5
    with torch.no_grad():
        output = model(torch.tensor(x.astype(np.float32)))
        eval_loss = nn.CrossEntropyLoss(label_smoothing=0.1)(output, torch.tensor(y))
        correct = (output.argmax(dim=1) == torch.tensor(y)).sum().item()
    return {"soft": losses_by_type["soft"], "hard": losses_by_type["hard"],
            "eval": [eval_loss.item()], "correct": [correct],
            "lr": [optimizer.param_groups[0]["lr"]]}
