"""Guards: what a cached graph assumed about its inputs, and why a call needs a new one.

A call's *signature* is a tuple of hashable facts, one per argument leaf (tensor shape,
dtype and requires_grad; Python scalar values), plus the modes (grad mode, autocast's
dtype: a graph traced with autocast's casts never serves a call without, and the default
float dtype: ``dg.zeros(3)`` or ``int_tensor * 0.5`` trace to its dtype) and, for modules, the
training flags, parameter identities and the identities of their tensor attributes and
buffers. Equal signatures reuse a graph. When a new signature misses the cache,
:func:`explain_miss` compares it with the nearest cached one and says which guard failed
and what to do about it.
"""
from __future__ import annotations

from .. import dtypes
from ..autograd.tape import grad_mode
from ..dispatch import autocast, mha_fastpath
from ..tensor import Tensor
from .pyvalues import ABSENT, INPUT, Slot, fact, is_scalar, object_scalars, read

# hyper-parameters made graph inputs once they change (schedulers set them at every step:
# OneCycleLR and CyclicLR move momentum, or Adam's beta1, too; dualgraph's optimisers take
# them as tensors)
DYNAMIC_HYPER = ("lr", "momentum", "betas")
HISTORY = "True (with autograd history)"   # a tensor argument's requires_grad fact
BAKED_FIX = ("expected when it changes rarely; a value that changes often is better a "
             "tensor (dg.tensor(value), updated in place), which the graph takes as an input")


def arg_facts(leaf, dynamic_dims: dict | None):
    """The guarded facts of one argument leaf."""
    if isinstance(leaf, Tensor):
        shape = tuple(leaf._data.shape)
        if dynamic_dims:
            shape = tuple(dynamic_dims.get(i, d) for i, d in enumerate(shape))
            shape = tuple(str(d) if not isinstance(d, int) else d for d in shape)
        # (requires_grad: False, True for a leaf, HISTORY for a tensor with autograd
        # history, which a backward inside the function must not take as a leaf)
        grad = bool(leaf.requires_grad) and (leaf.grad_fn is None or HISTORY)
        return ("tensor", shape, leaf._data.dtype, grad)
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return ("python", type(leaf).__name__, leaf)
    # (a plain object's public scalar attributes too: ``fn(x, cfg)`` reads ``cfg.scale``)
    return ("object", type(leaf).__name__, id(leaf), object_scalars(leaf))


_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def module_facts(roots, inputs=frozenset(), kept=frozenset()) -> tuple:
    """Training flags of every submodule, the identity of every parameter and the Python
    scalars in the modules' attributes (``self.scale``: read by ``forward``, baked into the
    graph), of each ``(name, module)`` in ``roots``; not those in ``inputs``
    (``(id(module), name)``: graph inputs, guarded as slots, capture/symbolic.py); and the
    identity of the tensors the modules hold as buffers or plain attributes, but for those
    in ``kept`` (tensors the graph itself stores there at every call, compile.py: what
    they hold is guarded by each graph's ``Held``)."""
    training, params, scalars, tensors, hooks = [], [], [], [], []
    for prefix, root in roots:
        for path, m in root.named_modules(prefix=prefix):
            training.append(m.training)
            # (the hooks a trace ran or set up, by their handles' ids)
            hooks.append(tuple(tuple(getattr(m, name, ())) for name in _HOOKS))
            scalars += [(path, k, type(v), v) for k, v in vars(m).items()
                        if k != "training" and is_scalar(v) and (id(m), k) not in inputs
                        and (id(m), k) not in kept]   # (kept: Held.unset guards a None)
            # (a graph reads a captured tensor by identity: one assigned anew is another)
            tensors += [(path, k, id(v)) for k, v in vars(m).items()
                        if isinstance(v, Tensor) and (id(m), k) not in kept]
            tensors += [(path, k, id(v)) for k, v in m._buffers.items()]
        # (and whether each requires grad: freezing a layer changes the step's graph)
        params += [(id(p), p.requires_grad) for p in root.parameters()]
    return (tuple(training), tuple(params), tuple(scalars), tuple(tensors), tuple(hooks))


