"""Sine-wave sequence prediction with stacked ``nn.LSTMCell`` layers, written the way the
PyTorch time-sequence-prediction example is: the model in float64 (``.double()``), the
input split into time steps with ``input.split(1, dim=1)``, hidden states made with
``torch.zeros(input.size(0), ...)``, a Python loop over the steps and a second loop that
feeds predictions back for ``future`` steps, ``torch.cat(outputs, dim=1)``, MSE, the
L-BFGS optimiser with a ``closure`` that zeroes, evaluates and backpropagates, and a
``no_grad`` test pass. The compiled form wraps the closure, which L-BFGS calls several
times per step."""
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class Sequence(nn.Module):
    def __init__(self, hidden=12):
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for _ in range(future):  # predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, loaded by name."""
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        name: torch.tensor(rng.uniform(-0.3, 0.3, tuple(v.shape)))
        for name, v in model.state_dict().items()})


def main(steps=10, compile=False, seed=0, length=16, future=4):
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    x = np.arange(length)[None, :] + rng.integers(-8, 8, (6, 1))
    data = np.sin(x / 3.0).astype("float64")
    input = torch.from_numpy(data[2:, :-1])
    target = torch.from_numpy(data[2:, 1:])
    test_input = torch.from_numpy(data[:2, :-1])
    test_target = torch.from_numpy(data[:2, 1:])
    seq = Sequence()
    seq.double()
    init_weights(seq, seed)
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.5, max_iter=4)

    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        loss.backward()
        return loss

    if compile == "model":
        seq = torch.compile(seq)
    elif compile:
        closure = torch.compile(closure)
    losses, test_losses = [], []
    for i in range(max(1, steps // 3)):
        losses.append(float(optimizer.step(closure)))
        with torch.no_grad():
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            test_losses.append(loss.item())
        y = pred.detach().numpy()
    return {"losses": losses, "test_losses": test_losses, "last_prediction": y[0].tolist()}
