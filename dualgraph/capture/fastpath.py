"""A compiled call without the general machinery: its guards and call inlined.

The general path of ``Compiled.__call__`` flattens the arguments, computes the signature of
every guard as a tuple (capture/guards.py), looks it up, gathers the graph's input arrays,
checks their types and rebuilds the outputs: some twenty Python calls, ~9 us, as much as
a batch-1 MLP's three products take on two cores. For the common inference entry (tensor
arguments only, no optimiser, one tensor out, nothing written back) this module writes one
function that checks the same facts inline and calls the generated graph function
directly. For ``nn.Linear(784, 10)`` in eval mode, called on a (1, 784) tensor under
``no_grad``, it writes::

    def fast_call(args, kwargs):
        if kwargs or len(args) != 1 or modes.tracer is not None or dispatch.profiler is not None or grad_mode.enabled is not False or default_float() != traced_float or mha_fastpath[0] is not True:
            return MISS
        if autocast.dtype is not None:
            return MISS
        a0, = args
        if type(a0) is not Tensor or a0.requires_grad is not False:
            return MISS
        x0 = a0._data
        if x0.shape != (1, 784) or x0.dtype != dtype_0:
            return MISS
        if facts.get() != module_facts:
            return MISS
        seen = mutations[0]
        if seen != checked[0]:
            if (frozen_0._data is not farray_0 or frozen_0._version[0] != 1
                or frozen_1._data is not farray_1 or frozen_1._version[0] != 1):
                return MISS
            checked[0] = seen
        return make(graph_fn(x0)[0])

Any fact that differs returns ``MISS`` and the call takes the general path, which guards,
retraces and explains as before. The weight and bias are constants of the graph there
(frozen under ``no_grad``, capture/freeze.py): valid while each tensor holds the same
array at the same version. Tensors the graph reads as inputs (when they require grad, or
the step updates them) are passed as operands instead, and their arrays must be the very
arrays whose types the executable checked (a parameter given new data takes the general
path): ``cap_1._data is not array_1`` returns ``MISS``. Those tensors are read only when
``tensor.MUTATIONS`` (``mutations``), which every in-place write and every new array
given to a tensor counts, moved since they were last found as held (``checked``): a model
called again with nothing changed compares one number, not two attributes of each of its
parameters and buffers.

A training step (an optimiser's update and the gradients written back, nothing recorded
on the autograd tape) gets the same inlined guards, plus its optimisers' facts (state
created, hyper-parameters) and, for each array the graph updates in place (a donated
input), that it is still writeable (else the general path's private copy is needed); its
results go through the entry's own ``finish``, as the general path's do. After the
argument and module guards, an SGD-momentum step of a two-layer MLP that calls
``zero_grad()`` continues::

        if optimizer_facts(optimizers) != optimizer_state:
            return MISS
        if (cap_2._data is not array_2
            or cap_3._data is not array_3
            ...   # one line per captured array: parameters, momentum buffers
            or cap_9._data is not array_9):
            return MISS
        if not (array_2.flags.writeable
            and array_3.flags.writeable
            ...   # one line per array the step updates in place
            and array_9.flags.writeable):
            return MISS
        release()
        return finish(graph_fn(x0, x1, array_2, array_3, ..., array_9), [a0, a1])

``release()`` drops the gradients that ``zero_grad()`` clears before the graph runs, so the
new ones can reuse their memory. The same step without ``zero_grad()`` accumulates into
the gradients instead: it reads each one, which must exist with the traced type and be
writeable and C-contiguous (``g6.flags.writeable and g6.flags.c_contiguous``), since the
graph adds into it in place::

        grad_6 = cap_6.grad
        if grad_6 is None:
            return MISS
        g6 = grad_6._data
        if g6.shape != (3,) or g6.dtype != dtype_g6:
            return MISS

A graph with symbolic dims (automatic dynamic dims, ``dynamic=``) checks each argument's
rank, dtype and numbers, and binds each symbol's size where it first appears
(``n0 = x0.shape[0]``; ``if x1.shape != (n0, 2,)``); automatic dims add the rules of their
signature (each size above 1, distinct symbols of distinct sizes, and not a shape a static
graph was traced for, which runs that graph). A graph with preallocated buffers (planned
for its sizes, codegen/buffers.py) takes them as ``Executable._call`` does: one set per
symbol sizes, made by the executable at the first call of those sizes, under its lock::

        bufs = buffers.get((n0,))
        if bufs is None:
            bufs = buffers[(n0,)] = buffers_for([x0, x1, array_2, ...])
        if not lock.acquire(blocking=False):
            return MISS
        try:
            return finish(graph_fn(x0, x1, array_2, ..., bufs), [a0, a1])
        finally:
            lock.release()

A step traced while a parameter had no gradient also checks that it still has none
(``absent_0.grad is not None`` returns ``MISS``): its graph writes that gradient fresh,
where eager would now add to the one there.
"""
from __future__ import annotations

