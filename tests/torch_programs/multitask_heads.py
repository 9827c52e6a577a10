"""Multi-task learning with one shared trunk and heads in an ``nn.ModuleDict`` routed by string
keys, as multi-task repositories write it: each batch belongs to one task (``task`` a string
argument of the step: ``self.heads[task](h)``, ``self.criteria[task]``), per-task
uncertainty weights in an ``nn.ParameterDict`` (``torch.exp(-self.log_vars[task]) * loss
+ self.log_vars[task]``), a ``MultiLabelSoftMarginLoss`` for the tag head, a ``HuberLoss``
for the regression head and ``CrossEntropyLoss`` for the class head; a ``register_buffer``
of per-task step counts bumped in place (``self.seen[TASKS.index(task)] += 1``); per-task
metrics in a dict of lists via ``.detach().cpu().numpy()`` (a multi-label F1 from
``(logits > 0)``, the class accuracy from ``torch.where(logits.argmax(1) == y, 1, 0)``);
Adam with a per-group learning rate for the heads; and a final evaluation over every head
with ``for name, head in model.heads.items()`` under ``torch.inference_mode()``."""
import numpy as np
import torch
import torch.nn as nn

TASKS = ["classify", "regress", "tag"]
IN, CLASSES, TAGS = 6, 3, 4


class MultiTask(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(IN, hidden), nn.LayerNorm(hidden), nn.GELU(),
                                   nn.Linear(hidden, hidden), nn.GELU())
        self.heads = nn.ModuleDict({
            "classify": nn.Linear(hidden, CLASSES),
            "regress": nn.Sequential(nn.Linear(hidden, 8), nn.ReLU(), nn.Linear(8, 1)),
            "tag": nn.Linear(hidden, TAGS)})
        self.criteria = nn.ModuleDict({"classify": nn.CrossEntropyLoss(),
                                       "regress": nn.HuberLoss(delta=0.5),
                                       "tag": nn.MultiLabelSoftMarginLoss()})
        self.log_vars = nn.ParameterDict({t: nn.Parameter(torch.zeros(())) for t in TASKS})
        self.register_buffer("seen", torch.zeros(len(TASKS), dtype=torch.long))

    def forward(self, x, task):
        out = self.heads[task](self.trunk(x))
        return out.squeeze(-1) if task == "regress" else out


def batch(rng, task, n):
    x = rng.normal(0, 1, (n, IN)).astype(np.float32)
    if task == "classify":
        y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
    elif task == "regress":
        y = (x[:, 2] * 2 - x[:, 3] + rng.normal(0, 0.1, n)).astype(np.float32)
    else:
        y = (x[:, :TAGS] > 0.2).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, n=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = MultiTask()
    for name, p in model.named_parameters():
        if not name.startswith("log_vars"):
            p.data.copy_(torch.from_numpy(rng.normal(0, 0.4, tuple(p.shape)).astype(np.float32)))
    head_params = [p for name, p in model.named_parameters() if name.startswith("heads.")]
    other = [p for name, p in model.named_parameters() if not name.startswith("heads.")]
    optimizer = torch.optim.Adam([{"params": other}, {"params": head_params, "lr": 2e-2}],
                                 lr=1e-2)
    data = [(TASKS[i % 3], *batch(rng, TASKS[i % 3], n)) for i in range(3 * steps)]
    net = model

    def step(x, y, task):
        optimizer.zero_grad()
        out = net(x, task)
        raw = model.criteria[task](out, y)
        loss = torch.exp(-model.log_vars[task]) * raw + model.log_vars[task]
        loss.backward()
        optimizer.step()
        model.seen[TASKS.index(task)] += 1
        return loss, raw, out.detach()

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    history = {t: [] for t in TASKS}
    metrics = {"accuracy": [], "f1": [], "mae": []}
    for task, x, y in data:
        loss, raw, out = step(x, y, task)
        history[task].append(raw.item())
        if task == "classify":
            hit = torch.where(out.argmax(1) == y, 1, 0)
            metrics["accuracy"].append(int(hit.sum()))
        elif task == "tag":
            pred, true = (out > 0).cpu().numpy(), y.detach().cpu().numpy() > 0.5
            tp = float((pred & true).sum())
            metrics["f1"].append(2 * tp / max(pred.sum() + true.sum(), 1))
        else:
            metrics["mae"].append(float(np.abs(out.cpu().numpy() - y.numpy()).mean()))
    model.eval()
    final = []
    with torch.inference_mode():
        x = torch.from_numpy(rng.normal(0, 1, (5, IN)).astype(np.float32))
        h = model.trunk(x)
        for name, head in model.heads.items():
            final.extend(head(h).flatten().tolist())
    return {**{f"loss_{t}": v for t, v in history.items()}, **metrics, "final": final,
            "log_vars": [model.log_vars[t].item() for t in TASKS],
            "seen": model.seen.tolist()}
