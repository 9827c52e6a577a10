"""Guards: what a cached graph assumed about its inputs, and why a call needs a new one.

A call's *signature* is a tuple of hashable facts, one per argument leaf (tensor shape,
dtype and requires_grad; Python scalar values), plus the grad mode and, for modules, the
training flags and parameter identities. Equal signatures reuse a graph. When a new
signature misses the cache, :func:`explain_miss` compares it with the nearest cached one and
says which guard failed and what to do about it.
"""
from __future__ import annotations

from ..autograd.tape import grad_mode
from ..tensor import Tensor


def arg_facts(leaf, dynamic_dims: dict | None):
    """The guarded facts of one argument leaf."""
    if isinstance(leaf, Tensor):
        shape = tuple(leaf._data.shape)
        if dynamic_dims:
            shape = tuple(dynamic_dims.get(i, d) for i, d in enumerate(shape))
            shape = tuple(str(d) if not isinstance(d, int) else d for d in shape)
        return ("tensor", shape, leaf._data.dtype, bool(leaf.requires_grad))
    if leaf is None or isinstance(leaf, (bool, int, float, str)):
        return ("python", type(leaf).__name__, leaf)
    return ("object", type(leaf).__name__, id(leaf))


def module_facts(module) -> tuple:
    """Training flags of every submodule and the identity of every parameter."""
    if module is None:
        return ()
    training = tuple(m.training for m in module.modules())
    params = tuple(id(p) for p in module.parameters())
    return (training, params)


class ModuleFacts:
    """``module_facts``, recomputed only when some module changed: modules count their
    attribute changes (``_structure_version``), so an unchanged model costs one check."""

    def __init__(self, module):
        self.module, self.version, self.facts = module, None, ()

    def get(self) -> tuple:
        if self.module is None:
            return ()
        counter = getattr(self.module, "_structure_version", None)
        version = counter() if counter is not None else None
        if version is None or version != self.version:
            self.facts = module_facts(self.module)
            self.version = version
        return self.facts


def optimizer_facts(optimizers) -> tuple:
    """Per optimiser the function uses: whether its state exists yet (the first step
    creates it, a Python branch) and its Python-number hyper-parameters (baked in)."""
    out = []
    for opt in optimizers:
        hyper = tuple(tuple((k, v) for k, v in sorted(group.items())
                            if k != "params" and isinstance(v, (bool, int, float, tuple)))
                      for group in opt.param_groups)
        out.append((len(opt.state), hyper))
    return tuple(out)


def signature(leaves, spec, leaf_dynamic: list, module_facts: tuple, optimizers=()) -> tuple:
    """The guarded facts of one call, from its flattened arguments."""
    if leaf_dynamic:
        facts = tuple([arg_facts(leaf, leaf_dynamic[i]) for i, leaf in enumerate(leaves)])
    else:   # (list comprehensions: cheaper than generators on every call)
        facts = tuple([arg_facts(leaf, None) for leaf in leaves])
    return (spec, facts, grad_mode.enabled, module_facts,
            optimizer_facts(optimizers) if optimizers else ())


def describe_guards(sig, leaf_names: list) -> list[str]:
    """The guards of a signature, as lines a user can read."""
    spec, facts, grad_enabled, mod, opts = sig
    lines = []
    for name, fact in zip(leaf_names, facts):
        if fact[0] == "tensor":
            lines.append(f"{name}: shape {fact[1]}, dtype {fact[2]}, "
                         f"requires_grad={fact[3]}")
        elif fact[0] == "python":
            lines.append(f"{name} == {fact[2]!r} (a Python {fact[1]}, baked into the graph)")
        else:
            lines.append(f"{name} is the same {fact[1]} object")
    lines.append(f"grad mode {'enabled' if grad_enabled else 'disabled'}")
    if mod:
        lines.append("module training flags and parameter identities")
    if opts:
        lines.append("optimiser state created and hyper-parameters (lr, ...) unchanged")
    return lines


def explain_miss(new, old, leaf_names: list) -> tuple[str, str]:
    """(which guard failed, the suggested fix) for a call with signature ``new``."""
    if new[0] != old[0] or len(new[1]) != len(old[1]):
        return ("the structure of the arguments changed",
                "call with the same argument structure, or expect one graph per structure")
    for name, a, b in zip(leaf_names, new[1], old[1]):
        if a == b:
            continue
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
        return (f"{name} changed from a {b[1]} to a {a[1]}", "pass arguments of one kind")
    if new[2] != old[2]:
        return ("grad mode changed", "expected: one graph with and one without grad")
    if new[3] != old[3]:
        if new[3][0] != old[3][0]:
            return ("a module's training flag changed (train()/eval())",
                    "expected: one graph for training and one for evaluation")
        return ("the module's parameters were replaced",
                "update parameters in place (optimisers do) instead of assigning new ones")
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
