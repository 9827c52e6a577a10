"""Fine-tuning after model surgery, as transfer-learning scripts write it: a backbone of stages
in an ``nn.ModuleDict``, per-stage residual scales in an ``nn.ParameterList``, input
normalisation constants from ``register_buffer``; weights set by ``model.apply(init_fn)``
(``isinstance`` dispatch, ``nn.init.zeros_``/``ones_`` and NumPy draws copied in under
``no_grad``); a "pretrained" checkpoint as a ``state_dict`` cloned, loaded into a fresh
model with ``strict=False`` (its new head's keys reported missing and its old head's
unexpected); ``named_modules`` surgery replacing every ``nn.ReLU`` by ``nn.Hardswish`` via
``get_submodule`` and ``setattr`` on the parent, and every ``BatchNorm1d`` by a
``GroupNorm`` carrying its affine weights; the first stage in a param group of its own with
a smaller lr, frozen (``requires_grad_(False)``: no gradients, AdamW skips it) and unfrozen
halfway; ``OneCycleLR`` with a ``max_lr`` per group, stepped every batch,
``clip_grad_norm_``, and ``CrossEntropyLoss`` with ``label_smoothing`` and ``ignore_index``
(some labels are -100: unlabelled rows)."""
import numpy as np
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim)
        self.norm = nn.BatchNorm1d(dim)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x))))


class Backbone(nn.Module):
    def __init__(self, in_dim=6, dim=16, n_classes=3):
        super().__init__()
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("std", torch.ones(in_dim))
        self.stem = nn.Sequential(nn.Linear(in_dim, dim), nn.ReLU())
        self.stages = nn.ModuleDict({"stage1": Block(dim), "stage2": Block(dim)})
        self.scales = nn.ParameterList([nn.Parameter(torch.full((dim,), 0.5))
                                        for _ in self.stages])
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = self.stem((x - self.mean) / self.std)
        for scale, (name, stage) in zip(self.scales, self.stages.items()):
            x = x + scale * stage(x)
        return self.head(x)


def make_init(rng):
    def init_fn(m):
        if isinstance(m, nn.Linear):
            with torch.no_grad():
                m.weight.copy_(torch.from_numpy(rng.normal(
                    0, 1 / np.sqrt(m.in_features), tuple(m.weight.shape)).astype(np.float32)))
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm1d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return init_fn


def replace_layers(model):
    """ReLU -> Hardswish, BatchNorm1d -> GroupNorm(4) with the same affine parameters."""
    for name, module in list(model.named_modules()):
        if not isinstance(module, (nn.ReLU, nn.BatchNorm1d)):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if isinstance(module, nn.ReLU):
            new = nn.Hardswish()
        else:
            new = nn.GroupNorm(4, module.num_features)
            new.weight.data.copy_(module.weight.data)
            new.bias.data.copy_(module.bias.data)
        setattr(parent, child, new)


def dataset(rng, n, in_dim=6):
    x = rng.normal(3.0, 2.0, (n, in_dim)).astype(np.float32)
    y = (x[:, 0] > 3).astype(np.int64) + (x[:, 1] > 4).astype(np.int64)
    y[rng.random(n) < 0.15] = -100
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, batch=24):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    pretrained = Backbone(n_classes=5)
    pretrained.apply(make_init(rng))
    pretrained.mean.fill_(3.0)
    pretrained.std.fill_(2.0)
    checkpoint = {k: v.clone() for k, v in pretrained.state_dict().items()
                  if not k.startswith("head.")}
    model = Backbone(n_classes=3)
    model.apply(make_init(rng))
    report = model.load_state_dict(checkpoint, strict=False)
    replace_layers(model)
    model.stages["stage1"].requires_grad_(False)
    stage1 = list(model.stages["stage1"].parameters())
    others = [p for p in model.parameters() if all(p is not q for q in stage1)]
    optimizer = torch.optim.AdamW([{"params": others},
                                   {"params": stage1, "lr": 1e-3, "weight_decay": 0.0}],
                                  lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[2e-2, 2e-3],
                                                    total_steps=steps, pct_start=0.3)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=-100)
    data = [dataset(rng, batch) for _ in range(steps)]
    net = model

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        logits = net(x)
        loss = criterion(logits, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, norm

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, norms, lrs = [], [], []
    for i, (x, y) in enumerate(data):
        if i == steps // 2:
            model.stages["stage1"].requires_grad_(True)
        loss, norm = step(x, y)
        scheduler.step()
        losses.append(loss.item())
        norms.append(norm.item())
        lrs += scheduler.get_last_lr()
    model.eval()
    x, y = dataset(rng, 64)
    with torch.no_grad():
        pred = model(x).argmax(1)
    kinds = sorted({type(m).__name__ for m in model.modules()})
    return {"losses": losses, "grad_norms": norms, "lrs": lrs,
            "correct": [int((pred == y)[y != -100].sum())],
            "missing": [len(report.missing_keys)], "unexpected": [len(report.unexpected_keys)],
            "n_kinds": [len(kinds)], "scales": model.scales[1][:4].tolist()}
