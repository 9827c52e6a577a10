"""An MNIST-style convolutional classifier and its training loop, written the way the
classic PyTorch example is: two convolutions, max pooling, dropout, log_softmax with
nll_loss, Adadelta and StepLR stepped once per epoch, and a test pass counting correct
predictions. Random 28x28 images stand in for MNIST (no download). Dropout is off (p=0) so
that every framework computes the same losses; the layers are still there."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, drop=0.0):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(drop)
        self.dropout2 = nn.Dropout(drop)
        self.fc1 = nn.Linear(16 * 12 * 12, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, value in model.state_dict().items():
        fan_in = int(np.prod(value.shape[1:])) if value.dim() > 1 else value.shape[0]
        draw = rng.uniform(-1.0, 1.0, tuple(value.shape)) / np.sqrt(fan_in)
        state[name] = torch.tensor(draw.astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=8, epochs=2):
    torch.manual_seed(seed)
    model = Net()
    init_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    images = rng.normal(0.0, 1.0, (steps * batch_size, 1, 28, 28))
    images = torch.tensor(images, dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 10, steps * batch_size), dtype=torch.long)
    train_loader = DataLoader(TensorDataset(images, labels), batch_size=batch_size)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    def train_step(data, target):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":  # as train.py scripts do: the module keeps its methods
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, correct = [], []
    for _ in range(epochs):
        model.train()
        for data, target in train_loader:
            losses.append(train_step(data, target).item())
        model.eval()
        test_loss, hits = 0.0, 0
        with torch.no_grad():
            for data, target in train_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                hits += pred.eq(target.view_as(pred)).sum().item()
        losses.append(test_loss / len(train_loader.dataset))
        correct.append(hits)
        scheduler.step()
    return {"losses": losses, "correct": correct}
