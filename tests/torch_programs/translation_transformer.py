"""A sequence-to-sequence ``nn.Transformer`` trained on a toy translation task, written the
way the PyTorch language-translation tutorial is: a ``PositionalEncoding`` module whose
sinusoid table is built with ``torch.exp(- torch.arange(0, emb, 2) * math.log(10000) /
emb)``, ``unsqueeze(-2)`` and kept by ``register_buffer``; a ``TokenEmbedding`` scaled by
``math.sqrt(emb_size)`` of ``tokens.long()``; ``nn.Transformer`` (sequence-first) with a
float causal mask from ``(torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)`` and
``masked_fill``s of ``float('-inf')`` and ``0.0``, boolean key-padding masks ``(src ==
PAD_IDX).transpose(0, 1)``, ``memory_key_padding_mask``; ``nn.CrossEntropyLoss(
ignore_index=PAD_IDX)`` over ``logits.reshape(-1, logits.shape[-1])``; Adam with
``betas=(0.9, 0.98), eps=1e-9``; ``xavier_uniform_`` on every ``p.dim() > 1`` parameter;
and a greedy decoding loop with ``torch.cat`` of each ``argmax``'d next word. The target
sentence is the source reversed; sentences of a batch have different lengths (padding).
Dropout is 0 so that every framework computes the same losses."""
import math

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

PAD_IDX, BOS_IDX, EOS_IDX = 1, 2, 3


class PositionalEncoding(nn.Module):
    def __init__(self, emb_size: int, dropout: float, maxlen: int = 64):
        super().__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size,
                 tgt_vocab_size, dim_feedforward=32, dropout=0.0):
        super().__init__()
        self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead,
                                          num_encoder_layers=num_encoder_layers,
                                          num_decoder_layers=num_decoder_layers,
                                          dim_feedforward=dim_feedforward, dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src, src_mask):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt, memory, tgt_mask):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory,
                                        tgt_mask)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)
    return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))


def create_mask(src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len)).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def batches(rng, steps, batch_size, vocab):
    """Source sentences of 3-7 words and their reversals, with BOS/EOS, padded to the
    longest of the batch (the padding of ``pad_sequence``), sequence-first."""
    out = []
    for _ in range(steps):
        lengths = rng.integers(3, 8, batch_size)
        src = np.full((lengths.max() + 2, batch_size), PAD_IDX)
        tgt = np.full((lengths.max() + 2, batch_size), PAD_IDX)
        for b, n in enumerate(lengths):
            words = rng.integers(4, vocab, n)
            src[:n + 2, b] = [BOS_IDX, *words, EOS_IDX]
            tgt[:n + 2, b] = [BOS_IDX, *words[::-1], EOS_IDX]
        out.append((torch.from_numpy(src), torch.from_numpy(tgt)))
    return out


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long)
    for i in range(max_len - 1):
        tgt_mask = generate_square_subsequent_mask(ys.size(0)).type(torch.bool)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def main(steps=10, compile=False, seed=0, vocab=12, batch_size=6):
    torch.manual_seed(seed)
    transformer = Seq2SeqTransformer(1, 1, 16, 2, vocab, vocab)
    for p in transformer.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    rng = np.random.default_rng(seed)
    transformer.load_state_dict({   # the same starting weights in every framework
        name: v if name.endswith("pos_embedding") else
        torch.tensor(rng.uniform(-0.3, 0.3, tuple(v.shape)).astype(np.float32)
                     + (1.0 if ".norm" in name and name.endswith("weight") else 0.0))
        for name, v in transformer.state_dict().items()})
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
    optimizer = torch.optim.Adam(transformer.parameters(), lr=0.003, betas=(0.9, 0.98), eps=1e-9)
    data = batches(np.random.default_rng(seed + 1), steps, batch_size, vocab)

    def train_step(src, tgt):
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
        logits = transformer(src, tgt_input, src_mask, tgt_mask, src_padding_mask,
                             tgt_padding_mask, src_padding_mask)
        optimizer.zero_grad()
        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        transformer = torch.compile(transformer)
    elif compile:
        train_step = torch.compile(train_step)
    transformer.train()
    losses = []
    for src, tgt in data:
        losses.append(train_step(src, tgt).item())
    transformer.eval()
    with torch.no_grad():
        src = data[0][0][:, :1]
        num_tokens = src.shape[0]
        src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
        tokens = greedy_decode(transformer, src, src_mask, num_tokens + 3, BOS_IDX).flatten()
    return {"losses": losses, "translation": tokens.tolist()}
