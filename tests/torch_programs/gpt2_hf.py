"""A GPT-2 written the way Hugging Face's ``modeling_gpt2`` is: ``Conv1D`` layers (a
transposed weight applied with ``torch.addmm`` over ``x.view(-1, nx)``), a causal mask
buffer ``torch.tril(torch.ones(...)).view(1, 1, n, n)`` read with ``torch.where(mask, w,
torch.finfo(w.dtype).min)``, an ``attention_mask`` turned into an additive one by
``(1.0 - mask[:, None, None, :]) * torch.finfo(dtype).min`` (a padded batch), heads split
with ``view``/``permute`` and merged with ``contiguous().view``, ``past_key_values`` as a
tuple of ``(key, value)`` per layer concatenated along the sequence, ``position_ids`` from
``attention_mask.long().cumsum(-1) - 1`` with ``masked_fill_``, ``labels`` shifted by one
with ``ignore_index=-100`` at the padding, tied input and output embeddings, and
generation with the cache and top-k / top-p filtering (``topk``, ``sort``, ``cumsum``,
``scatter``, ``softmax``, ``torch.multinomial`` where one token is left, a draw from a
seeded NumPy generator by ``searchsorted`` otherwise)."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class Attention(nn.Module):
    def __init__(self, n_embd, n_head, n_positions):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((n_positions, n_positions),
                                                           dtype=torch.bool))
                             .view(1, 1, n_positions, n_positions), persistent=False)
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.c_attn = Conv1D(3 * n_embd, n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)

    def _split_heads(self, x):
        new_shape = x.size()[:-1] + (self.n_head, self.head_dim)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        return x.view(x.size()[:-2] + (self.n_head * self.head_dim,))

    def _attn(self, query, key, value, attention_mask):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5,
                                                 dtype=attn_weights.dtype)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype),
                                   mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(self.n_head * self.head_dim,
                                                             dim=2)
        query, key, value = (self._split_heads(t) for t in (query, key, value))
        if layer_past is not None:
            past_key, past_value = layer_past
            key = torch.cat((past_key, key), dim=-2)
            value = torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache else None
        attn_output = self._merge_heads(self._attn(query, key, value, attention_mask))
        return self.c_proj(attn_output), present


class MLP(nn.Module):
    def __init__(self, intermediate_size, n_embd):
        super().__init__()
        self.c_fc = Conv1D(intermediate_size, n_embd)
        self.c_proj = Conv1D(n_embd, intermediate_size)

    def forward(self, x):
        h = self.c_fc(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                        * (h + 0.044715 * torch.pow(h, 3.0))))   # gelu_new
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_positions):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = Attention(n_embd, n_head, n_positions)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(4 * n_embd, n_embd)

    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):
        attn_output, present = self.attn(self.ln_1(hidden_states), layer_past=layer_past,
                                         attention_mask=attention_mask, use_cache=use_cache)
        hidden_states = attn_output + hidden_states
        hidden_states = hidden_states + self.mlp(self.ln_2(hidden_states))
        return hidden_states, present


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab_size=23, n_positions=16, n_embd=16, n_layer=2, n_head=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, n_positions) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight   # tied

    def forward(self, input_ids, past_key_values=None, attention_mask=None, position_ids=None,
                labels=None, use_cache=False):
        batch_size, seq_len = input_ids.shape
        if past_key_values is None:
            past_length = 0
            past_key_values = tuple([None] * len(self.h))
        else:
            past_length = past_key_values[0][0].size(-2)
        if position_ids is None:
            position_ids = torch.arange(past_length, seq_len + past_length, dtype=torch.long)
            position_ids = position_ids.unsqueeze(0).view(-1, seq_len)
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=self.wte.weight.dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(self.wte.weight.dtype).min
        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        presents = () if use_cache else None
        for block, layer_past in zip(self.h, past_key_values):
            hidden_states, present = block(hidden_states, layer_past=layer_past,
                                           attention_mask=attention_mask, use_cache=use_cache)
            if use_cache:
                presents = presents + (present,)
        lm_logits = self.lm_head(self.ln_f(hidden_states))
        loss = None
        if labels is not None:
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                                   shift_labels.view(-1), ignore_index=-100)
        return loss, lm_logits, presents


def top_k_top_p_filtering(logits, top_k=0, top_p=1.0, filter_value=-float("Inf")):
    if top_k > 0:
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits = logits.masked_fill(indices_to_remove, filter_value)
    if top_p < 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0
        indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices,
                                                             sorted_indices_to_remove)
        logits = logits.masked_fill(indices_to_remove, filter_value)
    return logits


@torch.no_grad()
def generate(model, input_ids, attention_mask, max_new_tokens, rng, top_k, top_p):
    past, tokens = None, input_ids
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    step_ids = input_ids
    for _ in range(max_new_tokens):
        _, logits, past = model(step_ids, past_key_values=past, attention_mask=attention_mask,
                                position_ids=position_ids, use_cache=True)
        logits = top_k_top_p_filtering(logits[:, -1, :], top_k=top_k, top_p=top_p)
        probs = F.softmax(logits, dim=-1)
        if int((probs > 0).sum(-1).max()) == 1:   # one candidate left: any draw is it
            next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
        else:
            u = torch.tensor(rng.random((probs.shape[0], 1)), dtype=probs.dtype)
            next_tokens = torch.searchsorted(probs.cumsum(-1), u).squeeze(1)
            next_tokens = next_tokens.clamp(max=probs.shape[-1] - 1)
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=-1)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((
            attention_mask.shape[0], 1))], dim=-1)
        position_ids = position_ids[:, -1:] + 1
        step_ids = next_tokens[:, None]
    return tokens


def init_weights(model, seed):
    rng = np.random.default_rng(seed)
    model.load_state_dict({
        k: torch.tensor((1.0 + rng.normal(0, 0.05, tuple(v.shape)) if "ln" in k and
                         k.endswith("weight") else rng.normal(0, 0.2, tuple(v.shape)))
                        .astype(np.float32))
        for k, v in model.state_dict().items()})


def batch(rng, size=4, length=8, vocab=23):
    """Sequences counting up by a random stride, right-padded to ``length`` (pad id 0)."""
    lengths = rng.integers(length - 3, length + 1, size)
    start, stride = rng.integers(1, vocab, size), rng.integers(1, 3, size)
    ids = (start[:, None] + stride[:, None] * np.arange(length)) % (vocab - 1) + 1
    mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, 0)
    labels = np.where(mask == 1, ids, -100)
    return torch.tensor(ids), torch.tensor(mask), torch.tensor(labels)


def main(steps=10, compile=False, seed=0):
    model = GPT2LMHeadModel()
    init_weights(model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    rng = np.random.default_rng(seed + 1)

    def train_step(input_ids, attention_mask, labels):
        optimizer.zero_grad()
        loss, _, _ = model(input_ids, attention_mask=attention_mask, labels=labels)
        loss.backward()
        optimizer.step()
        return loss

    if compile == "model":
        model = torch.compile(model)
    elif compile:
        train_step = torch.compile(train_step)
    losses = []
    for _ in range(steps):
        ids, mask, labels = batch(rng)
        losses.append(train_step(ids, mask, labels).item())
    model.eval()
    prompt = torch.tensor([[5, 6, 7, 0], [9, 11, 13, 15]])   # left-aligned, one padded
    prompt_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    greedy = generate(model, prompt, prompt_mask, 3, np.random.default_rng(7), 1, 1.0)
    sampled = generate(model, prompt, prompt_mask, 3, np.random.default_rng(7), 5, 0.9)
    with torch.no_grad():
        _, logits, _ = model(prompt, attention_mask=prompt_mask)
    return {"losses": losses, "greedy": greedy.flatten().tolist(),
            "sampled": sampled.flatten().tolist(), "logits": logits[:, -1].flatten().tolist()}