from .. import dispatch
from .. import dtypes
from ..autograd.tape import grad_mode
from ..codegen.python import compile_source
from ..dispatch import autocast, mha_fastpath, modes
from ..tensor import MUTATIONS, Tensor
from .guards import optimizer_facts
from .pyvalues import read
from .scope import rebound

MISS = object()   # the fast path does not apply to this call


def fast_path(compiled, entry, sig):
    """The inlined call of ``entry`` for calls with signature ``sig``, or None when the
    entry needs the general path (see the module docstring)."""
    if not applies(compiled, entry, sig):
        return None
    spec, facts, (grad_enabled, low, default_float, fastpath), module_facts, optimizer_state, \
        values = sig
    exe, capture = entry.executable, entry.capture
    names = {"MISS": MISS, "modes": modes, "dispatch": dispatch, "grad_mode": grad_mode,
             "Tensor": Tensor, "autocast": autocast, "make": Tensor._make,
             "graph_fn": exe.program.fn, "finish": entry.finish,
             "facts": compiled._module_facts, "module_facts": module_facts,
             "optimizer_facts": optimizer_facts, "optimizers": compiled._optimizers,
             "optimizer_state": optimizer_state, "default_float": dtypes.default_float,
             "traced_float": dtypes.to_np(default_float), "mha_fastpath": mha_fastpath}
    # (a profiler times the nodes: the general path runs the timed copy of the code)
    lines = [f"if kwargs or len(args) != {len(facts)} or modes.tracer is not None"
             " or dispatch.profiler is not None"
             f" or grad_mode.enabled is not {bool(grad_enabled)}"
             " or default_float() != traced_float"
             f" or mha_fastpath[0] is not {bool(fastpath)}:",
             "    return MISS"]
    if low is not None:   # (the usual call runs without autocast: one check of None)
        names["low"] = dtypes.to_np(low)
        lines += ["if autocast.dtype != low:", "    return MISS"]
    else:
        lines += ["if autocast.dtype is not None:", "    return MISS"]
    if facts:
        lines.append(", ".join(f"a{i}" for i in range(len(facts))) + ", = args")
    if len(facts) > 1:   # (distinct tensors: one passed twice is another signature)
        ids = ", ".join(f"id(a{i})" for i in range(len(facts)))
        lines += [f"if len({{{ids}}}) != {len(facts)}:", "    return MISS"]
    symbols: dict = {}   # symbolic dim -> the variable holding its size in this call
    for i, (_, shape, dtype, requires_grad) in enumerate(facts):
        names[f"dtype_{i}"] = dtype
        leaf = "is None" if requires_grad is True else "is not None"
        lines += [f"if type(a{i}) is not Tensor or a{i}.requires_grad is not "
                  f"{requires_grad is not False}:", "    return MISS"]
        if requires_grad is not False:   # (a leaf, or a tensor with history: guards.py)
            lines += [f"if a{i}.grad_fn {leaf}:", "    return MISS"]
        lines += [f"x{i} = a{i}._data"]
        if all(type(d) is int for d in shape):
            lines += [f"if x{i}.shape != {tuple(shape)!r} or x{i}.dtype != dtype_{i}:",
                      "    return MISS"]
        else:
            lines += _symbolic_shape(f"x{i}", shape, f"dtype_{i}", symbols)
    if symbols:
        lines += _symbol_rules(compiled, spec, symbols, len(facts), names)
    if entry.dims is not None:   # (dims that are sums: their facts, capture/autodims.py)
        names["dims_fit"] = entry.dims.fit
        sizes = ", ".join(f"{str(dim)!r}: {var}" for dim, var in symbols.items())
        lines += [f"if not dims_fit({{{sizes}}}):", "    return MISS"]
    lines += ["if facts.get() != module_facts:", "    return MISS"]
    if compiled._held:   # (a module or optimiser it names, rebound: scope.py)
        names.update(rebound=rebound, held=compiled._held)
        lines += ["if rebound(held) is not None:", "    return MISS"]
    if optimizer_state:
        names["dynamic"] = frozenset(compiled._hyper_inputs)
        lines += ["if optimizer_facts(optimizers, dynamic) != optimizer_state:",
                  "    return MISS"]
    if entry.sharing is not None:   # (views among the arguments and state, as traced)
        names.update(sharing_of=entry._sharing, sharing=entry.sharing)
        args = ", ".join(f"a{i}" for i in range(len(facts)))
        lines += [f"if sharing_of([{args}]) != sharing:", "    return MISS"]
    if entry.held.guards or entry.held.unset:   # (tensors held outside modules, places
        # it stores in holding what they held when traced: capture/held.py)
        names["held_changed"] = entry.held.changed
        lines += ["if held_changed() is not None:", "    return MISS"]
    if values:   # (the Python values the function reads: globals, closures, dicts)
        names.update(read=read, slots=compiled._slots, values=values)
        lines += ["if read(slots) != values:", "    return MISS"]
    operands, captured, donated = [], [], []
    for k, (b, v) in enumerate(zip(capture.bindings, exe.graph.inputs)):
        if b.kind == "arg":
            operands.append(f"x{b.index}")
        elif b.kind == "captured":
            names[f"cap_{k}"], names[f"array_{k}"] = b.tensor, b.tensor._data
            captured.append(f"cap_{k}._data is not array_{k}")
            operands.append(f"array_{k}")
        else:   # a gradient the step reads (accumulates into): a new tensor at times
            names[f"cap_{k}"], names[f"dtype_g{k}"] = b.tensor, v.dtype
            lines += [f"grad_{k} = cap_{k}.grad",
                      f"if grad_{k} is None:", "    return MISS",
                      f"g{k} = grad_{k}._data",
                      f"if g{k}.shape != {tuple(v.shape)!r} or g{k}.dtype != dtype_g{k}:",
                      "    return MISS"]
            operands.append(f"g{k}")
        if k in exe._donated_inputs:   # (only a captured array is known to be the same)
            flags = f"{operands[-1]}.flags"
            donated.append(f"{flags}.writeable" if b.kind == "captured"
                           else f"{flags}.writeable and {flags}.c_contiguous")
    for k, f in enumerate(entry.frozen):   # (constants now: valid while unchanged)
        names[f"frozen_{k}"], names[f"farray_{k}"] = f.tensor, f.array
        captured.append(f"frozen_{k}._data is not farray_{k}"
                        f" or frozen_{k}._version[0] != {f.version}")
    if captured:   # (read only when some tensor changed since they last held: MUTATIONS)
        names.update(mutations=MUTATIONS, checked=[None])
        lines += ["seen = mutations[0]",
                  "if seen != checked[0]:",
                  "    if (" + "\n            or ".join(captured) + "):", "        return MISS",
                  "    checked[0] = seen"]
    if donated:
        lines += ["if not (" + "\n        and ".join(donated) + "):", "    return MISS"]
    call = f"graph_fn({', '.join(operands)})"
    head = len(lines)   # (what follows runs under the buffers' lock, where there are some)
    if exe._slots:   # (its buffers, one set per size of the symbols: codegen/buffers.py)
        call = f"graph_fn({', '.join(operands)}, bufs)"
    if entry.plain:
        lines.append(f"return make({call}[0])")
    else:
        absent = []
        for k, t in enumerate(entry.grads_absent):
            names[f"absent_{k}"] = t
            absent.append(f"absent_{k}.grad is not None")
        if absent:
            lines += ["if (" + "\n        or ".join(absent) + "):", "    return MISS"]
        if entry.grads_replaced:
            names["release"] = entry.release_replaced_grads
            lines.append("release()")
        args = ", ".join(f"a{i}" for i in range(len(facts)))
        lines.append(f"return finish({call}, [{args}])")
    if exe._slots:
        lines[head:] = _with_buffers(exe, operands, list(symbols.values()), lines[head:],
                                     names)
    source = "def fast_call(args, kwargs):\n" + "".join(f"    {line}\n" for line in lines)
    fast_call = compile_source(source, "fast_call", names).fn   # (tracebacks show it)
    fast_call.source = source
    fast_call.bound = [(b.tensor, b.tensor._data) for b in capture.bindings
                       if b.kind == "captured"] + [(f.tensor, f.array) for f in entry.frozen]
    return fast_call


