"""A CIFAR-style ResNet and its training loop, written the way common PyTorch CIFAR scripts
are: BasicBlocks of 3x3 convolutions with BatchNorm and ``ReLU(inplace=True)``, a 1x1
projection shortcut where the shape changes, global average pooling, cross-entropy with
label smoothing, SGD with momentum, Nesterov and weight decay, ``OneCycleLR`` stepped per
batch (its float lr changes at every step), a per-epoch ``CosineAnnealingLR`` run beside it
on a second optimiser for the classifier's bias, and an evaluation pass in ``eval()`` mode
with accuracy. Random 3x8x8 images stand in for CIFAR."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1,
                               bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride,
                          bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10):
        super().__init__()
        self.in_planes = 8
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = self._make_layer(block, 8, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 16, num_blocks[1], stride=2)
        self.linear = nn.Linear(16 * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = F.adaptive_avg_pool2d(out, 1)
        out = out.view(out.size(0), -1)
        return self.linear(out)


def init_weights(model, seed):
    """The same starting weights in every framework: Kaiming-normal-like draws from NumPy
    for convolutions and the classifier, BatchNorm at (1, 0), loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        shape = tuple(value.shape)
        if "num_batches_tracked" in name:
            state[name] = value
        elif name.endswith("running_var") or (len(shape) == 1 and name.endswith("weight")):
            state[name] = torch.ones(shape)
        elif len(shape) == 1:
            state[name] = torch.zeros(shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            draw = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
            state[name] = torch.tensor(draw.astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=8, epochs=2):
    torch.manual_seed(seed)
    model = ResNet(BasicBlock, [1, 1])
    init_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    n = steps * batch_size
    images = torch.tensor(rng.normal(0.0, 1.0, (n, 3, 8, 8)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 10, n), dtype=torch.long)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    head_bias = [model.linear.bias]
    body = [p for name, p in model.named_parameters() if name != "linear.bias"]
    optimizer = optim.SGD(body, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    bias_optimizer = optim.SGD(head_bias, lr=0.01, momentum=0.9)
    scheduler = optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, epochs=epochs,
                                              steps_per_epoch=steps)
    bias_scheduler = optim.lr_scheduler.CosineAnnealingLR(bias_optimizer, T_max=epochs)

    def train_step(inputs, targets):
        optimizer.zero_grad()
        bias_optimizer.zero_grad()
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        bias_optimizer.step()
        _, predicted = outputs.max(1)
        return loss, predicted.eq(targets).sum()

    if compile == "model":  # as train.py scripts do: the module keeps its methods
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, correct, lrs = [], [], []
    for _ in range(epochs):
        model.train()
        for i in range(steps):
            inputs = images[i * batch_size:(i + 1) * batch_size]
            targets = labels[i * batch_size:(i + 1) * batch_size]
            loss, hits = train_step(inputs, targets)
            losses.append(loss.item())
            correct.append(int(hits.item()))
            scheduler.step()
            lrs.append(scheduler.get_last_lr()[0])
        bias_scheduler.step()
        model.eval()
        test_loss, hits = 0.0, 0
        with torch.no_grad():
            for i in range(steps):
                inputs = images[i * batch_size:(i + 1) * batch_size]
                targets = labels[i * batch_size:(i + 1) * batch_size]
                outputs = model(inputs)
                test_loss += criterion(outputs, targets).item()
                hits += outputs.argmax(1).eq(targets).sum().item()
        losses.append(test_loss / steps)
        correct.append(hits)
    running = [float(v) for v in model.bn1.running_mean[:4]]
    return {"losses": losses, "correct": correct, "lrs": lrs, "running_mean": running}
