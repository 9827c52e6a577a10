"""Transfer learning with a partial state-dict load, as fine-tuning scripts do it: a
classifier is pretrained with label smoothing written by hand (``log_softmax``, ``gather``
of the target's log-probability, the mean over classes); halfway its ``state_dict()`` goes
through ``torch.save`` into an ``io.BytesIO`` and back with ``torch.load``, and the
optimiser's ``state_dict()`` too, both loaded into the running model and optimiser before
training goes on (the round trip must change nothing). A new model with the same backbone,
an adapter and a head for fewer classes takes the weights whose names and shapes match
(``{k: v for k, v in sd.items() if k in own and own[k].shape == v.shape}``) with
``load_state_dict(..., strict=False)``, whose ``missing_keys``/``unexpected_keys`` are
reported, as are those of a load with renamed keys and the size mismatches that
``strict=False`` does not excuse. It is fine-tuned with a focal loss
written with ``gather`` and per-class ``alpha[y]`` weights, by SGD with two parameter
groups (a lower learning rate for the backbone), its first layer frozen with
``requires_grad_(False)`` for the first steps."""
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, classes, adapter=False):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(12, 24), nn.LayerNorm(24), nn.GELU(),
                                      nn.Linear(24, 24), nn.GELU())
        self.adapter = nn.Linear(24, 24) if adapter else nn.Identity()
        self.head = nn.Linear(24, classes)

    def forward(self, x):
        return self.head(self.adapter(self.backbone(x)))


def smoothed_ce(logits, target, eps=0.1):
    logp = F.log_softmax(logits, dim=-1)
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    return ((1 - eps) * nll - eps * logp.mean(-1)).mean()


def focal(logits, target, alpha, gamma=2.0):
    logp_t = F.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
    return (-alpha[target] * (1 - logp_t.exp()) ** gamma * logp_t).mean()


def batch(rng, classes, n=24):
    x = rng.normal(size=(n, 12)).astype(np.float32)
    y = (np.abs(x[:, :classes]).argmax(1) + (x[:, -1] > 1)) % classes
    return torch.from_numpy(x), torch.from_numpy(y)


def init(rng, model):
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})


def trainer(model, optimizer, loss_fn, compile):
    net = torch.compile(model) if compile == "model" else model

    def step(x, y):
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return torch.compile(step) if compile is True else step


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Net(6)
    init(rng, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = trainer(model, optimizer, smoothed_ce, compile)
    losses = [step(*batch(rng, 6)).item() for _ in range(steps)]
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    losses += [step(*batch(rng, 6)).item() for _ in range(steps)]

    new = Net(4, adapter=True)
    init(rng, new)
    own = new.state_dict()
    sd = checkpoint["model"]
    matching = {k: v for k, v in sd.items() if k in own and own[k].shape == v.shape}
    loaded = new.load_state_dict(matching, strict=False)
    try:   # (strict=False does not excuse a shape mismatch)
        Net(4).load_state_dict(sd, strict=False)
        mismatched = []
    except RuntimeError as e:
        mismatched = [line.split(":")[0].strip() for line in str(e).splitlines()[1:]]
    renamed = Net(4).load_state_dict({k.replace("backbone.", "encoder."): v
                                      for k, v in sd.items() if "head" not in k}, strict=False)
    same = bool(torch.equal(new.backbone[3].weight, model.backbone[3].weight))
    optimizer = torch.optim.SGD([{"params": new.backbone.parameters(), "lr": 1e-3},
                                 {"params": list(new.adapter.parameters())
                                  + list(new.head.parameters())}], lr=5e-2, momentum=0.9)
    alpha = torch.tensor([0.25, 0.5, 0.75, 1.0])
    new.backbone[0].requires_grad_(False)
    step = trainer(new, optimizer, lambda logits, y: focal(logits, y, alpha), compile)
    tuned = []
    for i in range(2 * steps):
        if i == steps:
            new.backbone[0].requires_grad_(True)
        tuned.append(step(*batch(rng, 4)).item())
    return {"losses": losses, "tuned": tuned,
            "missing": [sorted(loaded.missing_keys)], "unexpected": [len(loaded.unexpected_keys)],
            "renamed_missing": [sorted(renamed.missing_keys)],
            "renamed_unexpected": [sorted(renamed.unexpected_keys)], "copied": [same],
            "mismatched": [mismatched],
            "first_layer": new.backbone[0].weight.flatten()[:20].tolist()}