class ModuleFacts:
    """``module_facts``, recomputed only when some module changed: modules count their
    attribute changes (``_structure_version``), so an unchanged model costs one check, and
    a read of its parameters' requires_grad (``p.requires_grad = False``, a plain
    attribute, counts nothing). ``roots``: the compiled module (``self``) and the modules
    the function names."""

    def __init__(self, module):
        self.roots = [("self", module)] if module is not None else []
        self.version, self.facts = None, ()
        self.inputs: set = set()   # (id(module), name) of the attributes that are inputs
        self.kept: set = set()     # (id(module), name) of tensor attributes a graph stores
        self.params: list = []     # the parameters, and whether each required grad
        self.requires: list = []

    def get(self) -> tuple:
        if not self.roots:
            return ()
        counter = getattr(self.roots[0][1], "_structure_version", None)
        version = counter() if counter is not None else None
        if (version is None or version != self.version
                or [p.requires_grad for p in self.params] != self.requires):
            facts = module_facts(self.roots, self.inputs, self.kept)
            # (facts equal to the last keep the last's tuple: a signature holds that very
            # tuple, and comparing a tuple with itself checks its five parts by identity,
            # where an equal copy compares every attribute of every module at each call)
            self.facts, self.version = (self.facts if facts == self.facts else facts), version
            self.params = [p for _, root in self.roots for p in root.parameters()]
            self.requires = [p.requires_grad for p in self.params]
        return self.facts

    def scalar_slots(self) -> list:
        """The modules' scalar attributes as slots (to write back what a trace changed)."""
        return [Slot("attr", m, k, f"{path}.{k}") for prefix, root in self.roots
                for path, m in root.named_modules(prefix=prefix)
                for k, v in vars(m).items() if k != "training" and is_scalar(v)]


def optimizer_facts(optimizers, dynamic=frozenset()) -> tuple:
    """Per optimiser the function uses: whether its state exists yet (the first step
    creates it, a Python branch) and its Python-number hyper-parameters (baked in), but
    for those in ``dynamic`` (``(optimiser, group, key)``: graph inputs, see
    ``Compiled._hyper_inputs``) only that they are still numbers."""
    out = []
    for i, opt in enumerate(optimizers):
        if dynamic:
            hyper = tuple(tuple((k, _input_fact(v) if (i, j, k) in dynamic else v)
                                for k, v in sorted(group.items())
                                if k != "params" and isinstance(v, (bool, int, float, tuple)))
                          for j, group in enumerate(opt.param_groups))
        else:   # (the usual case, every call of a training step: kept lean)
            hyper = tuple(tuple((k, v) for k, v in sorted(group.items())
                                if k != "params" and isinstance(v, (bool, int, float, tuple)))
                          for group in opt.param_groups)
        out.append((len(opt.state), hyper))
    return tuple(out)


def _input_fact(v):
    return ("graph input", type(v))


def changed_hyper(new: tuple, old: tuple) -> list:
    """``(optimiser, group, key)`` of the learning rates, momentums and betas that differ
    between the optimiser facts ``new`` and ``old``: made graph inputs, so that a schedule
    changing them at every step does not retrace at every step."""
    out = []
    for i, (a, b) in enumerate(zip(new, old)):
        for j, (ga, gb) in enumerate(zip(a[1], b[1])):
            for (k, va), (kb, vb) in zip(ga, gb):
                if (k == kb and k in DYNAMIC_HYPER and _floats(va) and _floats(vb)
                        and va != vb):
                    out.append((i, j, k))
    return out


def _floats(v) -> bool:
    """A float, or a tuple of floats (Adam's betas)."""
    return type(v) is float or (type(v) is tuple and all(type(x) is float for x in v))


def signature(leaves, spec, leaf_dynamic: list, module_facts: tuple, optimizers=(),
              slots=(), dynamic=frozenset(), number_args=None) -> tuple:
    """The guarded facts of one call, from its flattened arguments; ``slots``: the Python
    values the function reads (capture/pyvalues.py); ``number_args``: ``{position: (type,
    tensor)}`` of the Python number arguments that are graph inputs (only their type is
    guarded, capture/symbolic.py)."""
    if leaf_dynamic:
        facts = tuple([arg_facts(leaf, leaf_dynamic[i]) for i, leaf in enumerate(leaves)])
    else:   # (list comprehensions: cheaper than generators on every call)
        facts = tuple([arg_facts(leaf, None) for leaf in leaves])
    if len(facts) > 1:
        facts = _aliases(leaves, facts)
    if number_args:
        facts = tuple(("python", f[1], INPUT)
                      if i in number_args and type(leaves[i]) is number_args[i][0] else f
                      for i, f in enumerate(facts))
    return (spec, facts, mode_facts(), module_facts,
            optimizer_facts(optimizers, dynamic) if optimizers else (),
            read(slots) if slots else ())


