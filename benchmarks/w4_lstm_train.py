"""W4 lstm_train: one training step of a character LSTM, with a Python loop over time.

Vocab 64, embedding 32, hidden 128, one layer, sequence 32, batch 32, a linear head on
every step's hidden state, cross-entropy over all steps, Adam lr 1e-3. An ``nn.LSTMCell``
runs once per time step from Python: 32 small steps forward and backward, so per-op
overhead and the autograd tape's length matter as much as arithmetic. (torch's cell is one
fused kernel; dualgraph's is a composite of ops; JAX's is written out and unrolled.)

dualgraph and torch share one model definition, written once against the torch-style API
(``lib`` is ``dualgraph`` or ``torch``); the initial weights come from NumPy
(``make_data``, torch's default scheme) and are loaded into every implementation. Two more
dualgraph implementations write the time loop as graph control flow instead of unrolling
it: ``dualgraph_compiled_scan`` (one ``dg.scan`` over the time axis) and
``dualgraph_to_static`` (a ``for x_t in xs`` loop that ``to_static``'s converter turns into that
scan); both compile the whole training step.
"""
import numpy as np

from .common import jax_adam_step, torch_style_impls, with_explain

ID, NAME = "W4", "lstm_train"
VOCAB, EMBED, HIDDEN, SEQ, BATCH = 64, 32, 128, 32, 32
LR = 1e-3


def make_data():
    """Character ids, next-character targets and the initial weights, drawn once:
    N(0, 1) embeddings, U(+-1/sqrt(hidden)) for the cell and the head, as torch does."""
    rng = np.random.default_rng(0)
    bound = 1 / np.sqrt(HIDDEN)
    shapes = {"cell.weight_ih": (4 * HIDDEN, EMBED), "cell.weight_hh": (4 * HIDDEN, HIDDEN),
              "cell.bias_ih": (4 * HIDDEN,), "cell.bias_hh": (4 * HIDDEN,),
              "head.weight": (VOCAB, HIDDEN), "head.bias": (VOCAB,)}
    params = {"emb.weight": rng.standard_normal((VOCAB, EMBED))}
    params.update({k: rng.uniform(-bound, bound, s) for k, s in shapes.items()})
    chars = rng.integers(0, VOCAB, (BATCH, SEQ + 1))
    return {"params": {k: v.astype(np.float32) for k, v in params.items()},
            "x": chars[:, :-1].astype(np.int64), "y": chars[:, 1:].astype(np.int64)}


def unrolled(lib, cell, xs, h, c):
    """The hidden state of every step (batch, time, hidden), one Python step at a time."""
    hs = []
    for t in range(xs.shape[1]):
        h, c = cell(xs[:, t], (h, c))
        hs.append(h)
    return lib.stack(hs, dim=1)


def scanned(lib, cell, xs, h, c):
    """The same with ``dg.scan`` over the time axis: one graph node, whatever the length."""
    def step(carry, x_t):
        h, c = cell(x_t, carry)
        return (h, c), h
    _, hs = lib.scan(step, (h, c), xs.transpose(0, 1))
    return hs.transpose(0, 1)


def converted(lib, cell, xs, h, c):
    """The same as a Python ``for`` over the rows of a tensor, for ``to_static`` to convert
    (into a scan): each step writes its row of ``hs``."""
    hs = lib.zeros(xs.shape[1], xs.shape[0], HIDDEN)
    t = 0
    for x_t in xs.transpose(0, 1):
        h, c = cell(x_t, (h, c))
        hs[t] = h
        t += 1
    return hs.transpose(0, 1)


def build(lib, data, time_loop=unrolled):
    """The character LSTM, Adam and the training step, in dualgraph or torch; ``time_loop``
    runs the cell over time (:func:`unrolled`, :func:`scanned` or :func:`converted`)."""
    nn, F = lib.nn, lib.nn.functional

    class CharLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, EMBED)
            self.cell = nn.LSTMCell(EMBED, HIDDEN)
            self.head = nn.Linear(HIDDEN, VOCAB)

        def forward(self, idx):
            xs = self.emb(idx)                                  # batch, time, embed
            h = c = lib.zeros(idx.shape[0], HIDDEN)
            hs = time_loop(lib, self.cell, xs, h, c)            # batch, time, hidden
            return self.head(hs)                                # batch, time, vocab

    model = CharLSTM()
    model.load_state_dict({k: lib.tensor(v) for k, v in data["params"].items()})
    opt = lib.optim.Adam(model.parameters(), lr=LR)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    return train_step, lib.tensor(data["x"]), lib.tensor(data["y"])


def jax_jit(data):
    """The same LSTM as a pure function, the loop unrolled by tracing, torch's gate order
    (input, forget, cell, output), trained with torch's Adam."""
    import jax
    import jax.numpy as jnp

    def loss_fn(p, idx, targets):
        xs = p["emb.weight"][idx]
        h = c = jnp.zeros((idx.shape[0], HIDDEN), jnp.float32)
        hs = []
        for t in range(idx.shape[1]):
            gates = (xs[:, t] @ p["cell.weight_ih"].T + p["cell.bias_ih"]
                     + h @ p["cell.weight_hh"].T + p["cell.bias_hh"])
            i, f, g, o = jnp.split(gates, 4, axis=1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            hs.append(h)
        logits = jnp.stack(hs, axis=1) @ p["head.weight"].T + p["head.bias"]
        logp = jax.nn.log_softmax(logits.reshape(-1, VOCAB), axis=-1)
        return -jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1).mean()

    return jax_adam_step(loss_fn, data, LR)


def dualgraph_graph_loop(time_loop):
    """A dualgraph implementation compiling the whole step with the time loop written as
    ``time_loop``. ``to_static`` converts the control flow of the function it is given
    only, so :func:`converted` is converted on its own (what ``to_static`` runs before
    capturing) and called by the compiled step."""
    def impl(data):
        import dualgraph as dg
        from dualgraph.capture.ast import convert
        loop = convert(converted).fn if time_loop is converted else time_loop
        step, x, y = build(dg, data, loop)
        step = dg.compile(step, fullgraph=True)
        return with_explain(lambda: step(x, y).item(), step)
    return impl


IMPLS = {**torch_style_impls(build), "jax_jit": jax_jit,
         "dualgraph_compiled_scan": dualgraph_graph_loop(scanned),
         "dualgraph_to_static": dualgraph_graph_loop(converted)}