def _with_buffers(exe, operands: list, sizes: list, tail: list, names: dict) -> list[str]:
    """Lines running ``tail`` (the lines that end in the call) with the executable's
    preallocated buffers for this call's symbol sizes (``bufs``), taken as
    ``Executable._call`` takes them: one set per input types, made by the executable at the
    first call of these sizes, and held under its lock (a call while another thread holds
    it takes the general path)."""
    names.update(buffers={}, buffers_for=exe._buffers_for, lock=exe._lock)
    key = f"({', '.join(sizes)},)" if sizes else "()"
    return [f"bufs = buffers.get({key})",
            "if bufs is None:",
            f"    bufs = buffers[{key}] = buffers_for([{', '.join(operands)}])",
            "if not lock.acquire(blocking=False):", "    return MISS",
            "try:", *(f"    {line}" for line in tail), "finally:", "    lock.release()"]


def _symbolic_shape(x: str, shape: tuple, dtype: str, symbols: dict) -> list[str]:
    """Lines checking array ``x`` against a shape with symbolic dims (names, as signatures
    hold them): its rank and dtype, each number, and each symbol's size equal to the one
    it had where it first appeared (its variable, bound here at its first appearance)."""
    lines = [f"if {x}.ndim != {len(shape)} or {x}.dtype != {dtype}:", "    return MISS"]
    dims = []
    for d, dim in enumerate(shape):
        if type(dim) is int:
            dims.append(str(dim))
        elif dim in symbols:
            dims.append(symbols[dim])
        else:
            symbols[dim] = f"n{len(symbols)}"
            lines.append(f"{symbols[dim]} = {x}.shape[{d}]")
            dims.append(symbols[dim])
    lines += [f"if {x}.shape != ({', '.join(dims)},):", "    return MISS"]
    return lines


