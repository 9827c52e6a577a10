"""An AWD-LSTM-style word language model, written the way the Salesforce code and its
descendants are: ``WeightDrop`` deletes the LSTM's ``weight_hh_l0`` from
``module._parameters``, registers it again as ``weight_hh_l0_raw`` and, before each
forward, assigns the masked matrix back with ``setattr(self.module, name, w)`` (DropConnect
on the recurrent weights); ``LockedDropout`` (variational dropout: one mask per sequence,
broadcast over time, ``x.new_ones``-shaped and divided by the keep probability), embedding
dropout that zeroes whole rows of the embedding matrix and calls ``F.embedding`` with
``padding_idx``; the masks come from a seeded NumPy generator (torch's own RNG would draw
other numbers than dualgraph's); hidden state carried across batches and detached by a
recursive ``repackage_hidden``; tied encoder/decoder weights; activation regularisation
(AR) and temporal activation regularisation (TAR) on the last layer's outputs; and
``torch.optim.ASGD`` with ``clip_grad_norm_``, evaluation under ``model.eval()``."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class WeightDrop(nn.Module):
    def __init__(self, module, weights, dropout, rng):
        super().__init__()
        self.module, self.weights, self.dropout, self.rng = module, weights, dropout, rng
        for name_w in self.weights:
            w = getattr(self.module, name_w)
            del self.module._parameters[name_w]
            self.module.register_parameter(name_w + "_raw", nn.Parameter(w.data))

    def _setweights(self):
        for name_w in self.weights:
            raw_w = getattr(self.module, name_w + "_raw")
            if self.training:
                keep = (self.rng.random(tuple(raw_w.shape)) >= self.dropout).astype(np.float32)
                w = raw_w * torch.from_numpy(keep) / (1 - self.dropout)
            else:
                w = raw_w * 1.0
            setattr(self.module, name_w, w)

    def forward(self, *args):
        self._setweights()
        return self.module.forward(*args)


class LockedDropout(nn.Module):
    def __init__(self, rng):
        super().__init__()
        self.rng = rng

    def forward(self, x, dropout=0.5):
        if not self.training or not dropout:
            return x
        keep = (self.rng.random((1, x.size(1), x.size(2))) >= dropout).astype(np.float32)
        mask = x.new_ones(1, x.size(1), x.size(2)) * torch.from_numpy(keep) / (1 - dropout)
        return mask.expand_as(x) * x


def embedded_dropout(embed, words, dropout, rng):
    keep = (rng.random((embed.weight.size(0), 1)) >= dropout).astype(np.float32)
    mask = embed.weight.new_ones((embed.weight.size(0), 1)) * torch.from_numpy(keep)
    masked = mask.expand_as(embed.weight) * embed.weight / (1 - dropout)
    return F.embedding(words, masked, embed.padding_idx)


class RNNModel(nn.Module):
    def __init__(self, ntoken=25, ninp=12, nhid=16, rng=None):
        super().__init__()
        self.rng = rng
        self.lockdrop = LockedDropout(rng)
        self.encoder = nn.Embedding(ntoken, ninp, padding_idx=0)
        self.rnns = nn.ModuleList([
            WeightDrop(nn.LSTM(ninp, nhid), ["weight_hh_l0"], 0.3, rng),
            WeightDrop(nn.LSTM(nhid, ninp), ["weight_hh_l0"], 0.3, rng)])
        self.decoder = nn.Linear(ninp, ntoken)
        self.decoder.weight = self.encoder.weight

    def forward(self, words, hidden):
        emb = (embedded_dropout(self.encoder, words, 0.1, self.rng) if self.training
               else self.encoder(words))
        output = self.lockdrop(emb, 0.2)
        new_hidden, raw_outputs = [], []
        for layer, rnn in enumerate(self.rnns):
            output, h = rnn(output, hidden[layer])
            new_hidden.append(h)
            raw_outputs.append(output)
            if layer != len(self.rnns) - 1:
                output = self.lockdrop(output, 0.25)
        dropped = self.lockdrop(output, 0.3)
        return self.decoder(dropped), new_hidden, raw_outputs[-1], dropped

    def init_hidden(self, bsz):
        return [(torch.zeros(1, bsz, 16), torch.zeros(1, bsz, 16)),
                (torch.zeros(1, bsz, 12), torch.zeros(1, bsz, 12))]


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return type(h)(repackage_hidden(v) for v in h)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32))
        for k, v in model.state_dict().items()})


def main(steps=6, compile=False, seed=0, bptt=5, batch=3):
    model = RNNModel(rng=np.random.default_rng(seed + 2))
    init_weights(model, seed)
    optimizer = torch.optim.ASGD(model.parameters(), lr=0.5, t0=0, lambd=0.0)
    rng = np.random.default_rng(seed + 1)
    stream = torch.tensor(rng.integers(1, 25, (steps * bptt + 1, batch)))

    def train_step(x, y, hidden):
        output, hidden, raw, dropped = model(x, hidden)
        loss = F.cross_entropy(output.view(-1, output.size(-1)), y.reshape(-1))
        loss = loss + 2.0 * dropped.pow(2).mean() + 1.0 * (raw[1:] - raw[:-1]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        return loss, hidden

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    hidden, losses = model.init_hidden(batch), []
    model.train()
    for s in range(steps):
        x, y = stream[s * bptt:(s + 1) * bptt], stream[s * bptt + 1:(s + 1) * bptt + 1]
        hidden = repackage_hidden(hidden)
        loss, hidden = train_step(x, y, hidden)
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        output, _, _, _ = model(stream[:bptt], model.init_hidden(batch))
        eval_loss = F.cross_entropy(output.view(-1, 25), stream[1:bptt + 1].reshape(-1))
    return {"losses": losses, "eval_loss": [eval_loss.item()]}
