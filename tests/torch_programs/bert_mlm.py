"""A small BERT-style masked language model, written the way HuggingFace-style model code
is: a config object, embeddings of words, positions (``position_ids`` a
``register_buffer(..., persistent=False)`` of ``torch.arange(...).expand((1, -1))``) and
token types summed and normalised, self-attention with ``transpose_for_scores``
(``x.size()[:-1] + (heads, head_size)``), an extended attention mask
``(1.0 - mask[:, None, None, :]) * torch.finfo(dtype).min``, ``nn.functional.softmax``,
``attention_probs @ value_layer``, ``permute(0, 2, 1, 3).contiguous()`` and ``view``, an
intermediate ``nn.GELU``, a prediction head tied to the word embeddings with its own
bias, a ``ModelOutput``-style dataclass returned with ``return_dict`` (a tuple without),
the MLM labels ``-100`` where not masked (``CrossEntropyLoss()``'s ignore index), masking
made with ``torch.full``/``torch.bernoulli``-free NumPy draws and ``masked_fill``,
``model.train()`` / ``model.eval()`` around an evaluation, and ``state_dict()`` saved
with ``torch.save`` and loaded back into a fresh model mid-training. Only ``import
torch`` decides whether PyTorch or dualgraph runs it."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import os
import tempfile
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
from torch.nn import CrossEntropyLoss


class Config:
    vocab_size = 40
    hidden_size = 32
    num_hidden_layers = 2
    num_attention_heads = 4
    intermediate_size = 64
    max_position_embeddings = 16
    type_vocab_size = 2
    layer_norm_eps = 1e-12
    hidden_dropout_prob = 0.0


@dataclass
class MaskedLMOutput:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None
    hidden_states: Optional[tuple] = None


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size,
                                            padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings,
                                                config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids",
                             torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids, token_type_ids=None):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / (self.attention_head_size ** 0.5)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Sequential(nn.Linear(config.hidden_size,
                                                    config.intermediate_size), nn.GELU())
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None):
        attn = self.attention_output(self.attention(hidden_states, attention_mask))
        hidden_states = self.attention_norm(attn + hidden_states)
        out = self.output(self.intermediate(hidden_states))
        return self.output_norm(out + hidden_states)


class BertForMaskedLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layer = nn.ModuleList([Layer(config) for _ in range(config.num_hidden_layers)])
        self.transform = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size),
                                       nn.GELU(), nn.LayerNorm(config.hidden_size,
                                                               eps=config.layer_norm_eps))
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.weight = self.embeddings.word_embeddings.weight

    def get_extended_attention_mask(self, attention_mask, dtype=torch.float32):
        extended = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, return_dict=True):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        extended = self.get_extended_attention_mask(attention_mask)
        hidden_states = self.embeddings(input_ids, token_type_ids=token_type_ids)
        all_hidden = (hidden_states,) if output_hidden_states else None
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended)
            if output_hidden_states:
                all_hidden = all_hidden + (hidden_states,)
        prediction_scores = self.decoder(self.transform(hidden_states)) + self.bias
        masked_lm_loss = None
        if labels is not None:
            loss_fct = CrossEntropyLoss()
            masked_lm_loss = loss_fct(prediction_scores.view(-1, self.config.vocab_size),
                                      labels.view(-1))
        if not return_dict:
            output = (prediction_scores,) + ((all_hidden,) if all_hidden else ())
            return ((masked_lm_loss,) + output) if masked_lm_loss is not None else output
        return MaskedLMOutput(loss=masked_lm_loss, logits=prediction_scores,
                              hidden_states=all_hidden)


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    state = {}
    for k, v in model.state_dict().items():
        if "norm" in k.lower() and k.endswith("weight"):
            value = 1.0 + rng.normal(0, 0.02, tuple(v.shape))
        else:
            value = rng.normal(0, 0.1, tuple(v.shape))
        state[k] = torch.tensor(value.astype(np.float32))
    model.load_state_dict(state)


def mask_tokens(rng, ids, mask_id=1, p=0.25):
    labels = ids.copy()
    chosen = (rng.random(ids.shape) < p) & (ids != 0)
    labels[~chosen] = -100
    inputs = torch.tensor(ids).masked_fill(torch.tensor(chosen), mask_id)
    return inputs, torch.tensor(labels)


def main(steps=10, compile=False, seed=0, batch=4, length=12):
    config = Config()
    model = BertForMaskedLM(config)
    init_weights(model, seed)
    rng = np.random.default_rng(seed + 1)
    ids = rng.integers(2, config.vocab_size, size=(steps, batch, length))
    lengths = rng.integers(6, length + 1, size=(steps, batch))
    for s in range(steps):
        for b in range(batch):
            ids[s, b, lengths[s, b]:] = 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)

    def train_step(input_ids, attention_mask, token_type_ids, labels):
        outputs = model(input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids, labels=labels)
        loss = outputs.loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses, evals = [], []
    for step in range(steps):
        if step == steps // 2:   # save, then resume in a fresh model
            path = os.path.join(tempfile.mkdtemp(), "model.pt")
            torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, path)
            fresh = BertForMaskedLM(config)
            ckpt = torch.load(path, map_location="cpu")
            missing, unexpected = fresh.load_state_dict(ckpt["model"], strict=True)
            assert not missing and not unexpected
            model.load_state_dict(fresh.state_dict())
            optimizer.load_state_dict(ckpt["optim"])
        model.train()
        input_ids, labels = mask_tokens(rng, ids[step])
        attention_mask = (input_ids != 0).long()
        token_type_ids = (torch.arange(length)[None, :] >= length // 2).long().expand(batch, -1)
        losses.append(train_step(input_ids, attention_mask, token_type_ids, labels).item())
        if step % 3 == 2:
            model.eval()
            with torch.no_grad():
                scores, hidden = model(input_ids, attention_mask=attention_mask,
                                       output_hidden_states=True, return_dict=False)
            evals.append(scores.argmax(-1)[0].tolist())
            assert len(hidden) == config.num_hidden_layers + 1
    return {"losses": losses, "evals": evals}