def _symbol_rules(compiled, spec, symbols: dict, count: int, names: dict) -> list[str]:
    """Lines checking what else the signature of a call with these symbolic sizes says.
    Automatic dynamic dims (capture/autodims.py) give equal sizes one symbol and keep sizes
    0 and 1 numbers, so each symbol's size is above 1 and the sizes are distinct; and a
    call of shapes that a static graph was traced for runs that graph (``static_shapes``:
    the argument shapes of the static entries now in the cache; one traced later only
    misses its fast start, the symbolic graph being right for its shapes too). Dims named
    by ``dynamic=`` carry no such rules."""
    if compiled.dynamic:
        return []
    sizes = list(symbols.values())
    lines = [f"if {' or '.join(f'{n} < 2' for n in sizes)}:", "    return MISS"]
    if len(sizes) > 1:
        lines += [f"if len({{{', '.join(sizes)}}}) != {len(sizes)}:", "    return MISS"]
    names["static_shapes"] = frozenset(
        tuple(f[1] for f in sig[1]) for sig in compiled.cache
        if sig[0] is spec and all(f[0] == "tensor" and all(type(d) is int for d in f[1])
                                  for f in sig[1]))
    if names["static_shapes"]:
        shapes = ", ".join(f"x{i}.shape" for i in range(count))
        lines += [f"if ({shapes},) in static_shapes:", "    return MISS"]
    return lines


def still_bound(fast_call) -> bool:
    """Whether the captured tensors still hold the arrays ``fast_call`` was made for (a
    parameter given new data needs a new one)."""
    return all(t._data is a for t, a in fast_call.bound)


def applies(compiled, entry, sig) -> bool:
    """The entry and its signature are of the kind the fast path covers: tensors passed
    positionally, no checked mode, no user backend; either one
    fresh tensor out with nothing read or written back but its arguments and captured
    arrays (inference: no optimiser, nothing donated), or a step whose results ``finish``
    rebuilds without recording anything on the autograd tape or copying an output that
    aliases an input."""
    spec, facts, _, _, optimizer_state, _ = sig
    exe, capture = entry.executable, entry.capture
    common = (not compiled.check and compiled._tensor_specs.get(len(facts)) is spec
              and all(f[0] == "tensor" for f in facts)
              and exe.backend is None)
    if not common or entry.held.reads:   # (read from a place: the general path)
        return False
    if entry.plain:
        return (not optimizer_state and not exe._donated_inputs and capture.out_spec is None
                and len(entry.graph.outputs) == 1
                and all(b.kind in ("arg", "captured") for b in capture.bindings))
    return entry.backward is None and not entry.aliased and not entry.arg_grads
