"""A temporal convolutional network on the adding problem, written the way the TCN
reference code is: ``TemporalBlock``s of two dilated causal ``nn.Conv1d``s, each wrapped in
``nn.utils.weight_norm`` and followed by a ``Chomp1d`` module that cuts the right padding
with ``x[:, :, :-self.chomp_size].contiguous()``, ReLU and dropout in an ``nn.Sequential``,
a 1x1 ``downsample`` convolution on the residual when the widths differ, dilations
``2 ** i``, a custom ``init_weights`` that calls ``weight.data.normal_(0, 0.01)``, a last
linear layer on ``y1[:, :, -1]``, MSE, Adam, ``clip_grad_norm_`` and a ``no_grad``
evaluation. Dropout is 0 so that every framework computes the same losses."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import weight_norm


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.0):
        super().__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size, stride=stride,
                                           padding=padding, dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)
        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size, stride=stride,
                                           padding=padding, dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)
        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()
        self.init_weights()

    def init_weights(self):
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=2, dropout=0.0):
        super().__init__()
        layers = []
        for i in range(len(num_channels)):
            dilation_size = 2 ** i
            in_channels = num_inputs if i == 0 else num_channels[i - 1]
            out_channels = num_channels[i]
            layers += [TemporalBlock(in_channels, out_channels, kernel_size, stride=1,
                                     dilation=dilation_size,
                                     padding=(kernel_size - 1) * dilation_size,
                                     dropout=dropout)]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


class TCN(nn.Module):
    def __init__(self, input_size, output_size, num_channels, kernel_size, dropout):
        super().__init__()
        self.tcn = TemporalConvNet(input_size, num_channels, kernel_size=kernel_size,
                                   dropout=dropout)
        self.linear = nn.Linear(num_channels[-1], output_size)
        self.linear.weight.data.normal_(0, 0.01)

    def forward(self, x):
        y1 = self.tcn(x)
        return self.linear(y1[:, :, -1])


def data_generator(rng, n, seq_length):
    """The adding problem: a row of random values and a row marking two of them, whose sum
    is the target."""
    x_num = rng.uniform(0, 1, (n, 1, seq_length))
    x_mask = np.zeros((n, 1, seq_length))
    y = np.zeros((n, 1))
    for i in range(n):
        positions = rng.choice(seq_length, size=2, replace=False)
        x_mask[i, 0, positions] = 1
        y[i, 0] = x_num[i, 0, positions].sum()
    x = np.concatenate((x_num, x_mask), axis=1)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor((rng.uniform(-0.5, 0.5, tuple(v.shape))
                            + (1.0 if name.endswith("weight_g") else 0.0)).astype(np.float32))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, seq_length=24, batch_size=8):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    X_train, Y_train = data_generator(rng, steps * batch_size, seq_length)
    X_test, Y_test = data_generator(rng, 16, seq_length)
    model = TCN(2, 1, [8, 8, 6], kernel_size=3, dropout=0.0)
    init_weights(model, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=4e-3)

    def train_step(x, y):
        optimizer.zero_grad()
        output = model(x)
        loss = F.mse_loss(output, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, test_losses = [], []
    for i in range(0, X_train.size(0), batch_size):
        model.train()
        x, y = X_train[i:i + batch_size], Y_train[i:i + batch_size]
        losses.append(train_step(x, y).item())
        model.eval()
        with torch.no_grad():
            output = model(X_test)
            test_losses.append(F.mse_loss(output, Y_test).item())
    return {"losses": losses, "test_losses": test_losses,
            "prediction": output[:4, 0].tolist()}
