"""A hand-written layer-normalised LSTM and a gated residual head whose activations are written
in place, as custom-RNN scripts and research code do to save memory: the gate
pre-activations ``gates = self.ih(x) + self.hh(h)`` squashed by assignment to their slices
(``gates[:, 3 * H:] = torch.tanh(gates[:, 3 * H:])``, the sigmoid likewise; torch refuses
``sigmoid_()`` on one slice and ``tanh_()`` on another, the first's saved output then being
at a newer version) before ``gates.chunk(4, 1)``, the cell state normalised by
``nn.LayerNorm``; then, on the pooled features, ``x[:, :k] *= torch.sigmoid(gate)`` (a
scaled view of a projection), ``x += F.relu(self.skip(inp), inplace=True)`` (an augmented
assignment on an activation), ``x.clamp_(-3, 3)``, a copy whose first column is overwritten
(``y = x.clone(); y[:, 0] = x[:, 1:].mean(1)``), ``masked_fill_`` of padded steps' outputs
before the mean over time and ``x.mul_(2).sub_(1)`` chains. Padded batches of different
lengths, ``clip_grad_norm_``, RMSprop."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNormLSTMCell(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size, bias=False)
        self.ln_c = nn.LayerNorm(hidden_size)

    def forward(self, x, state):
        h, c = state
        H = self.hidden_size
        gates = self.ih(x) + self.hh(h)
        gates[:, 3 * H:] = torch.tanh(gates[:, 3 * H:])
        gates[:, :3 * H] = torch.sigmoid(gates[:, :3 * H])
        ingate, forgetgate, outgate, cellgate = gates.chunk(4, 1)
        c = self.ln_c(forgetgate * c + ingate * cellgate)
        h = outgate * torch.tanh(c)
        return h, (h, c)


class Model(nn.Module):
    def __init__(self, d=6, hidden=12, classes=3, k=4):
        super().__init__()
        self.cell = LayerNormLSTMCell(d, hidden)
        self.gate = nn.Linear(hidden, k)
        self.skip = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)
        self.k = k

    def forward(self, x, mask):             # x: (batch, time, d), mask: (batch, time) padded
        B, T, _ = x.shape
        h = x.new_zeros(B, self.cell.hidden_size)
        state = (h, h.clone())
        outs = []
        for t in range(T):
            h, state = self.cell(x[:, t], state)
            outs.append(h)
        hs = torch.stack(outs, 1)
        hs.masked_fill_(~mask.unsqueeze(-1), 0.0)
        feats = hs.sum(1) / mask.sum(1, keepdim=True)
        inp = F.relu(self.skip(x.sum(1) / mask.sum(1, keepdim=True)), inplace=True)
        z = self.proj(feats)
        z[:, :self.k] *= torch.sigmoid(self.gate(feats))
        z += inp
        z.clamp_(-3, 3)
        y = z.clone()
        y[:, 0] = z[:, 1:].mean(1)
        y.mul_(2).sub_(1)
        return self.out(y)


def batch_of(rng, n, T):
    y = rng.integers(0, 3, n)
    lengths = rng.integers(2, T + 1, n)
    lengths[0] = T
    x = rng.normal(0, 1, (n, T, 6)) + np.eye(3, 6)[y][:, None, :]
    mask = np.arange(T)[None, :] < lengths[:, None]
    x = x * mask[..., None]
    return (torch.from_numpy(x.astype(np.float32)), torch.from_numpy(mask),
            torch.from_numpy(y))


def main(steps=4, compile=False, seed=0, batch=12):
    rng = np.random.default_rng(seed)
    model = Model()
    model.load_state_dict({
        k: torch.from_numpy((1.0 + rng.normal(0, 0.1, tuple(v.shape)) if "ln_c.weight" in k
                             else rng.normal(0, 0.4, tuple(v.shape))).astype(np.float32))
        for k, v in model.state_dict().items()})
    optimizer = torch.optim.RMSprop(model.parameters(), lr=5e-3, alpha=0.9)
    data = [batch_of(rng, batch, 5 if i % 2 else 4) for i in range(steps)]
    net = model

    def step(x, mask, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x, mask), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, norm

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step = torch.compile(step)
    losses, norms = [], []
    for x, mask, y in data:
        loss, norm = step(x, mask, y)
        losses.append(loss.item())
        norms.append(norm.item())
    x, mask, y = batch_of(rng, 20, 5)
    with torch.no_grad():
        logits = net(x, mask)
    return {"losses": losses, "norms": norms, "logits": logits[:4].flatten().tolist(),
            "correct": [int((logits.argmax(1) == y).sum())],
            "gate": model.gate.weight[:2].flatten().tolist()}
