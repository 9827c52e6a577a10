"""Knowledge distillation (Hinton et al.) written the way the PyTorch tutorial and the
``knowledge-distillation-pytorch`` repository write it: a teacher trained first with
cross-entropy, then frozen with ``teacher.eval()`` and queried under ``torch.no_grad()``;
a smaller student trained on ``nn.KLDivLoss(reduction="batchmean")(F.log_softmax(
student_logits / T, dim=1), F.softmax(teacher_logits / T, dim=1)) * (T * T)`` blended with
``F.cross_entropy`` by ``alpha``; SGD with momentum and Nesterov, a linear warmup through
``LambdaLR(lambda epoch: min(1.0, (epoch + 1) / warmup))`` chained by ``SequentialLR`` into
``CosineAnnealingWarmRestarts``; a teacher with ``nn.BatchNorm1d`` (after bias-free
``nn.Linear``s) and ``nn.Dropout(p=0)`` whose ``eval()`` switch matters, trained by SGD
(a BatchNorm feeding a linear layer into another BatchNorm has bias gradients that are
sums of zero-sum terms, rounding noise that Adam would scale up to full steps), an
evaluation loop toggling ``model.eval()`` / ``model.train()`` that counts
``pred.eq(target.view_as(pred)).sum().item()``, and the tutorial's hand-written soft-target
term ``torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] *
(T ** 2)`` added to it."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingWarmRestarts, LambdaLR, SequentialLR


class Teacher(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Linear(12, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(p=0.0),
            nn.Linear(32, 32, bias=False), nn.BatchNorm1d(32), nn.ReLU())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x))


class Student(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, v in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            state[name] = v
        elif name.endswith("running_var"):
            state[name] = torch.ones_like(v)
        else:
            state[name] = torch.tensor(rng.normal(0, 0.4, tuple(v.shape)).astype(np.float32))
    model.load_state_dict(state)


def loss_fn_kd(outputs, labels, teacher_outputs, alpha, T):
    KD_loss = nn.KLDivLoss(reduction="batchmean")(F.log_softmax(outputs / T, dim=1),
                                                  F.softmax(teacher_outputs / T, dim=1)) \
        * (alpha * T * T) + F.cross_entropy(outputs, labels) * (1. - alpha)
    return KD_loss


def soft_target_loss(student_logits, teacher_logits, T):
    soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
    soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
    return torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T ** 2)


def evaluate(model, batches):
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in batches:
            output = model(data)
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    model.train()
    return correct


def main(steps=10, compile=False, seed=0, batch=16):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    centres = rng.normal(0, 1.5, (5, 12))
    batches = []
    for _ in range(steps + 2):
        y = rng.integers(0, 5, batch)
        x = centres[y] + rng.normal(0, 1, (batch, 12))
        batches.append((torch.tensor(x, dtype=torch.float32), torch.tensor(y)))
    teacher, student = Teacher(), Student()
    init_weights(teacher, seed)
    init_weights(student, seed + 2)
    t_opt = torch.optim.SGD(teacher.parameters(), lr=0.05, momentum=0.9)
    opt = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    warmup = 3
    scheduler = SequentialLR(opt, schedulers=[
        LambdaLR(opt, lambda epoch: min(1.0, (epoch + 1) / warmup)),
        CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=1e-3)], milestones=[warmup])

    def teacher_step(x, y):
        t_opt.zero_grad()
        loss = F.cross_entropy(teacher(x), y)
        loss.backward()
        t_opt.step()
        return loss

    def student_step(x, y, T=4.0, alpha=0.7):
        with torch.no_grad():
            teacher_logits = teacher(x)
        logits = student(x)
        loss = loss_fn_kd(logits, y, teacher_logits, alpha, T)
        loss = loss + 0.1 * soft_target_loss(logits, teacher_logits, T)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    if compile == "model":
        teacher, student = torch.compile(teacher), torch.compile(student)
    elif compile:
        teacher_step, student_step = torch.compile(teacher_step), torch.compile(student_step)
    t_losses, s_losses, lrs, correct = [], [], [], []
    teacher.train()
    for x, y in batches[:steps]:
        t_losses.append(teacher_step(x, y).item())
    teacher.eval()
    for x, y in batches[:steps]:
        s_losses.append(student_step(x, y).item())
        scheduler.step()
        lrs.append(opt.param_groups[0]["lr"])
        correct.append(evaluate(student, batches[-2:]))
    correct.append(evaluate(teacher, batches[-2:]))
    return {"teacher_losses": t_losses, "student_losses": s_losses, "lrs": lrs,
            "correct": correct}
