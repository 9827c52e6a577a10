"""An image classifier that reads each image row by row with an LSTM, written the way the
PyTorch MNIST-RNN example is: ``input.reshape(-1, 28, 28)`` into an ``nn.LSTM(input_size=28,
hidden_size=..., batch_first=True)``, the last time step ``output[:, -1, :]``,
``nn.BatchNorm1d``, ``nn.Dropout``, two ``nn.Linear``s with ``F.relu`` between,
``F.log_softmax`` and ``F.nll_loss``, Adadelta with ``StepLR(step_size=1, gamma=0.7)``
stepped per epoch, a test pass under ``no_grad`` summing ``F.nll_loss(...,
reduction='sum').item()`` and counting ``pred.eq(target.view_as(pred)).sum().item()``.
Images are 12x12 and drawn from NumPy; dropout is 0 so that every framework computes the
same losses."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self, side=12, hidden=16):
        super().__init__()
        self.side = side
        self.rnn = nn.LSTM(input_size=side, hidden_size=hidden, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(hidden)
        self.dropout1 = nn.Dropout2d(0.0)
        self.dropout2 = nn.Dropout(0.0)
        self.fc1 = nn.Linear(hidden, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, input):
        input = input.reshape(-1, self.side, self.side)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, v in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            state[name] = v
        elif name.startswith("batchnorm") and name.endswith(("weight", "running_var")):
            state[name] = torch.ones(v.shape)
        else:
            state[name] = torch.tensor(rng.uniform(-0.3, 0.3, tuple(v.shape)).astype(np.float32))
    model.load_state_dict(state)


def main(steps=10, compile=False, seed=0, batch_size=16, side=12):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    prototypes = rng.normal(0, 1, (10, 1, side, side))
    labels = rng.integers(0, 10, (steps + 2) * batch_size)
    images = (prototypes[labels] + rng.normal(0, 0.8, (len(labels), 1, side, side)))
    data = torch.from_numpy(images.astype(np.float32))
    target = torch.from_numpy(labels)
    model = Net(side)
    init_weights(model, seed)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    def train_step(data, target):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, test_losses, corrects = [], [], []
    per_epoch = max(1, steps // 3)
    n_train = steps * batch_size
    for epoch in range(3):
        model.train()
        for batch_idx in range(per_epoch):
            i = (epoch * per_epoch + batch_idx) % steps * batch_size
            losses.append(train_step(data[i:i + batch_size], target[i:i + batch_size]).item())
        model.eval()
        test_loss, correct = 0, 0
        with torch.no_grad():
            for i in range(n_train, len(target), batch_size):
                output = model(data[i:i + batch_size])
                test_loss += F.nll_loss(output, target[i:i + batch_size], reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target[i:i + batch_size].view_as(pred)).sum().item()
        test_losses.append(test_loss / (len(target) - n_train))
        corrects.append(correct)
        scheduler.step()
    return {"losses": losses, "test_losses": test_losses, "correct": corrects}
