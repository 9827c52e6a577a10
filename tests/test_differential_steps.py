"""Differential test of ``dg.compile`` on generated training steps.

A small grammar assembles a training step from the choices real loops make (``Program``
below): the model (an MLP with optional LayerNorm or BatchNorm, Dropout in train or eval
mode, a mask made lazily at its first forward), the loss (cross-entropy or MSE), the
update (SGD / SGD with momentum / Adam / AdamW, optionally with a scheduler changing
``lr`` every step, inside or after the step; or hand-written: ``p.data.add_``,
``p -= ...`` under ``no_grad``, ``p.data = ...``, a momentum whose buffers are made lazily
at the first step, an Adam with a Python int ``state["step"]``), a Python counter or flag
(in a closure dict, a module attribute, a global; set by the step or between steps) that
changes the computation, gradient accumulation over two micro-batches with ``zero_grad``
every k steps (to None or to zeros), gradient clipping, a tensor hook (on an activation or
a parameter), an ``.item()`` branch, ``str(loss)``, a print of an activation in the
forward, ``f"{loss.item():.4f}"`` before the backward or NumPy called on the logits
(graph breaks, at which the compiled step is split), and what the step
returns (nothing, the loss, the loss and detached logits, a tensor with history, a
``no_grad`` forward). Idioms of third-party programs (tests/torch_programs/): a Python list
the step appends ``loss.detach()`` or ``loss.item()`` to, an exponential moving average of
the parameters updated under ``no_grad``, gradients clamped through ``p.grad.data``, a
cross-entropy masked with ``where`` or written as ``Categorical(logits=...).log_prob``,
and a gradient penalty through ``autograd.grad(..., create_graph=True)``. Two identical copies (same weights, same data) run 3-5 steps, one
eagerly and one under ``dg.compile``; the returned tensors, parameters, buffers and the
Python counters must agree (rtol 1e-5, atol 1e-6, float32). A compiled step may instead
report a graph break (a warning naming this file's line): the step is then split there
(capture/split.py), ``explain()`` must list the compiled pieces, and the results, what the
breaks printed included, must still equal eager's. A silent difference is a failure.

Dropout in train mode draws the same numbers compiled as eagerly from the same generator
state (``build`` seeds it), so "train" dropout's masks must agree too.

The CI run checks ``DG_DIFF_EXAMPLES`` programs (default 100, seeded, so a failing id is
reproducible: ``pytest tests/test_differential_steps.py -k 'program[17]'``). A longer run::

    DG_DIFF_EXAMPLES=2000 PYTHONPATH=$PWD python -m pytest -p no:benchmark -n 2 \\
        tests/test_differential_steps.py
"""
from __future__ import annotations

import dataclasses
import io
import os
import random
import warnings

import numpy as np
import pytest

import dualgraph as dg
import dualgraph.nn as nn
import dualgraph.nn.functional as F

HERE = os.path.basename(__file__)
EXAMPLES = int(os.environ.get("DG_DIFF_EXAMPLES", "100"))
RTOL, ATOL = 1e-5, 1e-6
IN, OUT, BATCH = 5, 3, 6

UPDATES = ["sgd", "sgd_momentum", "adam", "adamw", "data_add", "no_grad_isub",
           "data_assign", "lazy_momentum", "hand_adam"]
HAND_OPTIMIZERS = {"lazy_momentum", "hand_adam"}
SCALE = 1.0     # a global the driver changes between steps (counter="global")
BUILTIN = {"sgd", "sgd_momentum", "adam", "adamw"}


