"""A Mistral/Qwen-style decoder written the way Hugging Face's and gpt-fast's code is:
grouped-query attention with fewer key/value heads than query heads, the key/value heads
repeated by ``repeat_kv`` (``expand`` then ``reshape``) in one layer, by
``repeat_interleave(n_rep, dim=1)`` in another and by
``F.scaled_dot_product_attention(..., enable_gqa=True)`` in a third; rotary embeddings from a
cos/sin cache indexed by ``position_ids`` (``cos[position_ids].unsqueeze(1)``) made by
``cumsum`` of a left-padded attention mask with ``masked_fill_``; a sliding-window causal
mask built by ``torch.tril``/``torch.triu(diagonal=-window)`` on a bool ``torch.ones`` and
combined with the padding mask by ``&`` into SDPA's boolean ``attn_mask``, and
``is_causal=True`` for the unpadded batch; a SwiGLU MLP with ``nn.SiLU``; ``nn.RMSNorm``;
logits in float32 and a loss over the shifted labels with ``ignore_index``; gradient
clipping by ``clip_grad_norm_`` returning the norm, logged; a cosine schedule with
``CosineAnnealingLR(eta_min=)``; sampling-free greedy decoding of the left-padded prompts."""
# ruff: noqa: PLR0402  (written as PyTorch programs are)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    cos = cos[position_ids].unsqueeze(1)
    sin = sin[position_ids].unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep,
                                                           slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=32, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        t = torch.arange(max_position_embeddings, dtype=torch.int64).type_as(self.inv_freq)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        return self.cos_cached[:seq_len].to(dtype=x.dtype), self.sin_cached[:seq_len].to(
            dtype=x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden_size, num_heads, num_key_value_heads, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.num_key_value_heads = num_key_value_heads
        self.num_key_value_groups = num_heads // num_key_value_heads
        self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim)

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads,
                                                       self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                                     self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads,
                                                       self.head_dim).transpose(1, 2)
        cos, sin = self.rotary_emb(value_states, seq_len=q_len)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin,
                                                        position_ids)
        kind = self.layer_idx % 3
        if kind == 0:
            key_states = repeat_kv(key_states, self.num_key_value_groups)
            value_states = repeat_kv(value_states, self.num_key_value_groups)
        elif kind == 1:
            key_states = key_states.repeat_interleave(self.num_key_value_groups, dim=1)
            value_states = torch.repeat_interleave(value_states, self.num_key_value_groups, 1)
        if attention_mask is None:
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states,
                                                         is_causal=True, enable_gqa=kind == 2)
        else:
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states,
                                                         attn_mask=attention_mask,
                                                         enable_gqa=kind == 2)
        attn_output = attn_output.transpose(1, 2).contiguous().reshape(bsz, q_len, -1)
        return self.o_proj(attn_output)


class MLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden_size, layer_idx):
        super().__init__()
        self.self_attn = Attention(hidden_size, num_heads=6, num_key_value_heads=2,
                                   layer_idx=layer_idx)
        self.mlp = MLP(hidden_size, 2 * hidden_size)
        self.input_layernorm = nn.RMSNorm(hidden_size, eps=1e-6)
        self.post_attention_layernorm = nn.RMSNorm(hidden_size, eps=1e-6)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), attention_mask,
                                       position_ids)
        hidden_states = residual + hidden_states
        residual = hidden_states
        return residual + self.mlp(self.post_attention_layernorm(hidden_states))


class CausalLM(nn.Module):
    def __init__(self, vocab_size=37, hidden_size=24, num_layers=3, sliding_window=4):
        super().__init__()
        self.sliding_window = sliding_window
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.layers = nn.ModuleList([DecoderLayer(hidden_size, i) for i in range(num_layers)])
        self.norm = nn.RMSNorm(hidden_size, eps=1e-6)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def _update_causal_mask(self, attention_mask, seq_len):
        causal = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        window = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool),
                            diagonal=-self.sliding_window + 1)
        mask = (causal & window)[None, None, :, :]
        keep = attention_mask[:, None, None, :].bool()
        mask = mask & keep
        # rows of padding positions see nothing; let them see themselves (no NaN)
        return mask | torch.eye(seq_len, dtype=torch.bool)[None, None]

    def forward(self, input_ids, attention_mask=None, labels=None):
        bsz, seq_len = input_ids.shape
        if attention_mask is None:
            position_ids = torch.arange(seq_len).unsqueeze(0).expand(bsz, -1)
            mask = None
        else:
            position_ids = attention_mask.long().cumsum(-1) - 1
            position_ids.masked_fill_(attention_mask == 0, 1)
            mask = self._update_causal_mask(attention_mask, seq_len)
        hidden_states = self.embed_tokens(input_ids)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, mask, position_ids)
        logits = self.lm_head(self.norm(hidden_states)).float()
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)),
                                   shift_labels.view(-1), ignore_index=-100)
        return logits, loss


def main(steps=4, compile=False, seed=0):
    rng = np.random.default_rng(seed)
    model = CausalLM()
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.05 if "norm" in name else 0.25
            base = 1.0 if "norm" in name else 0.0
            p.copy_(torch.from_numpy((base + rng.normal(0, scale, p.shape)).astype(np.float32)))
        model.embed_tokens.weight[0].zero_()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps,
                                                           eta_min=1e-4)
    net = torch.compile(model) if compile == "model" else model

    def train_step(input_ids, attention_mask, labels):
        optimizer.zero_grad(set_to_none=True)
        _, loss = net(input_ids, attention_mask, labels)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss.detach(), norm

    if compile is True:
        train_step = torch.compile(train_step)
    losses, norms = [], []
    for i in range(steps):
        input_ids = torch.from_numpy(rng.integers(1, 37, (3, 10)))
        labels = input_ids.clone()
        if i % 2:
            attention_mask = torch.ones(3, 10, dtype=torch.long)
            attention_mask[1, :3] = 0
            attention_mask[2, :6] = 0
            input_ids = input_ids.masked_fill(attention_mask == 0, 0)
            labels = labels.masked_fill(attention_mask == 0, -100)
        else:
            attention_mask = None
        loss, norm = train_step(input_ids, attention_mask, labels)
        losses.append(loss.item())
        norms.append(norm.item())
        scheduler.step()
    model.eval()
    prompts = torch.from_numpy(rng.integers(1, 37, (2, 5)))
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[0, :2] = 0
    prompts[0, :2] = 0
    with torch.no_grad():
        for _ in range(3):
            logits, _ = net(prompts, mask)
            prompts = torch.cat([prompts, logits[:, -1].argmax(-1, keepdim=True)], 1)
            mask = torch.cat([mask, mask.new_ones(2, 1)], 1)
    return {"losses": losses, "norms": norms, "tokens": prompts.flatten().tolist(),
            "lr": [scheduler.get_last_lr()[0]]}
