"""Missing-data imputation as GAIN's PyTorch ports write it, on a table with NaNs: the
observed mask from ``~torch.isnan(x)``, the holes filled by ``torch.nan_to_num(x, nan=0.0)``
and then, in place, by noise (``x_in[miss] = noise[miss]``); a generator and a discriminator
that reads the imputed table and a hint (``hint = mask.clone(); hint[reveal] = 0.5``);
the imputed table ``torch.where(mask.bool(), x, g)``; losses over observed entries only
(``* mask`` and a count), a per-column error table accumulated with
``index_put_(..., accumulate=True)``, the discriminator's weights clipped through
``p.data.clamp_(-c, c)`` after each of its steps, gradients guarded by
``p.grad.nan_to_num_()`` and the loss by ``torch.where(torch.isfinite(loss), ...)``, and the
final table filled with ``masked_scatter_``. The columns are correlated, so the holes can be
predicted from what is observed."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Generator(nn.Module):
    def __init__(self, dim, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim * 2, hidden), nn.PReLU(hidden),
                                 nn.Linear(hidden, hidden), nn.Mish(),
                                 nn.Linear(hidden, dim))

    def forward(self, x, m):
        return torch.sigmoid(self.net(torch.cat([x, m], dim=1)))


class Discriminator(nn.Module):
    def __init__(self, dim, hidden=16):
        super().__init__()
        self.fc1 = nn.Linear(dim * 2, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x, h):
        return self.fc2(F.leaky_relu(self.fc1(torch.cat([x, h], dim=1)), 0.2))


def table(rng, n, dim=6, missing=0.25):
    """Rows in [0, 1] from two latent factors; a quarter of the cells missing (NaN)."""
    z = rng.normal(size=(n, 2))
    mix = rng.normal(size=(2, dim))
    full = 1 / (1 + np.exp(-(z @ mix + 0.1 * rng.normal(size=(n, dim)))))
    data = full.copy()
    data[rng.random((n, dim)) < missing] = np.nan
    return torch.tensor(data, dtype=torch.float32), torch.tensor(full, dtype=torch.float32)


def init_weights(module, rng):
    for name, p in module.named_parameters():
        if p.dim() > 1:
            p.data.copy_(torch.from_numpy(rng.normal(0, 1 / np.sqrt(p.shape[1]), tuple(p.shape))
                                          .astype(np.float32)))
        elif "net.1" not in name:
            p.data.zero_()


def main(steps=10, compile=False, seed=0, batch=32, alpha=10.0, clip=0.5):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    data, truth = table(rng, 160)
    dim = data.shape[1]
    G, D = Generator(dim), Discriminator(dim)
    init_weights(G, rng)
    init_weights(D, rng)
    opt_G = torch.optim.Adam(G.parameters(), lr=5e-3)
    opt_D = torch.optim.RMSprop(D.parameters(), lr=5e-3)
    batches = []
    for _ in range(steps):
        idx = torch.from_numpy(rng.choice(len(data), batch, replace=False))
        noise = torch.from_numpy(rng.uniform(0, 0.01, (batch, dim)).astype(np.float32))
        reveal = torch.from_numpy(rng.random((batch, dim)) < 0.9)
        batches.append((idx, noise, reveal))
    gen = G

    def step(x, noise, reveal):
        mask = (~torch.isnan(x)).float()
        x = torch.nan_to_num(x, nan=0.0)
        x_in = x.clone()
        miss = mask == 0
        x_in[miss] = noise[miss]
        hint = mask.clone()
        hint[reveal] = 0.5
        hint = torch.where(reveal, hint, mask)
        g = gen(x_in, mask)
        x_hat = torch.where(mask.bool(), x, g)

        opt_D.zero_grad()
        d_prob = torch.sigmoid(D(x_hat.detach(), hint))
        loss_D = -torch.mean(mask * torch.log(d_prob + 1e-8)
                             + (1 - mask) * torch.log(1 - d_prob + 1e-8))
        loss_D.backward()
        for p in D.parameters():
            p.grad.nan_to_num_(nan=0.0, posinf=1.0, neginf=-1.0)
        opt_D.step()
        for p in D.parameters():
            p.data.clamp_(-clip, clip)

        opt_G.zero_grad()
        d_prob = torch.sigmoid(D(x_hat, hint))
        loss_adv = -torch.mean((1 - mask) * torch.log(d_prob + 1e-8))
        loss_mse = torch.sum((mask * x_in - mask * g) ** 2) / torch.sum(mask)
        loss_G = loss_adv + alpha * loss_mse
        loss_G = torch.where(torch.isfinite(loss_G), loss_G, torch.zeros_like(loss_G))
        loss_G.backward()
        opt_G.step()
        return loss_D, loss_mse

    if compile == "model":
        gen = torch.compile(G)
    elif compile:
        step = torch.compile(step)
    d_losses, mse = [], []
    for idx, noise, reveal in batches:
        loss_D, loss_mse = step(data[idx], noise, reveal)
        d_losses.append(loss_D.item())
        mse.append(loss_mse.item())
    with torch.no_grad():
        mask = ~torch.isnan(data)
        x = torch.nan_to_num(data)
        g = G(x, mask.float())
        filled = x.clone()
        filled.masked_scatter_(~mask, g[~mask])
        err = (filled - truth) ** 2
        rows, cols = torch.nonzero(~mask, as_tuple=True)
        per_col = torch.zeros(dim)
        per_col.index_put_((cols,), err[rows, cols], accumulate=True)
        counts = torch.zeros(dim, dtype=torch.long).index_put_((cols,), torch.ones_like(cols),
                                                              accumulate=True)
        rmse = torch.sqrt(per_col / counts.clamp(min=1))
    return {"losses": mse, "d_losses": d_losses, "rmse": rmse.tolist(),
            "holes": counts.tolist(), "filled": filled[:3].flatten().tolist(),
            "d_weight_max": [max(p.abs().max().item() for p in D.parameters())]}
