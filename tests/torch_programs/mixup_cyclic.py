"""A small CNN trained with mixup as the original mixup training script writes it: the
mixing weight ``lam = np.random.beta(alpha, alpha)`` from NumPy's global generator (a new
Python float at every step, passed to the compiled step), the partner batch by a
permutation index (``x[index, :]``),
``mixed_x = lam * x + (1 - lam) * x[index, :]`` and the loss ``lam * criterion(pred, y_a) +
(1 - lam) * criterion(pred, y_b)`` with a label-smoothed ``CrossEntropyLoss``; the weight's
density under ``torch.distributions.Beta`` logged; ``clip_grad_norm_`` whose returned total
norm is logged; SGD with Nesterov momentum under ``CyclicLR`` (triangular2, momentum cycled
inversely) stepped after every batch; and, every other step, an evaluation pass under
``torch.no_grad()`` with ``model.eval()`` / ``model.train()`` around it whose accuracy is
computed in NumPy from ``logits.argmax(1).detach().cpu().numpy()``, and the correct
predictions weighted by a ``torch.where(pred == y, ...)`` mask."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Beta


class Net(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(8 * 2 * 2, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(self.drop(torch.flatten(x, 1)))


def mixup_data(x, y, alpha, index):
    lam = np.random.beta(alpha, alpha) if alpha > 0 else 1.0
    mixed_x = lam * x + (1 - lam) * x[index, :]
    return mixed_x, y, y[index], lam


def mixup_criterion(criterion, pred, y_a, y_b, lam):
    return lam * criterion(pred, y_a) + (1 - lam) * criterion(pred, y_b)


def images(rng, n, n_classes=4):
    y = rng.integers(0, n_classes, n)
    x = rng.normal(0, 0.5, (n, 1, 8, 8)).astype(np.float32)
    for k, c in enumerate(y):
        x[k, 0, 2 * c:2 * c + 2, :] += 1.5
    return torch.from_numpy(x), torch.from_numpy(y)


def main(steps=10, compile=False, seed=0, batch=12, alpha=0.4):
    torch.manual_seed(seed)
    np.random.seed(seed)
    rng = np.random.default_rng(seed + 1)
    model = Net()
    for p in model.parameters():
        p.data.copy_(torch.from_numpy(rng.normal(0, 0.3, tuple(p.shape)).astype(np.float32)))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CyclicLR(optimizer, base_lr=0.01, max_lr=0.1,
                                                  step_size_up=2, mode="triangular2")
    data = [(images(rng, batch), torch.from_numpy(rng.permutation(batch)))
            for _ in range(steps)]
    val_x, val_y = images(rng, 32)
    beta = Beta(torch.tensor([alpha]), torch.tensor([alpha]))
    net = model

    def step(inputs, targets_a, targets_b, lam):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = mixup_criterion(criterion, outputs, targets_a, targets_b, lam)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0,
                                                   norm_type=2.0)
        optimizer.step()
        correct = (lam * outputs.argmax(1).eq(targets_a).sum().float()
                   + (1 - lam) * outputs.argmax(1).eq(targets_b).sum().float())
        return loss, grad_norm, correct

    def evaluate(x, y):
        model.eval()
        with torch.no_grad():
            logits = net(x)
            pred = logits.argmax(1)
            weight = torch.where(pred == y, logits.softmax(1).max(1).values,
                                 torch.zeros_like(logits[:, 0]))
        model.train()
        acc = float(np.mean(pred.detach().cpu().numpy() == y.numpy()))
        return acc, weight.sum().item()

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, norms, lrs, momenta, mixed, densities, accs, weights = ([] for _ in range(8))
    for i, ((x, y), index) in enumerate(data):
        inputs, targets_a, targets_b, lam = mixup_data(x, y, alpha, index)
        loss, grad_norm, correct = step(inputs, targets_a, targets_b, lam)
        scheduler.step()
        losses.append(loss.item())
        norms.append(grad_norm.item())
        mixed.append(correct.item())
        densities.append(beta.log_prob(torch.tensor([min(max(lam, 1e-3), 1 - 1e-3)])).item())
        lrs.append(scheduler.get_last_lr()[0])
        momenta.append(optimizer.param_groups[0]["momentum"])
        if i % 2 == 1:
            acc, weight = evaluate(val_x, val_y)
            accs.append(acc)
            weights.append(weight)
    return {"losses": losses, "norms": norms, "lrs": lrs, "momenta": momenta, "mixed": mixed,
            "densities": densities, "accs": accs, "weights": weights,
            "running_var": model.bn1.running_var.tolist()}