@dataclasses.dataclass(frozen=True)
class Program:
    """One generated training step: every choice the grammar makes."""
    hidden: tuple            # hidden layer widths
    norm: str                # "none", "layernorm", "batchnorm" (running stats in place)
    lazy_mask: bool          # the forward makes ``self.mask`` at its first call, then reuses it
    dropout: str             # "none", "eval" (p=0.5, model in eval mode), "p0" (train, p=0),
    #                          "train" (p=0.3)
    loss: str                # "ce" or "mse"
    update: str              # one of UPDATES
    scheduler: str           # "none", "step", "lambda_set" (param_group['lr'] = ...)
    sched_inside: bool       # the scheduler steps inside the compiled step, else after it
    counter: str             # "none", "closure" (a dict), "module_attr" (a flag the step
    #                          toggles), "outside_attr" (model.scale set between steps),
    #                          "global" (a global SCALE set between steps)
    micro: int               # micro-batches accumulated per step (1 or 2)
    zero_every: int          # zero the gradients every k steps (1 or 2)
    clip: str                # "none", "norm" (clip_grad_norm_), "value" (clip_grad_value_)
    hook: str                # "none"; register_hook(lambda g: g * 0.5) on a hidden
    #                          activation ("activation") or on the head's weight ("param")
    set_to_none: bool        # zero_grad(set_to_none=...)
    item_branch: bool        # ``if loss.item() > 1e6:`` (a graph break)
    debug_str: bool          # str(loss) in the step (a graph break: the step runs eagerly)
    returns: str             # "none", "loss", "loss_logits", "history", "eval" (a
    #                          no_grad forward after the update)
    steps: int
    debug_print: str         # "none", "activation" (print(h.mean()) in the forward),
    #                          "loss_format" (f"{loss.item():.4f}" before backward), "numpy"
    #                          (the loss scaled by a NumPy function of the logits): breaks
    keep: str = "none"       # "list_detach" / "list_item": the step appends the loss to a
    #                          Python list (detached / as a float); the list is compared
    ema: bool = False        # an EMA copy of the parameters updated under no_grad
    grad_clamp: bool = False  # p.grad.data.clamp_(-0.5, 0.5) before the update
    ce_form: str = "plain"   # "masked" (where over the per-sample losses), "categorical"
    #                          (-Categorical(logits=...).log_prob(y).mean()); with loss "ce"
    penalty: bool = False    # + the squared input-gradient norm (create_graph=True)


def generate(seed: int) -> Program:
    """The program numbered ``seed``: a seeded draw from the grammar."""
    r = random.Random(seed)
    update = r.choice(UPDATES)
    return Program(
        hidden=tuple(r.choice([4, 7]) for _ in range(r.randint(1, 2))),
        norm=r.choice(["none", "none", "layernorm", "batchnorm"]),
        lazy_mask=r.random() < 0.2,
        dropout=r.choice(["none", "eval", "p0", "train"]),
        loss=r.choice(["ce", "mse"]),
        update=update,
        scheduler=r.choice(["none", "step", "lambda_set"]) if update in BUILTIN else "none",
        sched_inside=r.random() < 0.5,
        counter=r.choice(["none", "closure", "module_attr", "outside_attr", "global"]),
        micro=r.choice([1, 2]),
        zero_every=r.choice([1, 1, 2]),
        clip=r.choice(["none", "none", "norm", "value"]),
        hook=r.choice(["none", "none", "activation", "param"]),
        set_to_none=r.random() < 0.7,
        item_branch=r.random() < 0.1,
        debug_str=r.random() < 0.15,
        returns=r.choice(["none", "loss", "loss_logits", "history", "eval"]),
        steps=r.randint(3, 5),
        debug_print=r.choice(["none", "none", "activation", "loss_format", "numpy"]),
        keep=r.choice(["none", "none", "list_detach", "list_item"]),
        ema=r.random() < 0.25,
        grad_clamp=r.random() < 0.2,
        ce_form=r.choice(["plain", "plain", "masked", "categorical"]),
        penalty=r.random() < 0.15)