def _aliases(leaves, facts: tuple) -> tuple:
    """``facts`` with each tensor leaf that is an earlier leaf's very tensor (``f(x, x)``)
    as ``("alias", that leaf's position, its own facts)``: the trace binds it once, as one
    graph input read through both, so a call whose arguments alias otherwise (or not at
    all) needs another graph."""
    ids = [id(x) for x in leaves if isinstance(x, Tensor)]
    if len(set(ids)) == len(ids):   # (the usual call: distinct tensors)
        return facts
    first, out = {}, list(facts)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            j = first.setdefault(id(leaf), i)
            if j != i:
                out[i] = ("alias", j, facts[i])
    return tuple(out)


def mode_facts() -> tuple:
    """The modes a trace depends on: grad mode, the dtype autocast casts to (None when it
    is off), the default float dtype (``dg.set_default_dtype``'s) that creation ops and
    Python floats take, and torch's attention fast-path switch (``dg.backends.mha``:
    whether a ``TransformerEncoder`` zeroes its padded positions)."""
    return (grad_mode.enabled, None if autocast.dtype is None else autocast.dtype.name,
            dtypes.default_float().name, mha_fastpath[0])


def describe_guards(sig, leaf_names: list, slots=()) -> list[str]:
    """The guards of a signature, as lines a user can read."""
    spec, facts, (grad_enabled, low, default_float, fastpath), mod, opts, values = sig
    lines = []
    for name, leaf in zip(leaf_names, facts):
        if leaf[0] == "alias":
            lines.append(f"{name} is the very tensor passed as {leaf_names[leaf[1]]} (one "
                         "graph input)")
        elif leaf[0] == "tensor":
            lines.append(f"{name}: shape {leaf[1]}, dtype {leaf[2]}, "
                         f"requires_grad={leaf[3]}")
        elif leaf[0] == "python" and leaf[2] is INPUT:
            lines.append(f"{name}: a Python {leaf[1]}, fed to the graph as an input at every "
                         "call")
        elif leaf[0] == "python":
            lines.append(f"{name} == {leaf[2]!r} (a Python {leaf[1]}, baked into the graph)")
        else:
            lines.append(f"{name} is the same {leaf[1]} object, its public Python scalar "
                         "attributes unchanged")
    lines.append(f"grad mode {'enabled' if grad_enabled else 'disabled'}")
    lines.append(f"autocast to {low}" if low else "autocast off")
    if default_float != "float32":
        lines.append(f"default dtype {default_float}")
    if not fastpath:
        lines.append("dg.backends.mha fast path disabled")
    if mod:
        lines.append("module training flags, parameter and tensor-attribute identities and the "
                     f"{len(mod[2])} Python scalar attributes of the modules")
    for slot, (kind, v) in zip(slots, values):
        if v is INPUT:
            lines.append(f"{slot.name}: a Python {kind.__name__}, fed to the graph as an "
                         "input at every call")
        else:
            lines.append(f"{slot.name} == {_show(v)} (a Python value read, baked into the "
                         "graph)")
    if opts:
        lines.append("optimiser state created and hyper-parameters (lr, ...) unchanged")
    return lines


def _show(v) -> str:
    return "absent" if v is ABSENT else repr(v)


def _scalar_change(new: tuple, old: tuple) -> str:
    """``self.scale changed from 2.0 to 5.0``: the first module attribute that differs."""
    before = {(path, k): v for path, k, _, v in old}
    after = {(path, k): v for path, k, _, v in new}
    for (path, k) in list(after) + [key for key in before if key not in after]:
        a, b = after.get((path, k), ABSENT), before.get((path, k), ABSENT)
        if fact(a) != fact(b):
            return f"{path}.{k} changed from {_show(b)} to {_show(a)}"
    return "a module attribute changed"


