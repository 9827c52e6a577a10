"""Monte Carlo dropout for predictive uncertainty, as Bayesian-deep-learning tutorials write
it: a regression MLP with ``nn.Dropout`` layers and a ``LockedDropout`` over a short
sequence whose mask is drawn once per sequence from the module's own seeded
``torch.Generator`` (``torch.rand((B, 1, D), generator=self.generator) > self.p``, scaled
by ``1 / (1 - p)``). It is trained deterministically (every rate 0), then, for inference,
the rates are set from outside (``m.p = 0.25`` over ``model.modules()``), the model is put
in ``eval()`` and only its dropout modules back in training mode (``enable_dropout``, the
idiom of MC-dropout code), and ``mc_predict`` draws ``T`` stochastic forward passes in a
Python loop and stacks them for a mean and a standard deviation. Reseeding the generator
(``generator.manual_seed``) and the global seed (``torch.manual_seed``) replays the same
draws. Random draws differ between frameworks, so what is reported of them is what does
not: every pass differs from the others and from the deterministic prediction, replays
are exact, and the locked mask is shared along the sequence."""
import numpy as np
import torch
import torch.nn as nn


class LockedDropout(nn.Module):
    def __init__(self, p=0.0, seed=0):
        super().__init__()
        self.p = p
        self.generator = torch.Generator().manual_seed(seed)

    def forward(self, x):                        # x: (batch, time, features)
        if not self.training or self.p == 0.0:
            return x
        mask = torch.rand((x.shape[0], 1, x.shape[2]), generator=self.generator) > self.p
        return x * mask.float() / (1 - self.p)


class Regressor(nn.Module):
    def __init__(self, d=4, width=16):
        super().__init__()
        self.inp = nn.Linear(d, width)
        self.locked = LockedDropout()
        self.body = nn.Sequential(nn.Tanh(), nn.Dropout(p=0.0), nn.Linear(width, width),
                                  nn.Tanh(), nn.Dropout(p=0.0))
        self.out = nn.Linear(width, 1)

    def forward(self, x):                        # x: (batch, time, d)
        h = self.locked(self.inp(x))
        return self.out(self.body(h)).squeeze(-1)


def enable_dropout(model):
    for m in model.modules():
        if m.__class__.__name__.startswith("Dropout") or isinstance(m, LockedDropout):
            m.train()


def mc_predict(model, x, T=6):
    return torch.stack([model(x) for _ in range(T)])


def main(steps=4, compile=False, seed=0, batch=16):
    rng = np.random.default_rng(seed)
    model = Regressor()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.5, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    xs = [rng.normal(0, 1, (batch, 3, 4)).astype(np.float32) for _ in range(steps)]
    data = [(torch.from_numpy(x), torch.from_numpy(np.sin(x.sum(-1)).astype(np.float32)))
            for x in xs]
    net, predict = model, mc_predict

    def step(x, y):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        net = torch.compile(model)
    elif compile:
        step, predict = torch.compile(step), torch.compile(mc_predict)
    losses = [step(x, y).item() for x, y in data]
    x = torch.from_numpy(rng.normal(0, 1, (8, 3, 4)).astype(np.float32))
    model.eval()
    with torch.no_grad():
        deterministic = net(x)
        for m in model.modules():
            if isinstance(m, (nn.Dropout, LockedDropout)):
                m.p = 0.25
        enable_dropout(model)
        torch.manual_seed(123)
        model.locked.generator.manual_seed(7)
        samples = predict(net, x)
        again = predict(net, x)
        torch.manual_seed(123)
        model.locked.generator.manual_seed(7)
        replay = predict(net, x)
        h = model.locked(model.inp(x))
    distinct = len({tuple(np.round(s.numpy(), 5).ravel().tolist()) for s in samples})
    zeros = (h == 0).numpy()
    return {"losses": losses, "deterministic": deterministic.flatten().tolist(),
            "distinct_passes": [distinct],
            "all_differ_from_deterministic": [
                int((samples != deterministic).flatten(1).any(1).all())],
            "replay_exact": [int(torch.equal(samples, replay))],
            "next_draws_differ": [int(not torch.equal(samples, again))],
            "std_positive": [int((samples.std(0) > 0).all())],
            "mask_locked_in_time": [int((zeros == zeros[:, :1]).all()) if zeros.any() else 0],
            "flags": [int(model.training), int(model.body[1].training),
                      int(model.locked.training)]}