class Net(nn.Module):
    """The generated MLP; ``flag`` is a Python attribute the step may toggle and read."""

    def __init__(self, prog: Program):
        super().__init__()
        layers, width = [], IN
        for h in prog.hidden:
            # (no bias before BatchNorm, as real code writes it: its gradient is rounding
            # noise, which Adam scales up to full steps, so eager and compiled would differ
            # by the noise alone)
            layers.append(nn.Linear(width, h, bias=prog.norm != "batchnorm"))
            if prog.norm == "layernorm":
                layers.append(nn.LayerNorm(h))
            if prog.norm == "batchnorm":
                layers.append(nn.BatchNorm1d(h))
            layers.append(nn.Tanh())
            if prog.dropout != "none":
                layers.append(nn.Dropout({"eval": 0.5, "p0": 0.0, "train": 0.3}[prog.dropout]))
            width = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, OUT)
        self.hook = prog.hook == "activation"
        if prog.hook == "param":
            self.head.weight.register_hook(lambda g: g * 0.5)
        self.lazy_mask = prog.lazy_mask
        self.mask = None
        self.flag = False
        self.scale = 1.0
        self.debug = prog.debug_print == "activation"
        self.sink = io.StringIO()   # what the step prints

    def forward(self, x):
        h = self.body(x)
        if self.debug:
            print("activation", h.mean(), file=self.sink)
        if self.lazy_mask:
            if self.mask is None:
                self.mask = (dg.arange(h.shape[1]) % 2 == 0).to(h.dtype) + 0.5
            h = h * self.mask
        if self.hook and h.requires_grad:
            h.register_hook(lambda g: g * 0.5)
        return self.head(h)


class LazyMomentum:
    """A hand-written SGD with momentum whose buffers are made at its first step."""

    def __init__(self, params, lr=0.05, mu=0.9):
        self.params, self.lr, self.mu, self.state = list(params), lr, mu, {}

    def step(self):
        with dg.no_grad():
            for p in self.params:
                if p not in self.state:
                    self.state[p] = dg.zeros_like(p)
                buf = self.state[p]
                buf.mul_(self.mu).add_(p.grad)
                p.add_(buf, alpha=-self.lr)


class HandAdam:
    """A hand-written Adam keeping a Python int ``state['step']`` and lazily made moments."""

    def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.state = {}

    def step(self):
        b1, b2 = self.betas
        with dg.no_grad():
            for p in self.params:
                st = self.state.setdefault(p, {})
                if not st:
                    st["step"] = 0
                    st["m"] = dg.zeros_like(p)
                    st["v"] = dg.zeros_like(p)
                st["step"] += 1
                st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat = st["m"] / (1 - b1 ** st["step"])
                v_hat = st["v"] / (1 - b2 ** st["step"])
                p.data.add_(-self.lr * m_hat / (v_hat.sqrt() + self.eps))


def _optimizer(prog: Program, params):
    if prog.update == "sgd":
        return dg.optim.SGD(params, lr=0.05)
    if prog.update == "sgd_momentum":
        return dg.optim.SGD(params, lr=0.05, momentum=0.9)
    if prog.update == "adam":
        return dg.optim.Adam(params, lr=0.01)
    if prog.update == "adamw":
        return dg.optim.AdamW(params, lr=0.01, weight_decay=0.1)
    if prog.update == "lazy_momentum":
        return LazyMomentum(params)
    if prog.update == "hand_adam":
        return HandAdam(params)
    return None


def _hand_update(kind: str, params, lr: float):
    """The hand-written SGD forms of real loops."""
    if kind == "data_add":
        for p in params:
            p.data.add_(p.grad, alpha=-lr)
    elif kind == "no_grad_isub":
        with dg.no_grad():
            for p in params:
                p -= lr * p.grad
    else:
        for p in params:
            p.data = p.data - lr * p.grad


def _data(prog: Program, seed: int):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(prog.steps):
        xs = [dg.tensor(rng.standard_normal((BATCH, IN)).astype(np.float32))
              for _ in range(prog.micro)]
        if prog.loss == "ce":
            ys = [dg.tensor(rng.integers(0, OUT, BATCH)) for _ in range(prog.micro)]
        else:
            ys = [dg.tensor(rng.standard_normal((BATCH, OUT)).astype(np.float32))
                  for _ in range(prog.micro)]
        batches.append((xs, ys))
    return batches