def explain_miss(new, old, leaf_names: list, slots=()) -> tuple[str, str]:
    """(which guard failed, the suggested fix) for a call with signature ``new``."""
    if new[0] != old[0] or len(new[1]) != len(old[1]):
        return ("the structure of the arguments changed",
                "call with the same argument structure, or expect one graph per structure")
    for name, a, b in zip(leaf_names, new[1], old[1]):
        if a == b:
            continue
        if "alias" in (a[0], b[0]):
            other = leaf_names[(a if a[0] == "alias" else b)[1]]
            now = "now" if a[0] == "alias" else "no longer"
            return (f"{name} is {now} the very tensor passed as {other}",
                    "expected: one graph per pattern of arguments passed twice")
        if a[0] == "tensor" and b[0] == "tensor":
            if a[1] != b[1]:
                dims = [i for i, (x, y) in enumerate(zip(a[1], b[1])) if x != y]
                if len(a[1]) != len(b[1]) or not dims:
                    return (f"{name}.shape changed from {b[1]} to {a[1]}",
                            "keep the rank fixed")
                d = dims[0]
                return (f"{name}.shape[{d}] changed from {b[1][d]} to {a[1][d]}",
                        f"mark dim {d} dynamic: dg.compile(fn, dynamic=True) or "
                        f"dynamic={{'{name.split('[')[0]}': {{{d}: 'B'}}}}")
            if a[2] != b[2]:
                return (f"{name}.dtype changed from {b[2]} to {a[2]}",
                        "cast inputs to one dtype before calling")
            return (f"{name}.requires_grad changed from {b[3]} to {a[3]}",
                    "keep requires_grad the same between calls")
        if a[0] == "python" and b[0] == "python":
            return (f"{name} changed from {b[2]!r} to {a[2]!r} (Python values are baked in)",
                    f"pass {name} as a tensor (dg.tensor(value)) so the graph takes it as an "
                    "input")
        if a[0] == b[0] == "object" and a[1:3] == b[1:3]:
            before = dict(b[3])
            for k, v in a[3]:
                if before.get(k) != v:
                    old = _show(before[k][1]) if k in before else "absent"
                    return (f"{name}.{k} changed from {old} to {_show(v[1])} (Python values "
                            "are baked in)", BAKED_FIX)
            return (f"{name}: an attribute was removed", BAKED_FIX)
        return (f"{name} changed from a {b[1]} to a {a[1]}", "pass arguments of one kind")
    if new[2][0] != old[2][0]:
        return ("grad mode changed", "expected: one graph with and one without grad")
    if new[2][1] != old[2][1]:
        return (f"autocast changed from {old[2][1] or 'off'} to {new[2][1] or 'off'}",
                "expected: one graph per autocast setting (its casts are graph nodes)")
    if new[2][3] != old[2][3]:
        return ("dg.backends.mha.set_fastpath_enabled changed", "expected: one graph per "
                "setting (a TransformerEncoder's padded positions are zero only with it)")
    if new[2] != old[2]:
        return (f"the default dtype changed from {old[2][2]} to {new[2][2]} "
                "(dg.set_default_dtype)", "expected: one graph per default dtype (new "
                "tensors and Python floats take it)")
    if new[3] != old[3]:
        if new[3][0] != old[3][0]:
            return ("a module's training flag changed (train()/eval())",
                    "expected: one graph for training and one for evaluation")
        if new[3][4:] != old[3][4:]:
            return ("a module's hook was registered or removed",
                    "expected: one graph per set of hooks (register them before compiling)")
        if new[3][1] != old[3][1] and [i for i, _ in new[3][1]] == [i for i, _ in old[3][1]]:
            return ("a parameter's requires_grad changed (a layer frozen or unfrozen)",
                    "expected: one graph per set of parameters that require grad")
        if new[3][1] != old[3][1]:
            return ("the module's parameters were replaced",
                    "update parameters in place (optimisers do) instead of assigning new ones")
        if new[3][3] != old[3][3]:
            changed = sorted({f"{p}.{k}" if p else k for p, k, _ in set(new[3][3]) ^ set(old[3][3])})
            return (f"the module's tensor {', '.join(changed)} was assigned anew (a graph reads "
                    "the tensor it captured)", "update it in place (t.copy_(new)) instead of "
                    "assigning a new tensor, if it changes at every call")
        return (_scalar_change(new[3][2], old[3][2]) + " (Python values are baked in)",
                BAKED_FIX)
    for slot, a, b in zip(slots, new[5], old[5]):
        if a != b:
            return (f"{slot.name} changed from {_show(b[1])} to {_show(a[1])} (Python values "
                    "are baked in)", BAKED_FIX)
    for a, b in zip(new[4], old[4]):
        if a[0] != b[0]:
            return ("an optimiser's state was created (its first step)",
                    "expected once: the first step runs a graph that creates the state")
        for ga, gb in zip(a[1], b[1]):
            for (k, va), (_, vb) in zip(ga, gb):
                if va != vb:
                    return (f"optimiser hyper-parameter {k} changed from {vb!r} to {va!r} "
                            "(Python numbers are baked in)",
                            f"pass {k} as a tensor, e.g. {k}=dg.tensor({vb!r}); schedulers "
                            "then update it in place")
    return ("an unknown guard failed", "report this")
