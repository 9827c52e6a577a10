"""A sequence-to-sequence model with Luong attention written the way the PyTorch chatbot
tutorial is: padded batches of variable-length inputs, an embedding and a bidirectional
GRU over ``nn.utils.rnn.pack_padded_sequence(embedded, input_lengths, enforce_sorted=
False)`` (unsorted lengths) with ``pad_packed_sequence``, its two directions summed
(``outputs[:, :, :H] + outputs[:, :, H:]``); a decoder stepping one token at a time with
"general" attention (``torch.sum(hidden * self.attn(encoder_output), dim=2)``), the padding
masked out of the scores with ``masked_fill(mask == 0, -1e10)``, ``F.softmax``, the context
from ``bmm``, ``torch.cat`` and ``tanh``; teacher forcing decided inside the step by
``random.random() < teacher_forcing_ratio`` (Python's random module, seeded), free
running from ``topk(1)``; the tutorial's ``maskNLLLoss`` (``-torch.log(torch.gather(...))``
then ``masked_select(mask).mean()``, summed as Python floats for the print); two
optimisers and ``clip_grad_norm_`` on each model."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_token, SOS_token, EOS_token = 0, 1, 2
VOCAB, HIDDEN = 12, 16


class EncoderRNN(nn.Module):
    def __init__(self, hidden_size, embedding):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = embedding
        self.gru = nn.GRU(hidden_size, hidden_size, 1, bidirectional=True)

    def forward(self, input_seq, input_lengths, hidden=None):
        embedded = self.embedding(input_seq)
        packed = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths,
                                                   enforce_sorted=False)
        outputs, hidden = self.gru(packed, hidden)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs)
        outputs = outputs[:, :, :self.hidden_size] + outputs[:, :, self.hidden_size:]
        return outputs, hidden


class Attn(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.attn = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden, encoder_outputs, mask):
        attn_energies = torch.sum(hidden * self.attn(encoder_outputs), dim=2).t()
        attn_energies = attn_energies.masked_fill(mask == 0, -1e10)
        return F.softmax(attn_energies, dim=1).unsqueeze(1)


class LuongAttnDecoderRNN(nn.Module):
    def __init__(self, embedding, hidden_size, output_size):
        super().__init__()
        self.embedding = embedding
        self.gru = nn.GRU(hidden_size, hidden_size, 1)
        self.concat = nn.Linear(hidden_size * 2, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)
        self.attn = Attn(hidden_size)

    def forward(self, input_step, last_hidden, encoder_outputs, mask):
        embedded = self.embedding(input_step)
        rnn_output, hidden = self.gru(embedded, last_hidden)
        attn_weights = self.attn(rnn_output, encoder_outputs, mask)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
        rnn_output, context = rnn_output.squeeze(0), context.squeeze(1)
        concat_output = torch.tanh(self.concat(torch.cat((rnn_output, context), 1)))
        return F.softmax(self.out(concat_output), dim=1), hidden


def maskNLLLoss(inp, target, mask):
    nTotal = mask.sum()
    crossEntropy = -torch.log(torch.gather(inp, 1, target.view(-1, 1)).squeeze(1))
    loss = crossEntropy.masked_select(mask).mean()
    return loss, nTotal.item()


def batch(rng, size=4, max_len=6):
    lengths = rng.integers(2, max_len + 1, size)
    lengths[rng.integers(0, size)] = max_len   # (padded to the longest: one shape a batch)
    seqs = [rng.integers(3, VOCAB, n) for n in lengths]
    inp = np.zeros((max_len, size), np.int64)
    tgt = np.zeros((max_len + 1, size), np.int64)
    for b, s in enumerate(seqs):
        inp[:len(s), b] = s
        tgt[:len(s), b] = s[::-1]
        tgt[len(s), b] = EOS_token
    mask = tgt != PAD_token
    return torch.tensor(inp), torch.tensor(lengths), torch.tensor(tgt), torch.tensor(mask)


def init_weights(modules, seed):
    rng = np.random.default_rng(seed)
    for m in modules:
        m.load_state_dict({k: torch.tensor(rng.normal(0, 0.3, tuple(v.shape)).astype(np.float32))
                           for k, v in m.state_dict().items()})


def main(steps=10, compile=False, seed=0, teacher_forcing_ratio=0.5, clip=1.0):
    random.seed(seed)
    embedding = nn.Embedding(VOCAB, HIDDEN)
    encoder = EncoderRNN(HIDDEN, embedding)
    decoder = LuongAttnDecoderRNN(embedding, HIDDEN, VOCAB)
    init_weights([encoder, decoder], seed)
    encoder_optimizer = torch.optim.Adam(encoder.parameters(), lr=3e-3)
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=1.5e-2)
    rng = np.random.default_rng(seed + 1)

    def train(input_variable, lengths, target_variable, mask, max_target_len):
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        loss, print_losses, n_totals = 0, [], 0
        encoder_outputs, encoder_hidden = encoder(input_variable, lengths)
        batch_size = input_variable.size(1)
        decoder_input = torch.LongTensor([[SOS_token for _ in range(batch_size)]])
        decoder_hidden = encoder_hidden[:1]
        src_mask = (input_variable != PAD_token).t()
        use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False
        for t in range(max_target_len):
            decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden,
                                                     encoder_outputs, src_mask)
            if use_teacher_forcing:
                decoder_input = target_variable[t].view(1, -1)
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = torch.LongTensor([[topi[i][0] for i in range(batch_size)]])
            mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
            loss += mask_loss
            print_losses.append(mask_loss.item() * nTotal)
            n_totals += nTotal
        loss.backward()
        nn.utils.clip_grad_norm_(encoder.parameters(), clip)
        nn.utils.clip_grad_norm_(decoder.parameters(), clip)
        encoder_optimizer.step()
        decoder_optimizer.step()
        return sum(print_losses) / n_totals

    if compile == "model":   # (the encoder's packing reads the lengths: a graph break)
        decoder = torch.compile(decoder)
    elif compile:
        train = torch.compile(train)
    losses = []
    for _ in range(steps):
        inp, lengths, tgt, mask = batch(rng)
        losses.append(train(inp, lengths, tgt, mask, tgt.shape[0]))
    return {"losses": losses}
