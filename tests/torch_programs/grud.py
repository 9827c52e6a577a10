"""GRU-D for irregularly sampled multivariate time series with missing values, written
the way the GRU-D re-implementations are: inputs given as values, an observation mask and
the time since each variable was last seen; learned decay rates ``gamma = exp(-relu(W
delta + b))`` (the input decay a diagonal ``nn.Linear`` whose weight is masked in place by
``weight.data.mul_(torch.eye(...))`` after each step, as the code keeps it diagonal); the
missing inputs imputed as ``m * x + (1 - m) * (gamma_x * x_last + (1 - gamma_x) *
x_mean)`` with ``x_last`` carried forward by ``torch.where(m.bool(), x, x_last)``; a
hand-written GRU cell over ``torch.cat([x, h * gamma_h, m], 1)`` with ``torch.sigmoid`` /
``torch.tanh`` gates; a per-sample loop over ``x.unbind(1)``; the empirical means as a
buffer from ``(x * m).sum(0) / m.sum(0).clamp(min=1)``; and a masked imputation loss
(``((pred - target) ** 2 * mask).sum() / mask.sum()``) added to a binary classification
loss, trained with ``Adam(amsgrad=True)`` and ``clip_grad_value_``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GRUD(nn.Module):
    def __init__(self, n_vars, hidden, x_mean):
        super().__init__()
        self.n_vars, self.hidden = n_vars, hidden
        self.register_buffer("x_mean", x_mean)
        self.identity = torch.eye(n_vars)
        self.decay_x = nn.Linear(n_vars, n_vars)
        self.decay_h = nn.Linear(n_vars, hidden)
        combined = 2 * n_vars + hidden
        self.zl, self.rl, self.hl = (nn.Linear(combined, hidden) for _ in range(3))
        self.impute = nn.Linear(hidden, n_vars)
        self.classify = nn.Linear(hidden, 1)

    def keep_diagonal(self):
        self.decay_x.weight.data.mul_(self.identity)

    def step(self, x, x_last, m, delta, h):
        gamma_x = torch.exp(-torch.relu(self.decay_x(delta)))
        gamma_h = torch.exp(-torch.relu(self.decay_h(delta)))
        x_hat = m * x + (1 - m) * (gamma_x * x_last + (1 - gamma_x) * self.x_mean)
        h = h * gamma_h
        combined = torch.cat((x_hat, h, m), 1)
        z = torch.sigmoid(self.zl(combined))
        r = torch.sigmoid(self.rl(combined))
        h_tilde = torch.tanh(self.hl(torch.cat((x_hat, r * h, m), 1)))
        return (1 - z) * h + z * h_tilde

    def forward(self, values, masks, deltas):
        B = values.size(0)
        h = torch.zeros(B, self.hidden)
        x_last = self.x_mean.expand(B, -1).clone()
        preds = []
        for x, m, d in zip(values.unbind(1), masks.unbind(1), deltas.unbind(1)):
            preds.append(self.impute(h))
            h = self.step(x, x_last, m, d, h)
            x_last = torch.where(m.bool(), x, x_last)
        return torch.stack(preds, 1), self.classify(h).squeeze(-1)


def make_series(rng, n, T=6, V=3):
    t = np.cumsum(rng.uniform(0.5, 1.5, (n, T)), 1)
    values = np.sin(t[..., None] * np.arange(1, V + 1)) + 0.1 * rng.standard_normal((n, T, V))
    masks = (rng.random((n, T, V)) < 0.6).astype(np.float32)
    masks[:, 0] = 1.0
    deltas = np.zeros((n, T, V), np.float32)
    for k in range(1, T):
        gap = (t[:, k] - t[:, k - 1])[:, None]
        deltas[:, k] = np.where(masks[:, k - 1] > 0, gap, gap + deltas[:, k - 1])
    labels = (values[:, :, 0].mean(1) > 0).astype(np.float32)
    return [torch.tensor(a.astype(np.float32)) for a in (values * masks, masks, deltas, labels)]


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: (torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
            if k != "x_mean" else v)
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, batch=5):
    rng = np.random.default_rng(seed + 1)
    data = [make_series(rng, batch) for _ in range(steps)]
    x, m = data[0][0], data[0][1]
    x_mean = (x * m).sum((0, 1)) / m.sum((0, 1)).clamp(min=1)
    model = GRUD(3, 8, x_mean)
    init_weights(model, seed)
    model.keep_diagonal()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, amsgrad=True)

    def train_step(values, masks, deltas, labels):
        preds, logits = model(values, masks, deltas)
        recon = ((preds - values) ** 2 * masks).sum() / masks.sum()
        loss = F.binary_cross_entropy_with_logits(logits, labels) + recon
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        optimizer.step()
        model.keep_diagonal()
        return loss, recon

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, recons = [], []
    for batch_data in data:
        loss, recon = train_step(*batch_data)
        losses.append(loss.item())
        recons.append(recon.item())
    with torch.no_grad():
        _, logits = model(*data[0][:3])
    return {"losses": losses, "recons": recons, "probs": torch.sigmoid(logits).tolist(),
            "decay_diag": model.decay_x.weight.detach().flatten().tolist()}
