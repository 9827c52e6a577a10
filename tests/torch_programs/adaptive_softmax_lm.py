"""A word-level language model with an adaptive softmax over a Zipfian vocabulary, as the
WikiText-103 scripts write it: ``nn.AdaptiveLogSoftmaxWithLoss(hidden, vocab, cutoffs,
div_value=2.0)`` fed the flattened LSTM outputs and targets (its ``.loss`` trained, its
``.output`` summed into a perplexity), ``log_prob`` for the next-word distribution and
``predict`` for greedy continuation; batchified corpus windows (``narrow`` and ``view``
into columns), hidden states detached between windows (truncated backpropagation),
``clip_grad_norm_`` and ``Adagrad`` with a ``StepLR``."""
import math

import numpy as np
import torch
import torch.nn as nn

VOCAB = 40


class RNNModel(nn.Module):
    def __init__(self, vocab=VOCAB, emb=12, hidden=16):
        super().__init__()
        self.encoder = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, num_layers=1)
        self.crit = nn.AdaptiveLogSoftmaxWithLoss(hidden, vocab, cutoffs=[6, 18],
                                                  div_value=2.0)

    def forward(self, input, target, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        out = self.crit(output.view(-1, output.size(2)), target.view(-1))
        return out.output, out.loss, hidden, output


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = RNNModel()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.4, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    ranks = np.arange(1, VOCAB + 1)
    probs = (1.0 / ranks) / (1.0 / ranks).sum()
    corpus = torch.from_numpy(rng.choice(VOCAB, size=4 * (6 * steps + 1), p=probs))
    data = batchify(corpus, 4)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    net = torch.compile(model) if compile == "model" else model

    def train_step(x, y, hidden):
        optimizer.zero_grad()
        output, loss, hidden, _ = net(x, y, hidden)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss.detach(), -output.detach().sum(), hidden

    if compile is True:
        train_step = torch.compile(train_step)
    hidden = (torch.zeros(1, 4, 16), torch.zeros(1, 4, 16))
    losses, total, count = [], 0.0, 0
    for i in range(steps):
        x, y = data[6 * i:6 * i + 6], data[6 * i + 1:6 * i + 7]
        hidden = repackage_hidden(hidden)
        loss, nll, hidden = train_step(x, y, hidden)
        total, count = total + nll.item(), count + y.numel()
        losses.append(loss.item())
        scheduler.step()
    with torch.no_grad():
        _, _, _, feats = net(data[:3], data[1:4], hidden)
        last = feats[-1]
        next_logp = model.crit.log_prob(last)
        greedy = model.crit.predict(last)
    return {"losses": losses, "ppl": [math.exp(total / count)],
            "next": next_logp.flatten().tolist(), "greedy": greedy.tolist()}
