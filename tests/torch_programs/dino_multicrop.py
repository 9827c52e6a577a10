"""Self-distillation without labels as DINO's reference code writes it: a multi-crop
wrapper that groups crops of equal resolution with ``torch.unique_consecutive(...,
return_counts=True)`` and ``torch.cumsum`` and runs the backbone once per group; a
student and an EMA teacher (``@torch.no_grad()`` updates ``param_k.data.mul_(m).add_((1 -
m) * param_q.detach().data)``); a loss module whose ``center`` buffer is rebound in its
``@torch.no_grad()`` ``update_center`` (``self.center = self.center * m + ...``) and whose
teacher temperature comes from a NumPy warm-up schedule; per-step learning rate and weight
decay written into ``param_groups`` from NumPy cosine schedules (a ``regularized`` and a
``not_regularized`` group); gradients clipped per parameter through ``p.grad.data`` and
the last layer's gradients cancelled (``p.grad = None``) in the first steps."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Backbone(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.conv = nn.Conv2d(3, dim, 3, padding=1)
        self.norm = nn.GroupNorm(2, dim)

    def forward(self, x):
        return F.adaptive_avg_pool2d(F.gelu(self.norm(self.conv(x))), 1).flatten(1)


class Head(nn.Module):
    def __init__(self, dim=8, out=10):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 16), nn.GELU(), nn.Linear(16, 6))
        self.last_layer = nn.utils.weight_norm(nn.Linear(6, out, bias=False))
        self.last_layer.weight_g.data.fill_(1)

    def forward(self, x):
        x = F.normalize(self.mlp(x), dim=-1, p=2)
        return self.last_layer(x)


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x):
        if not isinstance(x, list):
            x = [x]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0)
        start_idx, output = 0, torch.empty(0)
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(x[start_idx:end_idx]))
            output = torch.cat((output, _out))
            start_idx = end_idx
        return self.head(output)


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp, warmup_steps,
                 steps, student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.center_momentum, self.ncrops = student_temp, center_momentum, ncrops
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.teacher_temp_schedule = np.concatenate((
            np.linspace(warmup_teacher_temp, teacher_temp, warmup_steps),
            np.ones(steps - warmup_steps) * teacher_temp))

    def forward(self, student_output, teacher_output, step):
        student_out = (student_output / self.student_temp).chunk(self.ncrops)
        temp = self.teacher_temp_schedule[step]
        teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1)
        teacher_out = teacher_out.detach().chunk(2)
        total_loss, n_loss_terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        self.update_center(teacher_output)
        return total_loss

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True)
        batch_center = batch_center / len(teacher_output)
        self.center = self.center * self.center_momentum \
            + batch_center * (1 - self.center_momentum)


def cosine_scheduler(base, final, steps, warmup_steps=0):
    warmup = np.linspace(0, base, warmup_steps)
    iters = np.arange(steps - warmup_steps)
    schedule = final + 0.5 * (base - final) * (1 + np.cos(np.pi * iters / len(iters)))
    return np.concatenate((warmup, schedule))


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    student = MultiCropWrapper(Backbone(), Head())
    teacher = MultiCropWrapper(Backbone(), Head())
    student.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                                 .astype(np.float32))
                             for k, v in student.state_dict().items()})
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    loss_fn = DINOLoss(10, 4, 0.04, 0.07, 2, steps)
    regularized = [p for n, p in student.named_parameters()
                   if not n.endswith(".bias") and p.ndim > 1]
    not_regularized = [p for n, p in student.named_parameters()
                       if n.endswith(".bias") or p.ndim == 1]
    optimizer = torch.optim.AdamW([{"params": regularized},
                                   {"params": not_regularized, "weight_decay": 0.0}])
    lr_schedule = cosine_scheduler(0.01, 1e-4, steps, warmup_steps=1)
    wd_schedule = cosine_scheduler(0.04, 0.4, steps)
    momentum_schedule = cosine_scheduler(0.9, 1.0, steps)
    net = torch.compile(student) if compile == "model" else student

    def train_step(images, it):
        teacher_output = teacher(images[:2])
        student_output = net(images)
        loss = loss_fn(student_output, teacher_output, it)
        optimizer.zero_grad()
        loss.backward()
        norms = []
        for name, p in student.named_parameters():
            if p.grad is not None:
                param_norm = p.grad.data.norm(2)
                norms.append(param_norm)
                clip_coef = 3.0 / (param_norm + 1e-6)
                if clip_coef < 1:
                    p.grad.data.mul_(clip_coef)
        if it < 1:
            for n, p in student.named_parameters():
                if "last_layer" in n:
                    p.grad = None
        optimizer.step()
        with torch.no_grad():
            m = momentum_schedule[it]
            for param_q, param_k in zip(student.parameters(), teacher.parameters()):
                param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
        return loss, torch.stack(norms).sum()

    if compile is True:
        train_step = torch.compile(train_step)
    losses = []
    for it in range(steps):
        for i, group in enumerate(optimizer.param_groups):
            group["lr"] = lr_schedule[it]
            if i == 0:
                group["weight_decay"] = wd_schedule[it]
        images = [torch.from_numpy(rng.normal(0, 1, (3, 3, 8, 8)).astype(np.float32))
                  for _ in range(2)]
        images += [torch.from_numpy(rng.normal(0, 1, (3, 3, 4, 4)).astype(np.float32))
                   for _ in range(2)]
        losses.append([v.item() for v in train_step(images, it)])
    return {"losses": losses, "center": loss_fn.center.flatten().tolist()}