def build(prog: Program):
    """A fresh model, optimiser and step function for ``prog`` (same weights every time)."""
    dg.manual_seed(1234)
    model = Net(prog)
    if prog.dropout == "eval":
        model.eval()
    params = list(model.parameters())
    opt = _optimizer(prog, params)
    sched = None
    if prog.scheduler == "step":
        sched = dg.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    counter = {"n": 0}
    lrs = {"lr": 0.05}
    model.history = []   # (a plain list attribute: what the step keeps, compared)
    ema = [p.detach().clone() for p in params] if prog.ema else []
    model.ema = ema

    def schedule():
        if sched is not None:
            sched.step()
        if prog.scheduler == "lambda_set":
            for group in opt.param_groups:
                group["lr"] = group["lr"] * 0.8

    def step(xs, ys):
        n = counter["n"]
        if prog.counter == "closure":
            counter["n"] += 1
        if prog.counter == "module_attr":
            model.flag = not model.flag
        if n % prog.zero_every == 0:
            if opt is not None and prog.update not in HAND_OPTIMIZERS:
                opt.zero_grad(set_to_none=prog.set_to_none)
            else:
                model.zero_grad(set_to_none=prog.set_to_none)
        total = None
        for x, y in zip(xs, ys):
            if prog.penalty:
                x = x.clone().requires_grad_(True)
            logits = model(x)
            loss = _loss(prog, logits, y)
            if prog.penalty:
                g, = dg.autograd.grad(logits.sum(), x, create_graph=True)
                loss = loss + 0.1 * (g ** 2).sum(dim=1).mean()
            if prog.counter == "closure" and n % 2 == 1:
                loss = loss * 0.5
            if prog.counter == "module_attr" and model.flag:
                loss = loss * 2.0
            if prog.counter == "outside_attr":
                loss = loss * model.scale
            if prog.counter == "global":
                loss = loss * SCALE
            if prog.debug_print == "loss_format":
                print(f"loss {loss.item():.4f}", file=model.sink)
            if prog.debug_print == "numpy":
                spread = np.tanh(logits.detach().numpy()).std()
                loss = loss * dg.tensor(1.0 + 0.1 * spread, dtype=dg.float32)
            (loss / len(xs)).backward()
            total = loss.detach() if total is None else total + loss.detach()
        if prog.item_branch and total.item() > 1e6:
            total = total * 0
        if prog.debug_str:
            str(total)
        if prog.clip == "norm":
            nn.utils.clip_grad_norm_(params, 1.0)
        if prog.clip == "value":
            nn.utils.clip_grad_value_(params, 0.05)
        if prog.grad_clamp:
            for p in params:
                if p.grad is not None:
                    p.grad.data.clamp_(-0.5, 0.5)
        if opt is not None:
            opt.step()
        else:
            _hand_update(prog.update, params, lrs["lr"])
        if prog.ema:
            with dg.no_grad():
                for e, p in zip(ema, params):
                    e.mul_(0.8).add_(p.detach(), alpha=0.2)
        if prog.keep == "list_detach":
            model.history.append(total.detach())
        if prog.keep == "list_item":
            model.history.append(total.item())
        if prog.sched_inside:
            schedule()
        if prog.returns == "loss":
            return total
        if prog.returns == "loss_logits":
            return total, logits.detach()
        if prog.returns == "history":
            return logits
        if prog.returns == "eval":
            with dg.no_grad():
                return model(xs[0])
        return None

    return model, step, (schedule if not prog.sched_inside else lambda: None), counter


def _loss(prog: Program, logits, y):
    if prog.loss == "mse":
        return F.mse_loss(logits, y)
    if prog.ce_form == "masked":
        losses = F.cross_entropy(logits, y, reduction="none")
        mask = y != 0
        return dg.where(mask, losses, dg.zeros_like(losses)).sum() / mask.sum().clamp(min=1)
    if prog.ce_form == "categorical":
        return -dg.distributions.Categorical(logits=logits).log_prob(y).mean()
    return F.cross_entropy(logits, y)


def _numbers(out) -> list:
    if out is None:
        return []
    outs = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy().copy() for o in outs]


def run(prog: Program, seed: int, compiled: bool):
    """Run ``prog``'s step ``prog.steps`` times; the outputs, final parameters, Python
    state (with what the step printed), any ``dg.compile`` warnings and, compiled, the
    ``explain()`` report."""
    global SCALE
    SCALE = 1.0
    model, step, schedule, counter = build(prog)
    fn = dg.compile(step) if compiled else step
    outs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (xs, ys) in enumerate(_data(prog, seed)):
            outs.append(_numbers(fn(xs, ys)))
            schedule()
            if prog.counter == "outside_attr":
                model.scale = 1.0 + 0.5 * (i % 3)
            if prog.counter == "global":
                SCALE = 2.0 - 0.25 * i
    params = [p.detach().numpy().copy() for p in [*model.parameters(), *model.buffers(),
                                                   *model.ema]]
    kept = [float(h) for h in model.history]
    state = (counter["n"], model.flag, model.sink.getvalue(), len(kept))
    report = fn.explain() if compiled else ""
    outs.append([np.asarray(kept)])
    return outs, params, state, [str(w.message) for w in caught], report


