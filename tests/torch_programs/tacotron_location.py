"""A Tacotron 2-style decoder with location-sensitive attention, written the way NVIDIA's
implementation is: ``get_mask_from_lengths`` by ``torch.arange(0, max_len, out=...)``-free
``torch.arange`` against ``lengths.unsqueeze(1)``, a ``LocationLayer`` (a ``Conv1d`` over
the previous and cumulative attention weights stacked by ``torch.cat((w.unsqueeze(1),
cum.unsqueeze(1)), dim=1)``, then a bias-free ``LinearNorm``), energies ``self.v(torch.tanh(
processed_query + processed_attention_weights + processed_memory))``, padded encoder steps
filled with ``-float("inf")`` by ``alignment.data.masked_fill_(mask, self.score_mask_value)``,
``nn.LSTMCell`` attention and decoder RNNs stepped in a Python loop with teacher forcing
(``decoder_inputs.transpose(0, 1)`` and a ``go`` frame from ``memory.data.new(...)
.zero_()``), ``attention_weights_cum += attention_weights``, outputs gathered in lists and
``torch.stack(...).transpose(0, 1).contiguous()``, a gate (stop token) predicted per frame
and trained with ``BCEWithLogitsLoss``, ``MSELoss`` on the frames, the gate targets and
frames masked with ``masked_fill_`` by the output lengths; ``Adam`` with weight decay and
``clip_grad_norm_``; the alignments' diagonality reported by ``argmax``."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_mask_from_lengths(lengths, max_len=None):
    max_len = int(torch.max(lengths).item()) if max_len is None else max_len
    ids = torch.arange(0, max_len, dtype=lengths.dtype)
    return ids < lengths.unsqueeze(1)


class LinearNorm(nn.Module):
    def __init__(self, in_dim, out_dim, bias=True):
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim, bias=bias)

    def forward(self, x):
        return self.linear_layer(x)


class LocationLayer(nn.Module):
    def __init__(self, filters, kernel_size, attention_dim):
        super().__init__()
        self.location_conv = nn.Conv1d(2, filters, kernel_size, padding=(kernel_size - 1) // 2,
                                       bias=False)
        self.location_dense = LinearNorm(filters, attention_dim, bias=False)

    def forward(self, attention_weights_cat):
        processed_attention = self.location_conv(attention_weights_cat)
        return self.location_dense(processed_attention.transpose(1, 2))


class Attention(nn.Module):
    def __init__(self, rnn_dim, embedding_dim, attention_dim, filters=4, kernel_size=3):
        super().__init__()
        self.query_layer = LinearNorm(rnn_dim, attention_dim, bias=False)
        self.memory_layer = LinearNorm(embedding_dim, attention_dim, bias=False)
        self.v = LinearNorm(attention_dim, 1, bias=False)
        self.location_layer = LocationLayer(filters, kernel_size, attention_dim)
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query, processed_memory, attention_weights_cat):
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(torch.tanh(processed_query + processed_attention_weights
                                     + processed_memory))
        return energies.squeeze(-1)

    def forward(self, attention_hidden_state, memory, processed_memory,
                attention_weights_cat, mask):
        alignment = self.get_alignment_energies(attention_hidden_state, processed_memory,
                                                attention_weights_cat)
        if mask is not None:
            alignment.data.masked_fill_(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory).squeeze(1)
        return attention_context, attention_weights


class Decoder(nn.Module):
    def __init__(self, n_mel=4, enc=8, rnn=12, prenet=8, attention_dim=8):
        super().__init__()
        self.n_mel, self.rnn = n_mel, rnn
        self.prenet = nn.Sequential(nn.Linear(n_mel, prenet), nn.ReLU())
        self.attention_rnn = nn.LSTMCell(prenet + enc, rnn)
        self.attention_layer = Attention(rnn, enc, attention_dim)
        self.decoder_rnn = nn.LSTMCell(rnn + enc, rnn)
        self.linear_projection = LinearNorm(rnn + enc, n_mel)
        self.gate_layer = LinearNorm(rnn + enc, 1)

    def forward(self, memory, decoder_inputs, memory_lengths):
        B, T_in, enc = memory.shape
        go = memory.data.new(B, self.n_mel).zero_()
        decoder_inputs = decoder_inputs.transpose(0, 1)
        decoder_inputs = self.prenet(torch.cat((go.unsqueeze(0), decoder_inputs), dim=0))
        mask = ~get_mask_from_lengths(memory_lengths, T_in)
        attention_hidden = memory.new_zeros(B, self.rnn)
        attention_cell = memory.new_zeros(B, self.rnn)
        decoder_hidden = memory.new_zeros(B, self.rnn)
        decoder_cell = memory.new_zeros(B, self.rnn)
        attention_weights = memory.new_zeros(B, T_in)
        attention_weights_cum = memory.new_zeros(B, T_in)
        attention_context = memory.new_zeros(B, enc)
        processed_memory = self.attention_layer.memory_layer(memory)
        mel_outputs, gate_outputs, alignments = [], [], []
        while len(mel_outputs) < decoder_inputs.size(0) - 1:
            decoder_input = decoder_inputs[len(mel_outputs)]
            cell_input = torch.cat((decoder_input, attention_context), -1)
            attention_hidden, attention_cell = self.attention_rnn(
                cell_input, (attention_hidden, attention_cell))
            attention_weights_cat = torch.cat((attention_weights.unsqueeze(1),
                                               attention_weights_cum.unsqueeze(1)), dim=1)
            attention_context, attention_weights = self.attention_layer(
                attention_hidden, memory, processed_memory, attention_weights_cat, mask)
            attention_weights_cum += attention_weights
            decoder_input = torch.cat((attention_hidden, attention_context), -1)
            decoder_hidden, decoder_cell = self.decoder_rnn(decoder_input,
                                                            (decoder_hidden, decoder_cell))
            hidden_context = torch.cat((decoder_hidden, attention_context), dim=1)
            mel_outputs += [self.linear_projection(hidden_context)]
            gate_outputs += [self.gate_layer(hidden_context).squeeze(1)]
            alignments += [attention_weights]
        mel = torch.stack(mel_outputs).transpose(0, 1).contiguous()
        gate = torch.stack(gate_outputs).transpose(0, 1).contiguous()
        return mel, gate, torch.stack(alignments).transpose(0, 1)


class Tacotron(nn.Module):
    def __init__(self, vocab=10, enc=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab, enc)
        self.encoder = nn.Conv1d(enc, enc, 3, padding=1)
        self.decoder = Decoder(enc=enc)

    def forward(self, text, text_lengths, mels, output_lengths):
        memory = F.relu(self.encoder(self.embedding(text).transpose(1, 2))).transpose(1, 2)
        mel, gate, alignments = self.decoder(memory, mels, text_lengths)
        mask = ~get_mask_from_lengths(output_lengths, mel.size(1))
        mel = mel.masked_fill(mask.unsqueeze(2), 0.0)
        gate = gate.masked_fill(mask, 1e3)
        return mel, gate, alignments


def batch(rng, n=3, t_in=5, t_out=7):
    text_lengths = np.array([5, 4, 3])
    output_lengths = np.array([7, 6, 5])
    text = rng.integers(1, 10, (n, t_in)) * (np.arange(t_in) < text_lengths[:, None])
    mels = rng.normal(0, 1, (n, t_out, 4)).astype(np.float32)
    mels *= (np.arange(t_out) < output_lengths[:, None])[..., None]
    gate = (np.arange(t_out)[None] >= output_lengths[:, None] - 1).astype(np.float32)
    return [torch.from_numpy(a) for a in (text, text_lengths, mels, output_lengths, gate)]


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = Tacotron()
    model.load_state_dict({k: torch.from_numpy(rng.normal(0, 0.3, tuple(v.shape))
                                               .astype(np.float32))
                           for k, v in model.state_dict().items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-6)
    mse, bce = nn.MSELoss(), nn.BCEWithLogitsLoss()
    net = torch.compile(model) if compile == "model" else model

    def step(text, text_lengths, mels, output_lengths, gate_target):
        optimizer.zero_grad()
        mel_out, gate_out, alignments = net(text, text_lengths, mels, output_lengths)
        loss = mse(mel_out, mels) + bce(gate_out.view(-1, 1), gate_target.view(-1, 1))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss, grad_norm, alignments.detach()

    if compile is True:
        step = torch.compile(step)
    losses, peaks = [], []
    for _ in range(steps):
        loss, norm, alignments = step(*batch(rng))
        losses.append([loss.item(), norm.item()])
        peaks.append(alignments.argmax(-1).flatten().tolist())
    return {"losses": losses, "peaks": peaks}
