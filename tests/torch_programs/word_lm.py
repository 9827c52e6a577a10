"""Word-level language models and their training loop, written the way the classic PyTorch
example is: an LSTM model (tied encoder/decoder weights) whose hidden state is carried
across batches and detached between them (truncated backpropagation through time), and a
Transformer encoder model with a causal mask; both trained by hand-written SGD
(``p.data.add_(p.grad, alpha=-lr)``) after ``clip_grad_norm_``, the learning rate divided
when the validation loss stops improving. Dropout is 0 so every framework computes the same
losses."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.decoder.weight = self.encoder.weight  # tied: ninp == nhid
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return x + self.pe[:x.size(0), :]


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers):
        super().__init__()
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            self.src_mask = nn.Transformer.generate_square_subsequent_mask(len(src))
        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, self.src_mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def init_weights(model, seed):
    """The same starting weights in every framework: drawn with NumPy, copied in."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(torch.tensor(rng.uniform(-0.1, 0.1, tuple(p.shape)).astype(np.float32)))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data[:nbatch * bsz]
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def train_model(kind, steps, compile, seed, ntokens=50, bsz=4, bptt=6):
    rng = np.random.default_rng(seed + 1)
    corpus = torch.tensor(rng.integers(0, ntokens, (steps + 2) * bsz * bptt), dtype=torch.long)
    train_data = batchify(corpus, bsz)
    val_data = batchify(corpus[: 3 * bsz * bptt], bsz)
    if kind == "lstm":
        model = RNNModel(ntokens, 16, 16, 2)
    else:
        model = TransformerModel(ntokens, 16, 2, 32, 2)
    init_weights(model, seed)
    criterion = nn.NLLLoss()
    lr, clip = 5.0, 0.25

    def train_step(data, targets, hidden, lr):
        model.zero_grad()
        if kind == "lstm":
            output, hidden = model(data, hidden)
        else:
            output = model(data).view(-1, ntokens)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        return loss, hidden

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(bsz) if kind == "lstm" else None
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, bptt):
                data, targets = get_batch(data_source, i, bptt)
                if kind == "lstm":
                    output, hidden = model(data, hidden)
                    hidden = repackage_hidden(hidden)
                else:
                    output = model(data).view(-1, ntokens)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    if compile == "model":  # as train.py scripts do: the module keeps its methods
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, best_val_loss = [], None
    half = steps // 2
    for epoch in range(2):
        model.train()
        hidden = model.init_hidden(bsz) if kind == "lstm" else None
        for batch in range(half):
            data, targets = get_batch(train_data, (epoch * half + batch) * bptt, bptt)
            if kind == "lstm":
                hidden = repackage_hidden(hidden)
            loss, hidden = train_step(data, targets, hidden, lr)
            losses.append(loss.item())
        val_loss = evaluate(val_data)
        losses.append(val_loss)
        if best_val_loss is None or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            lr /= 4.0
    return losses


def main(steps=10, compile=False, seed=0):
    return {"losses": train_model("lstm", steps, compile, seed),
            "transformer_losses": train_model("transformer", steps, compile, seed)}