def check(prog: Program, seed: int):
    """Eager and compiled agree; a graph break names a line here and splits the step
    (``explain()`` lists compiled pieces; it does not fall back to eager)."""
    outs_e, params_e, state_e, _, _ = run(prog, seed, compiled=False)
    outs_c, params_c, state_c, warned, report = run(prog, seed, compiled=True)
    assert state_c == state_e, f"{prog}: Python state (counter, flag, prints) differs; {warned}"
    breaks = [w for w in warned if "graph break" in w]
    # a tensor appended to a list at every call: after MADE_STATE_LIMIT calls that each
    # made one, the step runs its Python at every call (no break, no fallback); but while
    # Python numbers are graph inputs (a hand-written Adam's step) it runs eagerly, with a
    # warning naming the list
    kept_every_call = [w for w in breaks if "made at every call and kept" in w]
    assert not kept_every_call or prog.keep == "list_detach", kept_every_call
    for w in breaks:
        assert HERE in w, f"graph break not naming the user's line: {w}"
        assert "split there" in w or w in kept_every_call, \
            f"{prog}: a break sent the step to eager: {w}"
    if breaks and not kept_every_call:
        assert "compiled piece" in report and "running it eagerly" not in report, report
    if prog.item_branch or prog.debug_str or prog.debug_print != "none" or \
            prog.keep == "list_item":
        assert breaks, f"{prog}: no graph break reported; {warned}"
    for i, (a, b) in enumerate(zip(outs_c, outs_e)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{prog}: output of step {i}; {warned}")
    for k, (u, v) in enumerate(zip(params_c, params_e)):
        np.testing.assert_allclose(u, v, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{prog}: parameter {k}; {warned}")
    return breaks


@pytest.mark.parametrize("seed", range(EXAMPLES), ids=lambda s: f"program[{s}]")
def test_generated_step_matches_eager(seed):
    check(generate(seed), seed)


def _pinned(**choices) -> Program:
    base = dict(hidden=(7,), norm="none", lazy_mask=False, set_to_none=True,
                item_branch=False, dropout="none", loss="mse", update="sgd",
                scheduler="none", sched_inside=False, counter="none", micro=1, zero_every=1,
                clip="none", hook="none", debug_str=False, returns="loss", steps=5,
                debug_print="none")
    return Program(**{**base, **choices})


@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_lr_set_inside_compiled_step(update):
    """Found by the generator: ``param_group['lr'] = lr * 0.8`` inside the compiled step,
    once lr is a graph input (the third call), stored a traced tensor in param_groups and
    graph-broke, losing that call's decay. The write is now an output of the graph, and the
    group holds a Python float again after each call, as eager leaves it."""
    check(_pinned(update=update, scheduler="lambda_set", sched_inside=True), 1)


@pytest.mark.parametrize("choices", [dict(debug_str=True, counter="closure"),
                                     dict(debug_str=True, counter="module_attr"),
                                     dict(scheduler="step", sched_inside=True,
                                          counter="closure", update="adam")],
                         ids=["str_closure_counter", "str_module_flag", "steplr_counter"])
def test_python_side_effects_before_a_graph_break_happen_once(choices):
    """Found by the generator: a graph break sends the call to eager from its start, and
    the trace had already run the Python before the break (a closure counter incremented,
    a module flag toggled): the aborted trace now puts those scalars back first."""
    check(_pinned(**choices), 2)


def test_plain_object_optimizer_python_int_step_is_guarded():
    """Found by the generator: a hand-written Adam that is a plain object (not a
    ``dg.optim.Optimizer``) keeps ``self.state[p]["step"]`` a Python int; it was baked in
    at trace time unguarded, so the bias correction stayed at step 2's and the compiled
    parameters drifted silently. It is a graph input now (capture/symbolic.py): the trace
    that incremented it makes it one, so it costs no retrace per step."""
    prog = _pinned(update="hand_adam", steps=4)
    check(prog, 3)
    model, step, _, _ = build(prog)
    fn = dg.compile(step)
    for xs, ys in _data(prog, 3):
        fn(xs, ys)
    report = fn.explain()
    assert "opt.state[0]['step']" in report and "a graph input from now on" in report
    assert len(fn.records) <= 2


class _LazyMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.cache = None     # (a None reached before ``mask``'s)
        self.mask = None

    def forward(self, x):
        if self.mask is None:
            self.mask = dg.ones(3) * 0.5
        return self.fc(x) * self.mask


def test_graph_break_after_lazy_state_restores_a_shared_none():
    """Found by the generator (a mask made at the first forward, then an ``.item()``
    branch): undoing the aborted trace's stored mask deleted ``self.mask`` instead of
    putting its ``None`` back, because a ``None`` already met elsewhere was not recorded,
    and the eager fallback then raised AttributeError."""
    model = _LazyMask()

    def step(x):
        y = model(x).sum()
        if y.item() > 1e6:
            y = y * 0
        return y

    x = dg.ones(2, 3)
    with pytest.warns(UserWarning, match="graph break"):
        out = dg.compile(step)(x)
    np.testing.assert_allclose(out.detach().numpy(), step(x).detach().numpy())
    assert isinstance(model.mask, dg.Tensor)


def test_loss_history_list_of_detached_tensors():
    """Found with the programs of tests/torch_programs/: ``history.append(loss.detach())``
    in a compiled step. The kept tensor became real after the first call but still aliased
    the trace's intermediate ``loss`` (``detach`` shares storage), so the next trace read
    a value of the first graph and broke, and the eager fallback then crashed on the
    traced tensor that trace had appended (an aborted trace now takes back what it
    appended to lists, and a kept ``detach`` owns its storage)."""
    check(_pinned(keep="list_detach", steps=5), 4)
    check(_pinned(keep="list_detach", returns="history", update="adam", steps=4), 5)


def _hook_and_random_steps():
    """Two idioms of third-party loops that make a step run its Python at every call: a
    forward hook storing an activation in a dict that the loss reads (feature extraction,
    perceptual losses) and teacher forcing drawn with Python's ``random``."""
    dg.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, 7), nn.Tanh(), nn.Linear(7, OUT))
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    feats = {}
    model[1].register_forward_hook(lambda m, i, o: feats.__setitem__("act", o))
    rand = random.Random(0)

    def step(x, y):
        opt.zero_grad()
        teacher = rand.random() < 0.5
        out = model(x if teacher else x * 0.5)
        loss = F.mse_loss(out, y) + 0.01 * feats["act"].pow(2).mean()
        loss.backward()
        opt.step()
        return loss
    return model, step


def test_hook_kept_activation_and_python_random_stay_compiled_and_equal():
    """Found with third-party idioms: each was a graph break after which the step ran
    eagerly; now the step runs its Python at every call with its ops compiled (no break,
    no fallback), with eager's results."""
    rng = np.random.default_rng(0)
    batches = [(dg.tensor(rng.standard_normal((BATCH, IN)).astype(np.float32)),
                dg.tensor(rng.standard_normal((BATCH, OUT)).astype(np.float32)))
               for _ in range(4)]
    results = []
    for compiled in (False, True):
        model, step = _hook_and_random_steps()
        fn = dg.compile(step) if compiled else step
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = [float(fn(x, y)) for x, y in batches]
        results.append((losses, [p.detach().numpy().copy() for p in model.parameters()],
                        [str(w.message) for w in caught if "graph break" in str(w.message)]))
    (losses_e, params_e, _), (losses_c, params_c, breaks) = results
    assert not breaks and not fn.eager_only and fn._split is not None, fn.explain()
    np.testing.assert_allclose(losses_c, losses_e, rtol=RTOL, atol=ATOL)
    for u, v in zip(params_c, params_e):
        np.testing.assert_allclose(u, v, rtol=RTOL, atol=ATOL)
