"""``dg.compile``: capture a function or module into graphs, one per input signature.

Each call computes the signature the guards look at (capture/guards.py). A cached graph
for it runs directly; otherwise the function is traced (capture/trace.py) into a new graph,
which is cached. Code that can't be captured (``.item()``, ``print(tensor)``, ...) is a
*graph break*: with ``fullgraph=True`` it raises naming the user's line; otherwise the
function falls back to eager execution with one warning naming the line. ``explain()``
reports every capture, its guards, each retrace with the guard that failed and a fix, and
each break.
"""
from __future__ import annotations

import copy
import functools
import inspect
import os
import pathlib
import tempfile
import time
import traceback
import warnings
import webbrowser

import numpy as np

from .. import dispatch
from .._helpers import _is_internal
from ..autograd.tape import grad_mode
from ..codegen import Executable
from ..dispatch import OpError, modes, op_error
from ..graph.html import write_html
from ..graph.interpret import interpret
from ..graph.ir import Value
from ..errors import CaptureError, EagerFirstCall
from ..shapes import ShapeError, SizeCases, Sym
from ..tensor import MUTATIONS, Tensor, bump
from . import check as checking
from ..passes import plan_in, run_pipeline
from .autodiff import Replay, build_backward, record_call
from .autodims import AutoDims, DimFacts, symbol_sizes
from .escape import (held_before, kept_places, places, refuse_kept_by_backward, restore_cells,
                     returned_inside, scalar_cells, undo)
from .fastpath import MISS, fast_path, still_bound
from .freeze import CapturedGraph, freeze_parameters
from .held import (CELL, UNBOUND, Held, guards_for, held, put_back, rebound_roots,
                   root_sources, store, tensor_places)
from .guards import ModuleFacts, changed_hyper, describe_guards, explain_miss, signature
from .prints import PythonPrint, held_prints
from .pyrandom import Draws, PythonRandom
from .pyschedule import SchedulerStep, Steps
from .pyvalues import ABSENT, INPUT, Slot, fact, find_slots, is_scalar
from .reuse import capture_key
from .._pytree import flatten, unflatten
from .records import RETRACE_LIMIT, Record, _name
from .split import SplitTracer, Splitter
from .scope import held_objects, is_module, is_optimizer, readable_names, rebound, scope_of
from .symbolic import NeedsValue, NumberInputs, leaked, math_functions
from .trace import Capture, StaleTensorError, Tracer

# calls in a row that make state a compiled function keeps, after which it runs eagerly
MADE_STATE_LIMIT = 3
# distinct changes of frozen parameters (retraces) after which they are graph inputs again
FREEZE_LIMIT = 2
# graphs of one signature kept for its cases: of the clamps of its slices (a bound within
# the dim or past its end: shapes.SizeCases), after which other cases run static; of what
# the places it stores in hold (Compiled._by_places), after which other states retrace
MAX_CASES = 4


class Entry:
    """A captured graph for one signature, ready to run; with ``backward`` (see
    capture/autodiff.py) its differentiable outputs join the caller's autograd tape."""

    created = ()   # (name, source line) of the state its call made: then it runs only once
    stores = False  # whether each run keeps new tensors where the traced call kept its own
    frozen = ()    # the parameters and buffers frozen into its graph (capture/freeze.py)
    traced = None  # the capture as traced, when ``capture`` is its frozen form
    frozen_seen = None   # ``tensor.MUTATIONS`` when the frozen tensors were last found as held
    held = Held()  # the places its bound tensors are guarded in, or read from (held.py)
    place_symbols = False   # whether a tensor it reads from a place has symbolic dims

    def __init__(self, capture: Capture, backward=None, passes=None, fast_math=False,
                 memory_budget=None, backend=None):
        self.capture = capture
        self.backward = backward
        self.cases = []   # the graphs of its signature traced for other cases of its clamps
        start = time.perf_counter()
        self.graph, self.reports = run_pipeline(capture.graph, passes,
                                                memory_budget=memory_budget)
        self.times = {"passes": time.perf_counter() - start}   # (seconds)
        self.executable = Executable(self.graph, fast_math=fast_math,
                                     body_passes=passes,
                                     donate=_writeback_inputs(capture), backend=backend)
        self.times["codegen"] = self.executable.times["codegen_s"]
        self.aliased = _outputs_aliasing_inputs(self.graph)
        self.view_chains = _view_chains(capture)
        self.dims = DimFacts.of([capture.graph] + ([backward.graph] if backward else []),
                                capture.size_facts)
        self._bind(capture)
        # outputs that are only the user's fresh tensors: nothing to copy, write or record
        self.plain = (backward is None and not self.aliased and not capture.writebacks
                      and not capture.grads_cleared and not capture.py_writes
                      and all(k == "value" for k in capture.out_leaves))
        self.backward_executable = None
        if backward is not None:
            start = time.perf_counter()
            graph, reports = run_pipeline(backward.graph, passes, memory_budget=memory_budget)
            self.reports += [r for r in reports]
            self.times["passes"] += time.perf_counter() - start
            self.backward_executable = Executable(graph, fast_math=fast_math,
                                                  body_passes=passes, backend=backend)
            self.times["codegen"] += self.backward_executable.times["codegen_s"]
            self.replay = Replay(capture, backward)

    def _bind(self, capture) -> None:
        """The facts about the tensors ``capture`` binds and writes that a call uses."""
        self.written = {id(t) for kind, t in capture.writebacks if kind == "data"}
        # writebacks into a tensor argument: into the argument of the call, by position
        # (the capture holds the traced call's tensor)
        args = {id(b.tensor): b.index for b in capture.bindings if b.kind == "arg"}
        self.arg_writes = {j: args[id(t)] for j, (kind, t) in enumerate(capture.writebacks)
                           if kind in ("data", "grad") and id(t) in args}
        self.grads_read = {id(b.tensor) for b in capture.bindings if b.kind == "grad"}
        # the same for the ``.grad`` of a tensor argument (a leaf passed in): the graph reads,
        # writes or clears this call's argument's gradient, and a gradient written fresh
        # (not read) where the traced argument had none needs an argument without one (else
        # eager adds to it); one the traced call had and replaced unread (``x.grad = None``
        # in the step) is replaced again
        self.arg_grads_read = {k: args[id(b.tensor)] for k, b in enumerate(capture.bindings)
                               if b.kind == "grad" and id(b.tensor) in args}
        had = {id(b.tensor): b.grad is not None for b in capture.bindings if b.kind == "arg"}
        self.arg_grads_fresh = [args[id(t)] for kind, t in capture.writebacks
                                if kind == "grad" and id(t) in args and not had[id(t)]
                                and id(t) not in self.grads_read]
        self.arg_grads_cleared = {id(t): args[id(t)] for t in capture.grads_cleared
                                  if id(t) in args}
        # (any of these: the general path's finish, not the fast path: fastpath.applies)
        self.arg_grads = bool(self.arg_grads_read or self.arg_grads_cleared or any(
            capture.writebacks[j][0] == "grad" for j in self.arg_writes))
        self.bound = {id(b.tensor) for b in capture.bindings if b.kind != "grad"}
        self.grads_absent, self.grads_replaced = fresh_gradients(capture)
        passthrough = _passthrough_outputs(capture)
        self.passthrough = {i: b for i, _, b in passthrough}
        self.passthrough_outputs = {j for _, j, _ in passthrough}
        if capture.held:
            self.held = Held(capture.held)
        self.sharing = None   # (storage shared among arguments and state: guarded where a
        # write or a grad could tell, or where an argument was state when traced: the graph
        # then read the state through that argument's input, ``f(x, W)`` reading ``W``)
        if (capture.writebacks or capture.grads_cleared or self.backward is not None
                or capture.arg_state):
            self._args = sorted((b.index, k) for k, b in enumerate(capture.bindings)
                                if b.kind == "arg")
            self._state = {id(b.tensor._version) for b in capture.bindings
                           if b.kind == "captured"} | capture.arg_state | capture.param_state
            self.sharing = self._sharing([b.tensor for b in capture.bindings], by_binding=True)

    def rebound(self, capture, backward) -> "Entry":
        """This entry's compiled code for another capture of the same program, binding
        other tensors in the same roles (a split call traces at every call: its captures'
        keys match by role, capture/split.py)."""
        entry = copy.copy(self)
        entry.capture, entry.backward = capture, backward
        entry._bind(capture)
        if backward is not None:
            entry.replay = Replay(capture, backward)
        return entry

    def inputs(self, tensor_args: list) -> list:
        arrays = []
        for k, b in enumerate(self.capture.bindings):
            if b.kind == "arg":
                arrays.append(tensor_args[b.index]._data)
            elif b.kind == "captured":
                arrays.append(b.tensor._data if k not in self.held.reads
                              else self._read_place(k))
            else:
                owner = tensor_args[self.arg_grads_read[k]] if k in self.arg_grads_read \
                    else b.tensor
                grad = owner.grad
                if grad is None:
                    raise _StaleGuard("a gradient the graph accumulates into is now None")
                arrays.append(grad._data)
        return arrays

    def _sharing(self, tensors: list, by_binding=False) -> tuple:
        """Which of the tensor arguments share storage (views of one another, or of a tensor
        the graph reads as state): per argument bound, the first such argument's position,
        or the state's storage (the id of its version counter: which state, not only
        whether), or the place the graph reads the tensor it stored before from (the one
        there now: ``f(x, G)`` with ``G`` a global it rebinds at every call and writes in
        place). ``tensors``: the call's tensor arguments (``by_binding``: the capture's
        bound tensors, as traced)."""
        if by_binding:   # (the tensor each place held when traced: the one the graph read)
            places = {id(tensors[k]._version): name
                      for k, (name, _, _) in self.held.reads.items()}
        else:
            places = {id(held(c, key)._version): name for name, c, key
                      in self.held.reads.values() if isinstance(held(c, key), Tensor)}
        first, out = {}, []
        for i, k in self._args:
            version = id((tensors[k] if by_binding else tensors[i])._version)
            out.append(("read", places[version]) if version in places
                       else ("state", version) if version in self._state
                       else first.setdefault(version, i))
        return tuple(out)

    def _read_place(self, k: int):
        """The array of the tensor now held where binding ``k`` is read from (a place the
        graph stores a new tensor in at every call): of the traced shape and dtype."""
        name, container, key = self.held.reads[k]
        t, v = held(container, key), self.capture.graph.inputs[k]
        resized = _resized(t, v)
        if resized is None or t.requires_grad:
            raise _StaleGuard(f"{name} now holds {_described(t)}, not a tensor like the one "
                              f"traced ({v.dtype} {tuple(v.shape)})", places=True)
        if resized:   # (its size alone: those dims may be symbolic, autodims.PlaceDims)
            raise _StaleGuard(f"{name} now holds {_described(t)}, not a tensor like the one "
                              f"traced ({v.dtype} {tuple(v.shape)})", resized=self.resized())
        return t._data   # (its symbolic dims: checked by ``run``)

    def places_fit(self) -> bool:
        """Whether the places it is guarded by, reads from or stores in hold what it was
        traced for (its symbolic sizes aside: ``run`` checks them)."""
        return self.held.changed() is None and all(
            _resized(held(c, key), self.capture.graph.inputs[k]) == [] and
            not held(c, key).requires_grad for k, (_, c, key) in self.held.reads.items())

    def resized(self) -> list:
        """``[(name, container, key, dims)]``: the places it reads from that hold a tensor
        of the traced rank and dtype now, with other sizes in the static ``dims``."""
        found = ((name, c, key, _resized(held(c, key), self.capture.graph.inputs[k]))
                 for k, (name, c, key) in self.held.reads.items())
        return [place for place in found if place[3]]

    def run(self, args, kwargs, on_node=None, leaves=None):
        if leaves is None:
            leaves, _ = flatten((args, kwargs))
        tensor_args = [x for x in leaves if isinstance(x, Tensor)]
        if self.held.guards or self.held.unset:
            changed = self.held.changed()
            if changed is not None:
                raise _StaleGuard(changed, places=True)
        if self.sharing is not None and self._sharing(tensor_args) != self.sharing:
            raise _StaleGuard("the arguments share storage (views of one another, or of "
                              "state the function reads) otherwise than when traced",
                              sharing=self._sharing(tensor_args))
        seen = MUTATIONS[0]
        if self.frozen and seen != self.frozen_seen:   # (some tensor changed since they held)
            for f in self.frozen:
                if f.changed():
                    raise _StaleGuard(f.change(), f)
            self.frozen_seen = seen
        if any(t.grad is not None for t in self.grads_absent):   # (eager may accumulate)
            raise _StaleGuard("a parameter traced without a gradient has one now")
        if any(tensor_args[i].grad is not None for i in self.arg_grads_fresh):
            raise _StaleGuard("a tensor argument traced without a gradient has one now")
        arrays = self.inputs(tensor_args)
        if self.place_symbols:   # (a place read with symbolic dims: what its sizes keep)
            sizes = symbol_sizes(self.capture.graph.inputs, arrays)
            unfit = sizes if type(sizes) is str else (
                self.dims.broken(sizes) if self.dims is not None else None)
            if unfit is not None:
                raise _StaleGuard(f"the sizes of the tensors read from "
                                  f"{', '.join(n for n, _, _ in self.held.reads.values())} "
                                  f"don't fit the graph's symbolic dims: {unfit}", places=True)
        if self.backward is not None and grad_mode.enabled:   # (before it updates them)
            self._kept = {k: arrays[k].copy() for k in self.replay.kept}
        self.release_replaced_grads()
        try:
            outs = self.executable.run(arrays, on_node=on_node)
        except (TypeError, ShapeError):
            retyped = self._captured_retyped(arrays)
            if retyped:
                raise _StaleGuard(retyped) from None
            raise
        return self.finish(outs, tensor_args)

    def assuming(self, capture) -> "Entry":
        """This entry for a capture of its graph assuming the same gradients absent and
        cleared; else a copy with that capture's (Adam's first and second steps)."""
        absent, replaced = fresh_gradients(capture)
        if ([id(t) for t in absent] == [id(t) for t in self.grads_absent]
                and [id(t) for t in replaced] == [id(t) for t in self.grads_replaced]
                and capture.py_writes == self.capture.py_writes):
            return self
        entry = copy.copy(self)
        entry.grads_absent, entry.grads_replaced = absent, replaced
        if capture.py_writes != self.capture.py_writes:   # (its own Python writes)
            entry.capture = copy.copy(self.capture)
            entry.capture.py_writes = capture.py_writes
            entry.plain = self.plain and not capture.py_writes
        return entry

    def release_replaced_grads(self) -> None:
        """Drop the ``.grad`` tensors the step clears (unread) before the graph runs, as
        eager's ``zero_grad()`` does: the new gradients then reuse their memory, warm, instead
        of alternating between two sets (each step would touch twice the memory)."""
        for t in self.grads_replaced:
            grad = t.grad
            if grad is not None and id(grad) not in self.bound:   # (else ``finish`` keeps it)
                t.grad = None

    def _captured_retyped(self, arrays) -> str | None:
        """What changed, if a captured tensor (a parameter, a buffer, a gradient) now holds
        an array of another dtype or shape than the graph was traced with
        (``model.double()``, ``.to()``): the guards cover the arguments only, so the graph
        is traced again."""
        for b, a, v in zip(self.capture.bindings, arrays, self.executable.graph.inputs):
            if b.kind != "arg" and (a.dtype != v.dtype or tuple(a.shape) != tuple(v.shape)):
                return (f"captured tensor {v.name} is now {a.dtype} {tuple(a.shape)}, traced "
                        f"as {v.dtype} {tuple(v.shape)}")
        return None

    def _bound_tensor(self, k: int, tensor_args: list):
        """The tensor whose array is graph input ``k`` this call, when no writeback of
        this call changes it (else None: a saved value must then be a copy)."""
        b = self.capture.bindings[k]
        if b.kind == "grad" or id(b.tensor) in self.written or k in self.held.reads:
            return None
        return tensor_args[b.index] if b.kind == "arg" else b.tensor

    def finish(self, outs: list, tensor_args: list):
        """Rebuild the user's outputs, apply the writebacks, join the autograd tape."""
        cap = self.capture
        if self.plain:   # (one tensor: the usual inference call)
            if cap.out_spec is None:
                return Tensor._make(outs[0])
            return unflatten(cap.out_spec, [Tensor._make(a) for a in outs])
        n_saved = self.backward.num_saved if self.backward is not None else 0
        shared = []   # tensors whose own arrays the backward keeps: guarded by versions
        for i, k in self.aliased:   # an output that is an input's storage (or a view)
            if i in self.passthrough_outputs:
                continue            # (the bound tensor itself is returned: below)
            tensor = self._bound_tensor(k, tensor_args)
            if i >= len(outs) - n_saved and tensor is not None:
                shared.append(tensor)
            else:   # returned to the user, or the input is written back by this call
                outs[i] = outs[i].copy()
        saved = []
        if self.backward is not None:
            saved = outs[len(outs) - n_saved:]
            outs = outs[:len(outs) - n_saved]
        it = iter(outs)
        leaves = [Tensor._make(next(it)) if k == "value" else k[1] for k in cap.out_leaves]
        if self.backward is not None and grad_mode.enabled:
            inputs = [tensor_args[b.index] if b.kind == "arg" else b.tensor
                      for b in self.backward.diff_inputs]
            read = {}
            for k in self.replay.read:
                b = cap.bindings[k]
                t = tensor_args[b.index] if b.kind == "arg" else b.tensor
                read[k] = (t, t._version[0])
            state = [tensor_args[b.index] if b.kind == "arg" else b.tensor
                     for b in self.backward.state]
            record_call(self.backward, self.backward_executable, leaves, saved, inputs,
                        shared, replay=(self.replay, read, self._kept), state=state)
        for i, b in self.passthrough.items():   # ``return x``: x itself, as eager returns it
            t = tensor_args[b.index] if b.kind == "arg" else b.tensor
            if leaves[i].grad_fn is not None:   # (written in place with autograd: its
                t.requires_grad, t.grad_fn = True, leaves[i].grad_fn   # history goes on
                t._output_nr = leaves[i]._output_nr                    # from the write)
            leaves[i] = t
        # ids of output arrays a tensor already owns (the user's outputs, saved values)
        taken = {id(t._data) for t in leaves if isinstance(t, Tensor)} | {id(a) for a in saved}
        made = 0
        for j, ((kind, t), new) in enumerate(zip(cap.writebacks, it)):
            traced = t
            if j in self.arg_writes:   # (this call's argument, not the traced call's)
                t = tensor_args[self.arg_writes[j]]
            if kind == "data":
                if new is not t._data:   # (a donated input was updated in place)
                    np.copyto(t._data, new)
                bump(t)
            elif kind == "new":          # state the traced call made: a real tensor now
                # (its own array, writeable: later steps update it in place)
                array = new if id(new) not in taken and new.flags.writeable else new.copy()
                made += 1
                if self.stores and type(t._data) is not Value:   # (a later run: a new one,
                    container, key = cap.kept[made - 1]           # where the trace kept it)
                    store(container, key, Tensor._make(array))
                    taken.add(id(new))
                    continue
                t._data = array
                if t._base is not None and type(t._base._data) is Value:
                    # (``loss.detach()`` or a view ``h.t()`` kept: its base is an
                    # intermediate of the trace, so it is a tensor of its own now)
                    t._base, t._alias, t._view, t._version = None, False, None, [0]
                bump(t)
            elif t.grad is not None and new is t.grad._data:
                pass                     # accumulated in place
            elif (t.grad is not None and t.grad._data.shape == new.shape
                  and (id(traced) in self.grads_read or id(t.grad) in self.bound)):
                np.copyto(t.grad._data, new)   # a gradient the step kept: the same tensor
                bump(t.grad)        # (written in place, as eager accumulates)
            else:   # a gradient made in the step (as eager makes a new one): no copy
                t.grad = Tensor._make(new if id(new) not in taken else new.copy())
            taken.add(id(new))
        for t in cap.grads_cleared:
            if id(t) in self.arg_grads_cleared:
                t = tensor_args[self.arg_grads_cleared[id(t)]]
            t.grad = None
        for slot, value in cap.py_writes:   # (the Python the graph stands for wrote them)
            slot.set(value)
        for group, key, t in cap.hyper_writes:
            group[key] = float(t._data)
        for slot, t in cap.number_writes:   # (a Python number of the slot's type again)
            slot.set(t._data.item())
        sizes = None
        for leaf, ((kind, k), chain) in self.view_chains.items():
            if sizes is None and any(type(d) is Sym for v in self.capture.graph.inputs
                                     for d in v.shape):
                sizes = symbol_sizes(self.capture.graph.inputs, self.inputs(tensor_args))
            if kind == "input":
                view = self._bound_tensor(k, tensor_args)
            else:
                view = tensor_args[self.arg_writes[k]] if k in self.arg_writes else \
                    cap.writebacks[k][1]
            if view is not None:
                for op, attrs in chain:
                    view = dispatch.apply(op, view, **{a: _sized(v, sizes or {})
                                                       for a, v in attrs.items()})
                leaves[leaf] = view
        return unflatten(cap.out_spec, leaves)


def _hyper_writes(swapped: list, tracer: Tracer) -> list:
    """``(group, key, tensor)`` for each hyper-parameter that is a graph input and that the
    traced call set to a traced scalar of its dtype (``group["lr"] = group["lr"] * 0.8``, a
    scheduler's step inside the function): its tensor takes the new value as an in-place
    update, so the graph outputs it, and the group holds the tensor again (not Python
    state the call made). Another value (a Python float) is a Python write, as before."""
    written = []
    for group, key, _, t in swapped:
        new = group[key]
        if new is t and id(t) in tracer._mutated:   # (a scheduler's in-place update, in a
            written.append((group, key, t))        # split call: its float() is a break)
        elif (new is not t and isinstance(new, Tensor) and type(new._data) is Value
                and new.shape == () and new.dtype == t.dtype):
            tracer.note_mutation(t)
            t._data = new._data
            MUTATIONS[0] += 1
            group[key] = t
            written.append((group, key, t))
    return written


def _keep_forward_state(kept: list) -> None:
    """Put back the state the forward kept where tracing its backward replaced it: a
    checkpointed block recomputed in the backward runs its forward hooks again
    (``stats[name] = out``, with the forward's values), which would leave tensors of the
    backward's trace there."""
    for _, t, container, key in kept:
        if held(container, key) is not t:
            store(container, key, t)


def _filled_arguments(args, kwargs) -> dict:
    """The lists and dicts a call is passed, where it may leave tensors it made
    (``forward(x, keep)`` appending to ``keep``); the tensors they hold are arguments,
    guarded as such, not state."""
    given = [*enumerate(args), *kwargs.items()]
    return {f"arguments[{k!r}]": a for k, a in given if isinstance(a, (list, dict))}


def _refuse_opaque_results(fn, result, tracer) -> None:
    """A result that holds tensors the trace made inside an object of the user's class
    (not a tuple, list, dict or dataclass) can't be rebuilt from the graph's outputs: the
    function runs eagerly (a graph break naming it)."""
    inside = returned_inside(flatten(result)[0], tracer)
    if inside:
        code = getattr(fn, "forward", fn).__code__
        raise CaptureError(f"returning tensors inside an object ({', '.join(inside)})",
                           f"{code.co_filename}:{code.co_firstlineno}",
                           "Return them in a tuple, list, dict or dataclass.")


class _UnfitDims(Exception):
    """A trace with symbolic dims made dims that are sums, and this call's sizes break what
    the trace assumed of them (autodims.DimFacts: a sum of size 1); the call is traced
    again with static shapes, the dims staying marked for the calls whose sizes fit."""


def _check_dims_fit(capture, backward, sizes: dict) -> None:
    """Raise :class:`_UnfitDims` when the traced call's own ``sizes`` (symbol -> size)
    break the facts of the graphs it traced (capture/autodims.py)."""
    facts = DimFacts.of([capture.graph] + ([backward.graph] if backward else []),
                        capture.size_facts)
    broken = facts.broken(sizes) if facts is not None else None
    if broken is not None:
        raise _UnfitDims(_unfit(broken))


def _resized(t, v) -> list | None:
    """The static dims of Value ``v`` whose size tensor ``t`` does not have (``[]``: it
    fits), or None where ``t`` is no tensor of ``v``'s rank and dtype."""
    if type(t) is not Tensor or t._data.ndim != len(v.shape) or t._data.dtype != v.dtype:
        return None
    return [d for d, (n, m) in enumerate(zip(t._data.shape, v.shape))
            if type(m) is int and n != m]


def _user_line(error: Exception) -> str:
    """``file:line`` of the user's code where ``error`` was raised (its last frame outside
    dualgraph)."""
    frames = traceback.extract_tb(error.__traceback__)
    user = [f for f in frames if not _is_internal(f.filename)] or frames
    return f"{user[-1].filename}:{user[-1].lineno}" if user else "<unknown>"


def _unfit(broken: str) -> str:
    """``explain()``'s reason for a static graph traced for sizes a symbolic one can't take."""
    return (f"with this call's sizes {broken}, which the graph with symbolic dims assumed "
            "it is not (at least 2 and unlike the other dims): traced with static shapes for "
            "these sizes; the symbolic graph serves the others")


class _StaticDims(Exception):
    """A trace with symbolic dims failed (``error``): an op that can't take them yet; the
    function is traced again with static shapes (``Compiled._static_from_now``)."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class _BakedNumbers(Exception):
    """A trace failed where Python numbers traced as graph inputs may be the cause: they are
    baked in and guarded now, and the function is traced again."""


def _forget_state(made: list) -> None:
    """Drop the optimiser state an aborted trace made (``made``: each optimiser's state and
    the keys each parameter's held before): a momentum buffer made as zeros and filled by
    the trace's graph would stay zeros, and SGD's first eager step would then dampen it."""
    for state, before in made:
        for p in [p for p in state if p not in before]:
            del state[p]
        for p, keys in before.items():
            for key in [k for k in state.get(p, ()) if k not in keys]:
                del state[p][key]


def _site(fn) -> str:
    """``file:line`` where the function (a module's forward) starts, or its name."""
    code = getattr(getattr(fn, "forward", fn), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else _name(fn)


class FlagWrite(CaptureError):
    """A trace set ``requires_grad`` of a parameter, of state or of an argument (``p.
    requires_grad = False``, ``x.requires_grad_()`` in the step): a graph would not set it
    at its calls, so that call runs its Python; a second such trace, every call."""

    def __init__(self, fn):
        super().__init__("requires_grad set on a parameter, state or argument while tracing",
                         _site(fn), "Set it outside the compiled function, between calls (compile "
                         "retraces for it), for one graph.")


class ModeWrite(CaptureError):
    """A trace left grad mode changed (``torch.set_grad_enabled(False)`` called as a
    function, not as a ``with`` block): a graph would not set it at its calls, so every
    call runs its Python."""

    def __init__(self, fn):
        super().__init__("grad mode left changed by set_grad_enabled() called as a function",
                         _site(fn), "Use it as a with block inside the compiled function, "
                         "or call it outside, for one graph.")


class _StaleGuard(Exception):
    """The cached entry no longer fits (``frozen``: the Frozen guard that failed, if any)."""

    def __init__(self, reason: str, frozen=None, sharing=None, resized=(), places=False):
        super().__init__(reason)
        self.frozen = frozen
        self.sharing = sharing   # (the call's storage sharing, where that guard failed)
        # [(name, container, key, dims)]: places read whose tensors' sizes alone changed
        self.resized = resized
        # (a guard of what the places it reads or stores in hold: another graph of the
        # signature may fit, Compiled._by_places)
        self.places = places or bool(resized)


def eager_error(entry, args, kwargs, err: Exception) -> Exception:
    """What eager raises where ``entry``'s compiled code failed with ``err`` (an index out
    of range, a zero-size ``max``): the captured graph runs again node by node with the
    reference interpreter, and the node that fails gives the op, the user's line and the
    input shapes, as ``dispatch`` words an eager failure. ``err`` itself when no node fails
    (the error was not an op's)."""
    leaves, _ = flatten((args, kwargs))
    graph = entry.capture.graph
    try:
        arrays = entry.inputs([x for x in leaves if isinstance(x, Tensor)])
    except Exception:
        return err
    env = dict(graph.constants)
    env.update(zip(graph.inputs, arrays))
    done = []

    def keep(node, outs):
        env.update(zip(node.outputs, outs))
        done.append(node)

    try:
        interpret(graph, *arrays, on_node=keep)
    except Exception as e:
        if len(done) >= len(graph.nodes) or not any(
                "while interpreting node" in n for n in getattr(e, "__notes__", ())):
            return err
        node = graph.nodes[len(done)]
        inputs = [env[x] if isinstance(x, Value) else x for x in node.inputs]
        return op_error(node.op, inputs, node.attrs, e, node.location)
    return err


def fresh_gradients(capture) -> tuple[list, list]:
    """The parameters (known to ``capture.had_grad``) whose ``.grad`` the step makes anew,
    unread: those without one when traced (a call must find none: eager might accumulate),
    and those with one, which the step therefore cleared."""
    read = {id(b.tensor) for b in capture.bindings if b.kind == "grad"}
    fresh = [t for kind, t in capture.writebacks
             if kind == "grad" and id(t) in capture.had_grad and id(t) not in read]
    return ([t for t in fresh if not capture.had_grad[id(t)]],
            [t for t in fresh if capture.had_grad[id(t)]])


def _writeback_inputs(capture) -> dict:
    """``{output position: input position}``: each writeback's output and the graph input
    holding the array it is written back into (a parameter and its update, a gradient and
    its accumulated value), which the executable may then update in place. (Not tensor
    arguments: their binding names the traced tensor, not the one a later call passes.)"""
    first = sum(1 for k in capture.out_leaves if k == "value")
    pairs = {}
    for j, (kind, t) in enumerate(capture.writebacks):
        for k, b in enumerate(capture.bindings):
            if b.tensor is t and b.kind == ("grad" if kind == "grad" else "captured"):
                pairs[first + j] = k
                break
    return pairs


def _same_places(kept: list, other) -> bool:
    """Whether two lists of ``(container, key)`` places are the same places."""
    return len(kept) == len(other) and all(
        c is d and k == j for (c, k), (d, j) in zip(kept, other))


def _store_notes(entry, made: list) -> str:
    """What ``explain()`` adds about a graph that stores tensors anew at every run: the
    places it reads the one before from, and the tensors kept as values only."""
    notes = ""
    if entry.held.reads:
        names = ", ".join(name for name, _, _ in entry.held.reads.values())
        notes += (f"; it reads the one before from the same place ({names}), so a tensor "
                  "put there outside the function is read too")
    if any(t.requires_grad for t in made):
        notes += ("; the tensors with history among them are kept as their values, "
                  "without it (the step's backward is in its graph)")
    return notes


def _check_dims_bound(graph) -> None:
    """Raise where an op of ``graph`` (a backward graph, run on its own) takes a symbolic
    dim as an attribute that none of its inputs has: its code could not know the size."""
    bound = {n for v in graph.inputs for d in v.shape if isinstance(d, Sym) for n in d.names}

    def syms(x):
        if isinstance(x, Sym):
            yield from x.names
        elif isinstance(x, (tuple, list)):
            for y in x:
                yield from syms(y)

    for node in graph.nodes:
        missing = {n for a in node.attrs.values() for n in syms(a)} - bound
        if missing:
            raise TypeError(f"the backward graph's {node.op.name} needs the size of "
                            f"{', '.join(sorted(missing))}, which none of its inputs has")


def _described(obj) -> str:
    """A short description of what a place holds, for a guard's reason."""
    if isinstance(obj, Tensor):
        grad = ", requiring grad" if obj.requires_grad else ""
        return f"a {obj._data.dtype} tensor of shape {tuple(obj._data.shape)}{grad}"
    return "nothing" if obj is None else f"a {type(obj).__name__}"


def _made_at(value: Value) -> str:
    """The user's line that computed ``value`` (a constant's is not recorded)."""
    node = value.producer
    return node.location if node is not None else "(a tensor made by the compiled function)"


def _name_new_state(capture, names: dict, fn) -> None:
    """Name the inputs that had no readable name when they were bound: state the traced
    call created itself (an optimiser's first step makes its moments), now reachable."""
    unnamed = [b for b in capture.bindings if b.kind == "captured" and id(b.tensor) not in names]
    if unnamed:
        names = readable_names(fn)
        for b in unnamed:
            if id(b.tensor) in names:
                capture.graph.rename(b.value, names[id(b.tensor)])


def _writable(value) -> bool:
    """Whether a Python value a traced call left in a slot is written again after each
    call of its graph: a scalar (or a deletion), not a tensor the call made and kept."""
    return value is ABSENT or is_scalar(value)


def _passthrough_outputs(capture) -> list:
    """``(output leaf position, graph output, binding)`` of each output that is a bound
    tensor itself, unchanged by the call (``return x, y``): the call returns that very
    tensor, as eager does (its identity, and gradients through it reach it by the caller's
    tape; inside the graph it is a leaf, so the graph's backward has no path from that
    output to it). Not the values a split call's pieces computed: those are stand-ins
    (the whole call's backward covers them)."""
    graph = capture.graph
    bound = {v: b for v, b in zip(graph.inputs, capture.bindings)
             if b.kind != "grad" and not b.cut}
    # (a bound tensor the call wrote in place, ``x.mul_(2); return x``: x too, its new value
    # written back into it)
    returned = {i: b for i, b in capture.returned.items() if not b.cut}
    values = [i for i, kind in enumerate(capture.out_leaves) if kind == "value"]
    return [(i, j, bound.get(graph.outputs[j]) or returned[i]) for j, i in enumerate(values)
            if graph.outputs[j] in bound or i in returned]


def _plain(value) -> bool:
    """Whether an attr is a plain Python value or a symbolic size, to apply again."""
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (int, float, bool, str, Sym)


def _sized(value, sizes: dict):
    """An attr with its symbolic sizes as this call's ints."""
    if isinstance(value, (tuple, list)):
        return type(value)(_sized(v, sizes) for v in value)
    return value.evaluate(sizes) if type(value) is Sym else value


def _view_chains(capture) -> dict:
    """``{output leaf: (base, [(view op, attrs), ...])}`` for each output the user gets that
    is a view (``return x[0]``, ``x.t()``) of a tensor bound to the graph: an input (base
    ``("input", k)``) or one the call writes in place (``("write", j)``, its writeback),
    made by view ops of plain attrs (symbolic sizes in them taken at the call's sizes). The
    call applies them to that very tensor again, so the output shares its memory as eager's
    does (a write through either shows in the other) instead of being a copy."""
    graph = capture.graph
    made = {v: n for n in graph.nodes for v in n.outputs}
    values = [p for p, kind in enumerate(capture.out_leaves) if kind == "value"]
    bases = {v: ("input", k) for k, v in enumerate(graph.inputs)}
    bases.update({graph.outputs[len(values) + j]: ("write", j)
                  for j, (kind, _) in enumerate(capture.writebacks) if kind == "data"})
    chains = {}
    for i, leaf in enumerate(values):
        v, chain = graph.outputs[i], []
        while v not in bases:
            node = made.get(v)
            if (node is None or not node.op.view or len(node.inputs) != 1
                    or not _plain(list(node.attrs.values()))):
                break
            chain.append((node.op, node.attrs))
            v = node.inputs[0]
        else:
            if chain:
                chains[leaf] = (bases[v], chain[::-1])
    return chains


def _outputs_aliasing_inputs(graph) -> list:
    """``(output position, input position)`` of outputs that are graph inputs or views of
    them."""
    root = {v: k for k, v in enumerate(graph.inputs)}
    for node in graph.nodes:
        if node.op.view and node.inputs and node.inputs[0] in root:
            for v in node.outputs:
                root[v] = root[node.inputs[0]]
    return [(i, root[v]) for i, v in enumerate(graph.outputs) if v in root]


class Compiled:
    """The callable ``dg.compile`` returns; see the module docstring."""

    def __init__(self, fn, *, check=False, fullgraph=False, dynamic=None, passes=None,
                 fast_math=False, retrace_limit=RETRACE_LIMIT, strict=False,
                 compile_options=None, memory_budget=None):
        self.fn = fn
        # mode=, backend= and options= as given to dg.compile (see compile())
        self.compile_options = dict(compile_options or {})
        self.passes = passes
        self.fast_math = fast_math   # fused kernels may use approximate exp/tanh
        self.memory_budget = _budget(memory_budget)   # bytes of live values, or None
        self.strict = strict     # dg.jit.trace: a new signature is an error, not a retrace
        self.module = fn if is_module(fn) else None
        self.check = check
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        # (no ``dynamic=``: a dim whose size alone changes is traced symbolic, autodims.py)
        self._auto = AutoDims(dynamic is None and not strict)
        self.retrace_limit = retrace_limit
        self.cache: dict = {}
        self._entry_keys: dict = {}   # id(entry) -> (capture_key, entry), once retraced
        self.records: list[Record] = []
        self.eager_only = False
        self._split = None   # the Splitter once a graph break splits the function
        self._split_result = None   # (the result of the call that found the break)
        self._flag_writes = 0   # traces that set requires_grad (from the second: every call)
        self._split_once = False   # (the first: that call's Python only)
        self._made_state = 0   # how many calls in a row made state (_run_once)
        self._made_by = None   # the entry of the latest call that made state
        self._storing = ()     # (container, key) where a graph it cached stores at each run
        self._warned_limit = False
        self._last: Entry | None = None
        self._optimizers: list | None = None   # found in the function's scope, first call
        self._held: list = []   # the modules, optimisers, tensors it names (scope.py)
        self._case_trace = False   # (tracing another case of a graph's clamps: _case)
        # sig -> graphs of it that store tensors in places, each for what they held when it
        # was traced (a new sequence's empty cache, a grown one): swapped in as they fit
        self._by_places: dict = {}
        self._stored_roots: set = set()   # the global/closure variables a step rebinds
        self._rebinds = 0       # how often one of those was rebound to another object
        self._slots: list = []   # the Python values the function reads (pyvalues.py)
        # (optimiser, group, key) -> the 0-d tensor a changed learning rate is fed through
        self._hyper_inputs: dict = {}
        self._dynamic = frozenset()   # its keys
        self._stale_depth = 0         # calls again after a failed guard, within one call
        self._hyper_changes: dict = {}   # (optimiser, group, key) -> retraces it caused
        self._numbers = NumberInputs()   # Python numbers that are graph inputs (symbolic.py)
        self._number_note = None   # the counters the latest trace made inputs (explain())
        self._module_facts = ModuleFacts(self.module)
        self._tensor_specs: dict = {}   # number of tensor arguments -> their spec
        self._fast_paths: dict = {}     # signature -> its inlined call, or None
        self._fast = None               # the last call's, tried first
        self._stale: str | None = None  # why the last entry was dropped, if it was
        # (signature, storage sharing) -> an entry put aside for a call sharing otherwise
        # (``f(x, S.acc)`` and ``f(x, own)`` in turns: a graph each, not a trace each call)
        self._by_sharing: dict = {}
        # no_grad calls read the module's parameters and buffers as constants (guarded);
        # off with passes=False, and once they changed FREEZE_LIMIT times
        self._freezing = passes is not False
        self._freeze_changes: set = set()   # (id, storage id, version) of each change seen
        target = fn.forward if self.module is not None else fn
        try:
            self._params = list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            self._params = []
        if self.compile_options.get("backend") == "eager":
            self.eager_only = True
        # (set last: from here on, assigning a name the compiled object lacks sets the
        # module's attribute; see __setattr__)
        self._forwarding = self.module is not None

    # -- standing in for the module (as torch's OptimizedModule) ---------------------------
    @property
    def _orig_mod(self):
        """The compiled module or function, under torch's ``OptimizedModule`` name."""
        return self.fn

    @property
    def __class__(self):
        # (isinstance(compiled, nn.Module) holds, as for torch's OptimizedModule, without
        # capture importing nn; type(compiled) is still Compiled)
        module = self.__dict__.get("module")
        return Compiled if module is None else type(module)

    def __getattr__(self, name):
        # (called only when the compiled object has no such attribute: its own API, such
        # as graph, code and explain(), comes first; the rest is the module's)
        module = self.__dict__.get("module")
        if module is None or name.startswith("__"):
            raise AttributeError(f"'Compiled' object has no attribute {name!r}")
        value = getattr(module, name)
        if inspect.ismethod(value) and value.__self__ is module:
            return _returning(self, value)
        return value

    def __setattr__(self, name, value):
        if (not self.__dict__.get("_forwarding") or name in self.__dict__
                or hasattr(Compiled, name)):
            object.__setattr__(self, name, value)
        else:
            setattr(self.module, name, value)

    def __delattr__(self, name):
        if self.__dict__.get("_forwarding") and name not in self.__dict__:
            delattr(self.module, name)
        else:
            object.__delattr__(self, name)

    def __deepcopy__(self, memo):
        # (the graphs bind the original's tensors: a copy of the module is compiled afresh,
        # as copying a torch OptimizedModule gives a compiled copy, e.g. for a weight EMA)
        return Compiled(copy.deepcopy(self.fn, memo), check=self.check,
                        fullgraph=self.fullgraph, dynamic=copy.deepcopy(self.dynamic),
                        passes=self.passes, fast_math=self.fast_math,
                        retrace_limit=self.retrace_limit, strict=self.strict,
                        compile_options=self.compile_options,
                        memory_budget=self.memory_budget)

    def __repr__(self):
        if self.module is None:
            return f"<dg.compile of {_name(self.fn)}>"
        return "Compiled(\n  (_orig_mod): " + repr(self.module).replace("\n", "\n  ") + "\n)"

    def __dir__(self):
        own = object.__dir__(self)
        return sorted(set(own) | set(dir(self.module))) if self.module is not None else own

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self._hyper_inputs:
            self._feed_hyper_inputs()
        if self._numbers.holders:
            self._numbers.feed()
        fast = self._fast
        if fast is not None:   # (the last entry's guards and call inlined: fastpath.py)
            try:
                out = fast(args, kwargs)
            except OpError:
                raise
            except Exception as e:   # (a kernel failed: raise what eager raises)
                located = eager_error(self._last, args, kwargs, e)
                if located is e:
                    raise
                raise located from e
            if out is not MISS:
                return out
        if self.eager_only or modes.tracer is not None:
            # (called while another capture traces: its ops join that graph, inlined)
            return self.fn(*args, **kwargs)
        if self._split is not None:   # (a graph break: pieces traced at every call)
            return self._split(args, kwargs)
        if kwargs or any(type(a) is not Tensor for a in args):
            args, kwargs = _arrays_as_tensors(args, kwargs)
        if self._optimizers is None:
            self._find_scope()
        elif self._held and (name := rebound(self._held)) is not None:
            if self._rebound(name):
                return self.fn(*args, **kwargs)
        leaves, spec = self._flatten(args, kwargs)
        leaf_dynamic = self._leaf_dynamic(args, kwargs, leaves) if self.dynamic else []
        sig = signature(leaves, spec, leaf_dynamic, self._module_facts.get(), self._optimizers,
                        self._slots, self._dynamic, self._numbers.args)
        entry = self.cache.get(sig)
        if entry is None and self._auto.dims:   # (a shape traced static keeps its graph)
            leaf_dynamic = self._auto.leaf_dynamic(self.leaf_names(args, kwargs), leaves)
            sig = signature(leaves, spec, leaf_dynamic, self._module_facts.get(),
                            self._optimizers, self._slots, self._dynamic, self._numbers.args)
            entry = self.cache.get(sig)
        sizes = DimFacts.sizes(leaves, leaf_dynamic)
        broken = entry.dims.broken(sizes) if (
            entry is not None and entry.dims is not None) else None
        if broken is not None and entry.dims.broken_case(sizes) is not None:
            # (a clamp decided the other way: the graph of this case, or a new one)
            entry, broken = self._case(entry, sig, sizes, broken, args, kwargs, leaf_dynamic)
        if broken is not None:   # (sizes its dims that are sums can't take: static)
            self._stale = _unfit(broken)
            leaf_dynamic = []
            sig = signature(leaves, spec, [], self._module_facts.get(), self._optimizers,
                            self._slots, self._dynamic, self._numbers.args)
            entry = self.cache.get(sig)
        if (entry is None and self.cache and not self.strict
                and (self._new_hyper_inputs(sig[4], next(reversed(self.cache))[4])
                     | self._new_number_inputs(sig, leaves, args, kwargs))):
            sig = signature(leaves, spec, leaf_dynamic, self._module_facts.get(),
                            self._optimizers, self._slots, self._dynamic, self._numbers.args)
            entry = self.cache.get(sig)
        if self._numbers.args:
            self._numbers.feed_args(leaves)
        if entry is None:
            if self.strict and self.cache:
                reason, fix = explain_miss(sig, next(iter(self.cache)),
                                           self.leaf_names(args, kwargs), self._slots)
                raise TypeError(f"this traced function was traced for other inputs: {reason}."
                                f" Trace again, or use dg.compile, which retraces. ({fix})")
            if self._auto.enabled:
                sig, leaf_dynamic = self._auto_dims(args, kwargs, leaves, spec, sig,
                                                    leaf_dynamic)
            if len(self.cache) >= self.retrace_limit:
                return self._over_limit(args, kwargs, sig)
            start = time.perf_counter_ns()
            entry, sig = self._capture(args, kwargs, sig, leaf_dynamic)
            if dispatch.profiler is not None:   # a profile shows what capturing took
                name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
                dispatch.profiler.add_range(f"dg.compile({name}): trace, optimise, codegen",
                                            start, time.perf_counter_ns())
            if entry is None:
                if self._split is not None:   # (split: it ran as it was traced)
                    result, self._split_result = self._split_result, None
                    if self._split_once:   # (a step that freezes a layer once: the next
                        self._split, self._split_once = None, False   # trace finds it so)
                    return result
                return self.fn(*args, **kwargs)
            if entry.created:
                return self._run_once(entry, args, kwargs, leaves, sig)
            self._made_state = 0
            if self.check:
                self._last = entry
                return checking.run_checked(self.fn, entry, args, kwargs)
        self._last = entry
        try:
            result = entry.run(args, kwargs, leaves=leaves)
        except _StaleGuard as stale:
            del self.cache[sig]
            self._fast_paths.pop(sig, None)
            if stale.sharing is not None:   # (kept for calls that share as it was traced)
                if len(self._by_sharing) < self.retrace_limit:
                    self._by_sharing[sig, entry.sharing] = entry
                other = self._by_sharing.pop((sig, stale.sharing), None)
                if other is not None:
                    self.cache[sig] = other
                    return self._retraced_call(stale, args, kwargs)
            if stale.places:   # (what its places hold: another graph of sig may fit)
                kept = self._by_places.setdefault(sig, [])
                if entry not in kept and len(kept) < MAX_CASES:
                    kept.append(entry)
                other = next((e for e in kept if e is not entry and e.places_fit()), None)
                if other is not None:
                    self.cache[sig] = other
                    return self._retraced_call(stale, args, kwargs)
            self._stale = str(stale)    # (the reason the next capture's record gives)
            if self._auto.enabled:
                for place in stale.resized:
                    self._stale += "; " + self._auto.places.mark(*place)
            if stale.frozen is not None:
                self._frozen_changed(stale.frozen)
            return self._retraced_call(stale, args, kwargs)
        except OpError:
            raise
        except Exception as e:
            located = eager_error(entry, args, kwargs, e)
            if located is e:
                raise
            raise located from e
        self._made_state = 0   # (a call that made no state: not made at every call)
        fast = self._fast_paths.get(sig, MISS)
        if fast is MISS or (fast is not None and not still_bound(fast)):
            # (made after a run: the arrays it binds passed the executable's type check)
            fast = self._fast_paths[sig] = fast_path(self, entry, sig)
        self._fast = fast
        return result

    def _case(self, entry, sig, sizes, broken, args, kwargs, leaf_dynamic) -> tuple:
        """``(entry, broken)`` for a call whose sizes break a clamp ``entry``'s trace
        decided (``pos[:T]`` traced with T at most the static size, called with one above
        it): the graph of ``sig`` traced for the case these sizes take (kept in
        ``entry.cases``), traced now, symbolic, if there is none yet and fewer than
        MAX_CASES are; else (or where that trace can't stay symbolic at these sizes: a
        dim of 1) ``(entry, broken)`` unchanged, static shapes for this call."""
        for other in entry.cases:
            if other.dims.fit(sizes):
                return other, None
        if len(entry.cases) + 1 >= MAX_CASES or self.strict:
            return entry, broken
        self._stale = (f"{broken}: traced again for that case of the clamp, with the dims "
                       "still symbolic")
        del self.cache[sig]
        self._case_trace = True   # (a case that can't stay symbolic: static, this call)
        try:
            self._capture(args, kwargs, sig, leaf_dynamic)
            other = self.cache.pop(sig, None)   # (None: traced static, for these sizes)
        finally:
            self.cache[sig] = entry
            self._case_trace = False
        if other is None or other.dims is None or not other.dims.fit(sizes):
            return entry, broken
        entry.cases.append(other)
        return other, None

    def _frozen_changed(self, frozen) -> None:
        """Count a change of a frozen tensor (entries of other signatures that see the same
        change count it once); at the FREEZE_LIMIT-th, stop freezing: parameters that change
        between inference calls (training with evaluation in between) would retrace often."""
        t = frozen.tensor
        self._freeze_changes.add((id(t), id(t._data), t._version[0]))
        if len(self._freeze_changes) >= FREEZE_LIMIT and self._freezing:
            self._freezing = False
            self._stale += (f"; frozen parameters changed {len(self._freeze_changes)} times, "
                            "so from now on they are graph inputs, not constants")
            for sig, entry in list(self.cache.items()):   # (theirs would go stale too)
                if entry.frozen:
                    del self.cache[sig]
                    self._fast_paths.pop(sig, None)

    def _freezable(self) -> set:
        """The ids of the parameters and buffers of the compiled module and of the modules
        the function names: what a no_grad call may freeze."""
        modules = [m for _, m in self._module_facts.roots]
        return {id(t) for m in modules for t in (*m.parameters(), *m.buffers())}

    def _flatten(self, args, kwargs):
        """``flatten((args, kwargs))``; the usual call, tensors only, without walking it."""
        if kwargs or any(type(a) is not Tensor for a in args):
            return flatten((args, kwargs))
        spec = self._tensor_specs.get(len(args))
        if spec is None:
            spec = self._tensor_specs[len(args)] = flatten((args, kwargs))[1]
        return list(args), spec

    def _leaf_dynamic(self, args, kwargs, leaves) -> list:
        """Per argument leaf, {dim: Sym} for the dims marked dynamic."""
        if self.dynamic is True:
            return [{0: Sym("B")} if isinstance(x, Tensor) and x.ndim else None
                    for x in leaves]
        names = self.leaf_names(args, kwargs)
        out = []
        for name, leaf in zip(names, leaves):
            dims = self.dynamic.get(name) if isinstance(leaf, Tensor) else None
            out.append({d: Sym(s) for d, s in dims.items()} if dims else None)
        return out

    def leaf_names(self, args, kwargs) -> list[str]:
        """Readable names of the argument leaves: ``x``, ``batch[0]``, ``batch['y']``."""
        names = []
        for i, a in enumerate(args):
            base = self._params[i] if i < len(self._params) else f"args[{i}]"
            names += _names_in(a, base)
        for k, v in kwargs.items():
            names += _names_in(v, k)
        return names

    def _over_limit(self, args, kwargs, sig):
        if not self._warned_limit:
            self._warned_limit = True
            reason, fix = explain_miss(sig, next(reversed(self.cache)),
                                       self.leaf_names(args, kwargs), self._slots)
            warnings.warn(f"dg.compile: {self.retrace_limit} graphs captured for "
                          f"{_name(self.fn)}; running new signatures eagerly. Last retrace: "
                          f"{reason}. Fix: {fix}.", stacklevel=3)
            self.records.append(Record("limit", reason, fix))
        return self.fn(*args, **kwargs)

    def _find_scope(self) -> None:
        """At the first call: the optimisers and modules the function names, and the Python
        values it can read (guarded from then on)."""
        self._held = [h for h in held_objects(self.fn)   # (in small containers too: heads[0];
                      if h[0] not in self._stored_roots]   # not the variables it rebinds)
        found = list({id(obj): (name, obj) for name, _, obj in self._held}.values())
        self._optimizers = [o for _, o in found if is_optimizer(o)]
        self._module_facts.roots += [(name, m) for name, m in found
                                     if is_module(m) and m is not self.module]
        self._slots = find_slots(self.fn, self._optimizers)

    def _rebound(self, name: str) -> bool:
        """``name``, a module, optimiser or tensor the function reads through a global or
        closure variable, holds another object now: the graphs bind the old one's tensors,
        so they are dropped and the scope is found again (the next call traces anew);
        whether, rebound more often than the retrace limit, the function runs eagerly from
        now on (as a retrace past the limit does)."""
        self._rebinds += 1
        self.cache.clear()
        self._by_sharing.clear()
        self._by_places.clear()
        self._fast_paths, self._fast, self._last = {}, None, None
        self._hyper_inputs, self._dynamic, self._hyper_changes = {}, frozenset(), {}
        self._module_facts.roots = [("self", self.module)] if self.module is not None else []
        self._module_facts.version = None
        old = self._slots
        self._find_scope()
        known = {s.identity(): s for s in old}   # (keeping what they learnt: number inputs)
        self._slots = [known.get(s.identity(), s) for s in self._slots]
        self._stale = (f"{name}, which the function reads as a global or closure variable, "
                       "is another object now: the graphs bound the old one")
        if self._rebinds <= self.retrace_limit:
            return False
        self.eager_only = True
        warnings.warn(f"dg.compile: {name} rebound {self._rebinds} times; running "
                      f"{_name(self.fn)} eagerly from now on", stacklevel=3)
        self.records.append(Record("limit", self._stale, "keep one object and update it "
                                   "in place (load_state_dict, copy_)"))
        return True

    def _new_hyper_inputs(self, facts, last) -> bool:
        """Make the learning rates that changed again since the last capture graph inputs
        (a schedule sets them at every step: retracing at every step would soon reach the
        limit; one change, a manual decay, retraces and keeps the number baked in, which
        lets the optimiser use its fused update); whether there were any. ``facts`` and
        ``last``: the optimisers' facts now and at the last capture (guards.py)."""
        changed = []
        for key in changed_hyper(facts, last):
            self._hyper_changes[key] = self._hyper_changes.get(key, 0) + 1
            if self._hyper_changes[key] >= 2:
                changed.append(key)
        for i, j, k in changed:
            group = self._optimizers[i].param_groups[j]
            value = group[k]
            # (in the parameters' dtype: eager's Python float meets them as that dtype)
            params = [p for p in group["params"] if p.dtype.is_floating_point]
            dtype = params[0]._data.dtype if params else np.float32
            if type(value) is tuple:   # (Adam's betas, beta1 cycled: float64, as the bias
                # corrections computed from them, so that 1 - beta2 ** t stays precise)
                holder = tuple(Tensor._make(np.array(v, np.float64)) for v in value)
            else:
                holder = Tensor._make(np.array(value, dtype))
            self._hyper_inputs[(i, j, k)] = holder
            before = dict(last[i][1][j])[k]
            self._stale = (f"optimiser hyper-parameter {k} changed again, from {before!r} "
                           f"to {value!r}; it is a graph input from now on, so later "
                           "changes don't retrace")
        self._dynamic = frozenset(self._hyper_inputs)
        return bool(changed)

    def _feed_hyper_inputs(self) -> None:
        """Write the current values of the learning rates that are graph inputs into their
        tensors (in place: the graph reads those arrays)."""
        for (i, j, k), t in self._hyper_inputs.items():
            groups = self._optimizers[i].param_groups
            value = groups[j].get(k) if j < len(groups) else None
            if type(value) is float or type(value) is int:   # (else a guard misses)
                t._data[()] = value
            elif type(value) is tuple and type(t) is tuple and len(value) == len(t):
                for holder, v in zip(t, value):
                    holder._data[()] = v

    def _swap_hyper_inputs(self, names: dict) -> list:
        """While tracing, the learning rates that are graph inputs are their tensors (the
        optimisers take tensor hyper-parameters); ``(group, key, value)`` to restore."""
        swapped = []
        for (i, j, k), t in self._hyper_inputs.items():
            group = self._optimizers[i].param_groups[j]
            swapped.append((group, k, group[k], t))
            group[k] = t
            name = f"optimizer{i}.param_groups[{j}][{k!r}]"
            for n, holder in enumerate(t) if type(t) is tuple else ((None, t),):
                names[id(holder)] = name if n is None else f"{name}[{n}]"
        return swapped

    def _python_writes(self, sig, module_before: dict, numbers: list,
                       number_writes: list) -> tuple[list, tuple]:
        """After a trace: ``(slot, value)`` for each Python value it changed (written again
        after every call of the graph), and ``sig`` with the slots it created (an
        optimiser's first ``state["step"]``) guarded as absent, as they were before it.
        Earlier signatures get them as absent too, as they were when those traced.
        ``numbers``: the slots that were graph inputs in this trace (``number_writes``: the
        Python values it gave them), not compared here. A slot the trace changed to another
        int or float (a counter) is a graph input from the next trace on."""
        known = {s.identity() for s in self._slots}
        new = [s for s in find_slots(self.fn, self._optimizers) if s.identity() not in known]
        before = sig[5] + tuple(fact(ABSENT) for _ in new)
        inputs = {id(slot) for slot, _, _ in numbers}
        # (a tensor the call put in a slot is no Python value to write again: kept state)
        written = [(s, s.get()) for s, b in zip(self._slots + new, before)
                   if id(s) not in inputs and fact(s.get()) != b and _writable(s.get())
                   ] + number_writes
        for s in self._module_facts.scalar_slots():
            old = module_before.get(s.identity(), fact(ABSENT))
            if fact(s.get()) != old and _writable(s.get()):
                written.append((s, s.get()))
        self._add_slots(new)
        counters = list(dict.fromkeys(s.name for s, value in written
                                      if self._number_input(s, type(value))))
        if counters:
            self._number_note = (f"{', '.join(counters)} (changed by the call) a graph input "
                                 "from now on")
        return written, self._padded(sig)

    def _add_slots(self, new: list) -> None:
        """Guard the slots ``new`` too; the cached signatures have them absent, as they
        were when those traced."""
        if new:
            self._slots = self._slots + new
            self.cache = {self._padded(k): e for k, e in self.cache.items()}
            self._fast_paths, self._fast = {}, None   # (theirs check the old slots)
            self._by_sharing.clear()

    def _padded(self, sig: tuple) -> tuple:
        """``sig`` with the slots added since it was computed, absent."""
        missing = len(self._slots) - len(sig[5])
        return sig[:5] + (sig[5] + (fact(ABSENT),) * missing,) if missing else sig

    def _number_input(self, slot, kind) -> bool:
        """Make ``slot`` (holding a ``kind``) a graph input from the next trace on (see
        capture/symbolic.py): a module attribute is guarded as a slot from then on, not
        with the module's facts. Whether it became one."""
        own = next((s for s in self._slots if s.identity() == slot.identity()), None)
        if own is None:
            if kind not in (int, float) or slot.identity() in self._numbers.baked:
                return False
            own = slot
            self._add_slots([slot])
        if not self._numbers.promote(own, kind):
            return False
        owner = own.container()
        if own.kind == "attr" and is_module(owner):
            self._module_facts.inputs.add((id(owner), own.key))
            self._module_facts.version = None
        self._fast_paths, self._fast = {}, None
        return True

    def _new_number_inputs(self, sig, leaves, args, kwargs) -> bool:
        """Make the Python ints and floats that changed since the last capture (a counter,
        a float attribute a schedule sets, a number argument) graph inputs; whether there
        were any."""
        last = next(reversed(self.cache))
        made = []
        if sig[0] == last[0] and len(sig[1]) == len(last[1]):
            for i, (a, b) in enumerate(zip(sig[1], last[1])):
                if (a != b and a[0] == b[0] == "python" and a[1] == b[1]
                        and b[2] is not INPUT and self._numbers.promote_arg(i, leaves[i])):
                    name = self.leaf_names(args, kwargs)[i]
                    made.append(f"{name} changed from {b[2]!r} to {a[2]!r}")
        for slot, a, b in zip(list(self._slots), sig[5], last[5]):
            if (a != b and a[0] is b[0] and b[1] is not INPUT
                    and self._number_input(slot, a[0])):
                made.append(f"{slot.name} changed from {b[1]!r} to {a[1]!r}")
        if sig[3] and last[3]:
            old = {(path, k): (t, v) for path, k, t, v in last[3][2]}
            modules = {path: m for prefix, root in self._module_facts.roots
                       for path, m in root.named_modules(prefix=prefix)}
            for path, k, t, v in sig[3][2]:
                b = old.get((path, k))
                if (b is not None and b[0] is t and b[1] != v and path in modules
                        and self._number_input(Slot("attr", modules[path], k,
                                                    f"{path}.{k}"), t)):
                    made.append(f"{path}.{k} changed from {b[1]!r} to {v!r}")
        if made:
            self._stale = (f"{'; '.join(made)}: a graph input from now on (fed at every "
                           "call), so later changes don't retrace")
        return bool(made)

    def _number_writes(self, tracer, numbers: list, roots: dict, result) -> tuple:
        """After a trace with Python numbers as graph inputs: their writes
        (``NumberInputs.writes``); raises :class:`NeedsValue` where the trace can't be used
        (a use needed a value, even one the function caught; a traced number kept where
        the capture does not write it back)."""
        writes = self._numbers.writes(tracer, numbers)
        kept = leaked(roots, flatten(result)[0])
        if kept is not None:   # (name, where)
            tracer.number_uses.append((kept[0], f"kept as a value: {kept[1]}",
                                       "the end of the call"))
        if tracer.number_uses:
            name, use, location = tracer.number_uses[0]
            raise NeedsValue(f"{name}: {use} at {location}")
        return writes

    def _bake_numbers(self, numbers: list, uses: list, error, arg_numbers=(),
                      names=()) -> None:
        """A trace with Python numbers as graph inputs failed (a use needed a value, or
        ``error``): they keep their values baked in and guarded from now on (all of them:
        one more trace, where finding the one to blame could take one per number)."""
        bad = [slot for slot, _, _ in numbers]
        for i in arg_numbers:   # (argument leaves: baked in and guarded by value again)
            self._numbers.args.pop(i, None)
            self._numbers.baked_args.add(i)
        bad_names = [s.name for s in bad] + [names[i] if i < len(names) else f"argument {i}"
                                              for i in arg_numbers]
        if uses:
            name, use, location = uses[0]
            why = f"the value of {name} is used as a Python number ({use}) at {location}"
        else:
            why = f"tracing them as graph inputs failed ({type(error).__name__}: {error})"
        for slot in bad:
            self._numbers.bake(slot, why)
            owner = slot.container()
            if slot.kind == "attr" and is_module(owner):
                self._module_facts.inputs.discard((id(owner), slot.key))
                self._module_facts.version = None
        self._fast_paths, self._fast = {}, None
        self._stale = (f"{', '.join(bad_names)} not made graph inputs: {why}; "
                       "they stay baked in and guarded (a change retraces)")

    # -- capturing -------------------------------------------------------------------------
    def _capture(self, args, kwargs, sig, leaf_dynamic, held_dims=True) -> tuple:
        """``(entry, sig)``: the entry for a new trace (None at a graph break) and the
        signature it is cached under (it may guard Python values the trace created);
        ``held_dims``: with the marked dims of places it reads symbolic (autodims.PlaceDims)."""
        names = self.leaf_names(args, kwargs)
        module_before = {s.identity(): fact(s.get())
                         for s in self._module_facts.scalar_slots()}
        # (a graph break where Python needs a value splits the function from that call; not
        # while Python numbers are traced as graph inputs: a break bakes them in first)
        split = not (self.fullgraph or self.strict or self._numbers.holders
                     or self._numbers.args)
        names_in_scope = readable_names(self.fn, zip(names, flatten((args, kwargs))[0]))
        tracer = SplitTracer(names_in_scope, self) if split else Tracer(names=names_in_scope)
        try:
            capture, backward, created, times = self._trace(tracer, args, kwargs, names,
                                                            leaf_dynamic, held_dims=held_dims)
        except (PythonRandom, SchedulerStep) as e:   # (its Python must run at every call,
            self._split = None                        # drawing anew, stepping the schedule)
            if not split:
                return self._graph_break(e), sig
            self._every_call(e.why_every_call, e.location, e.fix)
            self._split_result = self._split(args, kwargs)
            return None, sig
        except (PythonPrint, FlagWrite, ModeWrite) as e:
            self._split = None
            if not split:
                return self._graph_break(e), sig
            once = isinstance(e, FlagWrite) and not self._flag_writes
            self._every_call("it prints" if isinstance(e, PythonPrint) else
                             "it sets grad mode" if isinstance(e, ModeWrite) else
                             "it sets requires_grad of a parameter, state or an argument",
                             e.location, e.fix, once)
            self._split_result = self._split(args, kwargs)
            self._flag_writes += isinstance(e, FlagWrite)
            self._split_once = once
            return None, sig
        except EagerFirstCall as e:   # (this call eagerly: the next one traces)
            self._split = None
            self.records.append(Record("python", f"{e.reason}: this call runs eagerly, the "
                                       "next traces", e.fix, e.location))
            return None, sig
        except CaptureError as e:
            self._split = None
            return self._graph_break(e), sig
        except (_StaticDims, _UnfitDims) as e:   # (unfit: this call's sizes, dims kept)
            if isinstance(e, _StaticDims) and held_dims and self._auto.places.marked:
                self._auto.places.give_up()   # (the places' dims static, the others kept)
                self.records.append(Record("python", "the tensors it reads from the places "
                                           f"it stores in keep static shapes: {e}",
                                           "none needed", _user_line(e.error)))
                return self._capture(args, kwargs, sig, leaf_dynamic, held_dims=False)
            if isinstance(e, _UnfitDims):
                self._stale = str(e)
            elif self._case_trace:
                self._stale = (f"this case of a slice's clamp can't stay symbolic ({e}): "
                               "traced with static shapes for these sizes")
            else:
                self._static_from_now(e.error)
            leaves, spec = self._flatten(args, kwargs)
            sig = signature(leaves, spec, [], self._module_facts.get(), self._optimizers,
                            self._slots, self._dynamic, self._numbers.args)
            return self._capture(args, kwargs, sig, [], held_dims=False)
        except _BakedNumbers:
            leaves, spec = self._flatten(args, kwargs)
            sig = signature(leaves, spec, leaf_dynamic, self._module_facts.get(),
                            self._optimizers, self._slots, self._dynamic, self._numbers.args)
            return self._capture(args, kwargs, sig, leaf_dynamic, held_dims)
        if split and tracer.broke:   # (the rest of this call is the splitter's)
            self._split_result = self._split.finish(tracer, capture, backward, args, kwargs,
                                                    times)
            return None, sig
        capture.graph.verify()
        capture.py_writes, sig = self._python_writes(sig, module_before,
                                                     capture.numbers_traced, capture.number_py)
        _name_new_state(capture, tracer.names, self.fn)
        traced, frozen = capture, []
        if backward is None and not created and self._freezing:
            capture, frozen = freeze_parameters(capture, self._freezable())
        entry = None if created else self._same_graph(capture, backward, frozen)
        reused = entry is not None
        if not reused:
            entry = self.new_entry(capture, backward)
            times.update(entry.times)
            if frozen:
                entry.frozen, entry.traced = frozen, traced
        stale, self._stale = self._stale, None
        note, self._number_note = self._number_note, None
        if stale:
            reason, fix, kind = stale, "none needed: traced again for it", "retrace"
        elif self.cache:
            reason, fix = explain_miss(sig, next(reversed(self.cache)), names, self._slots)
            kind = "retrace"
            if reused:
                reason += "; the same graph as before, so its compiled code is reused"
                fix = "none needed: nothing was optimised or compiled again"
        elif self._made_state:
            reason, fix, kind = "traced again with the state the previous call made", "", \
                "retrace"
        else:
            reason, fix, kind = "first call", "", "capture"
        if note:
            reason += f"; {note}"
        if created:   # (its Python took the branch that makes the state: not reusable)
            entry.created = created
            reason += (f"; it made {', '.join(name for name, _ in created)} and kept it "
                       "in Python state, so this graph runs once and the next call traces "
                       "again")
        guards = describe_guards(sig, names, self._slots)
        if frozen:
            guards.append(f"{len(frozen)} parameters and buffers frozen as constants, "
                          "each guarded by its storage and version")
        self.records.append(Record(kind, reason, fix, guards=guards,
                                   nodes=len(capture.graph.nodes), times=times,
                                   entry=None if reused else entry))
        if not created:
            self.cache[sig] = entry
        return entry, sig

    def _trace(self, tracer, args, kwargs, names, leaf_dynamic, as_inputs=True,
               held_dims=False) -> tuple:
        """``(capture, backward, created, times)``: one trace of the function by
        ``tracer``, with its arguments bound (``names``; ``leaf_dynamic``: their dynamic
        dims), the state it made (``[(name, line)]``) and the seconds it took. A graph break
        raises CaptureError once the Python state the trace changed is put back; a failure
        that a Python number traced as a graph input may have caused raises _BakedNumbers
        (they are baked in now: trace again). ``as_inputs``: trace the numbers that are graph
        inputs as such (False: as the values they hold, as a split call, which runs its
        Python at every call, does); ``held_dims``: bind the tensors of the places with
        marked dims (autodims.PlaceDims) with those dims symbolic."""
        had_grad = {id(p): p.grad is not None for p in self._known_parameters()}
        grad_was = grad_mode.enabled
        leaves, _ = flatten((args, kwargs))
        roots = self._state_roots(leaves)
        filled = {**roots, **_filled_arguments(args, kwargs)}   # (where kept state can be)
        before, cells = places(filled), scalar_cells(self.fn)
        tensors_held = tensor_places(roots, root_sources(self.fn), self._guarded_elsewhere())
        state = self._state_versions(tensors_held)
        arg_state = {id(t._version) for t in leaves
                     if isinstance(t, Tensor) and id(t._version) in state}
        draws, schedule = Draws(roots), Steps(roots)
        made = [(o.state, {p: set(s) for p, s in o.state.items()}) for o in
                (*(self._optimizers or ()), *args, *kwargs.values()) if is_optimizer(o)]
        flags = [(t, t.requires_grad) for t in self._known_parameters()] + [
            (held(c, k), held(c, k).requires_grad) for places in tensors_held.values()
            for _, c, k in places[:1] if isinstance(held(c, k), Tensor)] + [
            (t, t.requires_grad) for t in leaves if isinstance(t, Tensor)]   # (x.requires_grad_())
        start = time.perf_counter()
        swapped = self._swap_hyper_inputs(tracer.names)
        numbers = self._numbers.swap_in(tracer, tracer.names) if as_inputs else []
        call_args, call_kwargs = args, kwargs
        if as_inputs and self._numbers.args:   # (the Python number arguments that are inputs)
            call_args, call_kwargs = unflatten(
                flatten((args, kwargs))[1], self._numbers.swap_args(tracer, leaves, names))
        symbolic = bool(numbers or tracer.arg_numbers)
        number_writes, random_break = [], None
        sizes = DimFacts.sizes(leaves, leaf_dynamic)   # (before the trace binds the leaves)
        symbolic_places = self._auto.places.shapes(held, sizes) if held_dims else []
        dynamic = any(leaf_dynamic) or bool(symbolic_places)
        tracer.size_cases = SizeCases(sizes) if sizes else None
        try:
            with tracer, math_functions(symbolic), held_prints(self.fn) as printed:
                index, bound = 0, set()
                for i, leaf in enumerate(leaves):
                    if isinstance(leaf, Tensor):
                        dyn = leaf_dynamic[i] if i < len(leaf_dynamic) else None
                        shape = None
                        if dyn:
                            shape = tuple(dyn.get(d, n) for d, n in enumerate(leaf.shape))
                        if id(leaf) not in bound:   # (one tensor passed twice: one input,
                            bound.add(id(leaf))      # the signature guards the aliasing)
                            tracer.bind(leaf, "arg", names[i], shape=shape, index=index)
                        index += 1
                for name, t, shape in symbolic_places:   # (before the function reads them)
                    if id(t) not in bound:
                        tracer.bind(t, "captured", name, shape=shape)
                result = self.fn(*call_args, **call_kwargs)
                _refuse_opaque_results(self.fn, result, tracer)
                if as_inputs and draws.drawn():
                    random_break = PythonRandom(self.fn)
                    raise random_break
                if as_inputs and schedule.stepped():
                    random_break = SchedulerStep(self.fn)   # (as a draw: every call)
                    raise random_break
                if as_inputs and printed and not getattr(tracer, "broke", False):
                    raise PythonPrint(printed[0][0])   # (one graph would print once)
                if as_inputs and any(t.requires_grad != was for t, was in flags):
                    raise FlagWrite(self.fn)   # (one graph would not set it at its calls)
                if as_inputs and grad_mode.enabled != grad_was:   # (its Python: every call)
                    grad_mode.enabled = grad_was
                    raise ModeWrite(self.fn)
                hyper_writes = _hyper_writes(swapped, tracer)
                if symbolic:
                    number_writes = self._number_writes(tracer, numbers, roots, result)
                kept = kept_places(filled, tracer)
                rebinds = self._rebound_roots(tracer, roots, kept)
                kept += [place[:4] for place in rebinds]
                capture = tracer.finish(result, [t for _, t, _, _ in kept])
                capture.kept = [(container, key) for _, _, container, key in kept]
                capture.held = guards_for(tensors_held, capture.bindings)
                olds = {id(t): (None if old is UNBOUND else old)
                        for _, t, _, _, old in rebinds}
                capture.kept_before = [olds[id(t)] if id(t) in olds else held_before(before, c, k)
                                       for _, t, c, k in kept]
                capture.arg_state = arg_state
                capture.param_state = self._parameter_versions()
                created = [(name, _made_at(t._data)) for name, t, _, _ in kept]
                traced = time.perf_counter()
                backward = None
                if grad_mode.enabled:
                    backward = build_backward(tracer, capture, tracer.result_leaves)
                    refuse_kept_by_backward(filled, tracer, kept)
                    _keep_forward_state(kept)
                if backward is not None and dynamic:
                    _check_dims_bound(backward.graph)
                if dynamic:
                    _check_dims_fit(capture, backward, sizes)
        except Exception as e:   # (the eager run makes again the state the trace made)
            dims = dynamic and not isinstance(e, CaptureError)
            if not (symbolic or dims or isinstance(e, CaptureError)):
                raise
            self._numbers.restore(numbers)
            undo(filled, tracer, before)
            put_back(rebound_roots(self.fn, tracer, roots))
            restore_cells(cells)
            draws.restore()   # (the eager run draws the same numbers)
            schedule.restore()   # (and steps the schedule from the same state)
            for t, was in flags:   # (and sets the same flags)
                t.requires_grad = was
            _forget_state(made)   # (and makes the optimiser state the trace made)
            if e is random_break or isinstance(e, _UnfitDims) or not (symbolic or dims):
                raise
            if not symbolic:   # (symbolic dims may be the cause: traced again, static)
                raise _StaticDims(e) from e
            # (a Python number traced as an input may be the cause: traced again, baked in)
            self._bake_numbers(numbers, tracer.number_uses, e, tracer.arg_numbers, names)
            raise _BakedNumbers() from e
        finally:
            for group, k, value, t in swapped:
                if group[k] is t:
                    group[k] = value
        times = {"trace": traced - start}
        if backward is not None:
            times["autodiff"] = time.perf_counter() - traced
        for b in capture.bindings:   # (parameters read only through helpers it calls, too)
            if b.kind == "captured" and id(b.tensor) not in had_grad:
                had_grad[id(b.tensor)] = b.grad is not None
        capture.had_grad = had_grad
        capture.hyper_writes = hyper_writes
        capture.number_writes, capture.number_py = number_writes or ([], [])
        capture.numbers_traced = numbers
        return capture, backward, created, times

    def new_entry(self, capture, backward, passes=None) -> Entry:
        """``capture`` compiled with this function's settings (``passes=False``: as traced,
        for a split function's first last piece)."""
        backend = self.compile_options.get("backend")
        if passes is False:
            return Entry(capture, backward, False, self.fast_math)
        return Entry(capture, backward, self.passes, self.fast_math, self.memory_budget,
                     backend if callable(backend) else None)

    def _state_versions(self, tensors_held: dict) -> set:
        """The storages (ids of version counters, which views share) of the tensors the
        function can read as state: its modules' and optimisers' parameters and buffers and
        the tensors ``tensors_held`` found. An argument sharing one is guarded as such."""
        state = {id(held(c, k)._version) for places in tensors_held.values()
                 for _, c, k in places[:1] if isinstance(held(c, k), Tensor)}
        return state | self._parameter_versions()

    def _parameter_versions(self) -> set:
        """The storages of its modules' and optimisers' parameters and buffers (alive as
        long as the module and optimiser guards hold)."""
        state = {id(p._version) for p in self._known_parameters()}
        for _, root in self._module_facts.roots:
            state.update(id(b._version) for b in root.buffers())
        return state

    def _guarded_elsewhere(self) -> set:
        """The ids of the modules (their tensors guarded by the module facts) and the
        optimisers (their state and facts guarded) that capture/held.py does not look into."""
        ids = {id(o) for o in self._optimizers or ()}
        for _, root in self._module_facts.roots:
            ids.update(id(m) for _, m in root.named_modules())
        return ids

    def _rebound_roots(self, tracer, roots: dict, kept: list) -> list:
        """The globals and closure variables the traced call rebound to a tensor it made
        (capture/held.py), other than those ``kept`` already names: kept state, stored
        there by the graph as a dict item or attribute is. Their old tensors are no longer
        objects whose rebinding drops the graphs (``rebound``): the graph rebinds them."""
        rebinds = [place for place in rebound_roots(self.fn, tracer, roots)
                   if not any(place[1] is t for _, t, _, _ in kept)]
        if rebinds:
            self._stored_roots.update(name for name, *_ in rebinds)
            self._held = [h for h in self._held if h[0] not in self._stored_roots]
        return rebinds

    def _state_roots(self, leaves) -> dict:
        """Where state the function keeps can be: its scope, its module (or the object
        of a bound method) and the non-tensor objects it is passed."""
        roots = dict(scope_of(self.fn))
        owner = self.fn if is_module(self.fn) else getattr(self.fn, "__self__", None)
        if owner is not None:
            roots["self"] = owner
        roots.update({f"argument {i}": leaf for i, leaf in enumerate(leaves)
                      if not isinstance(leaf, Tensor)})
        return roots

    def _run_once(self, entry, args, kwargs, leaves, sig):
        """Run the graph of a call that made state (``entry.created``); the next call traces
        again, with that state. State made anew at every call (MADE_STATE_LIMIT calls in a
        row: a mask made again whenever the length changes makes it twice;
        ``history.append(loss.detach())``, a hook's ``self.act = out``) can't be one graph:
        the Python that keeps it must run at every call (a list it grows, read by
        ``len()``, is no guard), so the function runs its Python at every call from then
        on, replaying the call before, as a split function does (capture/split.py)."""
        self._last = entry
        result = entry.run(args, kwargs, leaves=leaves)
        self._made_state += 1
        previous, self._made_by = self._made_by, entry
        known = _same_places(entry.capture.kept, self._storing)   # (a retrace of a step that
        if (self._made_state >= MADE_STATE_LIMIT or known) and self._stores(  # stores there)
                entry, previous, sig, known):
            return result
        if self._made_state >= MADE_STATE_LIMIT:
            name, location = entry.created[0]
            fix = ("Make it once outside the compiled function (or register it as a buffer), "
                   "or return it instead of storing it, for one graph run from its guards "
                   "alone.")
            if self.fullgraph or self.strict or self._numbers.holders or self._numbers.args:
                self._graph_break(CaptureError(f"{name} is a tensor made at every call and "
                                               "kept in Python state", location, fix))
            else:
                self._every_call(f"it keeps a tensor it makes in Python state at every call "
                                 f"({name})", location, fix)
        return result

    def _stores(self, entry, previous, sig, known=False) -> bool:
        """Cache ``entry``, the graph of a call that kept tensors it made where the call
        before kept its own, as a graph that stores new ones there after each run, when
        that is what its Python does at every call: each is a dict item or an attribute
        replaced (not a list it grows: a ``len()`` read would be no guard). The tensors
        there that the call read (``self.running_mean = f(self.running_mean)``) are read from
        there at each call; one with history is stored as its value, where the step's
        backward ran inside it. ``known``: its places are those of a graph that stores,
        cached before (a retrace of the same step). Whether it did."""
        cap = entry.capture
        if not (known or previous is not None
                and _same_places(cap.kept, previous.capture.kept)):
            return False
        made = [t for kind, t in cap.writebacks if kind == "new"]
        reads = {k: (name, c, key) for (name, _), (c, key), old
                 in zip(entry.created, cap.kept, cap.kept_before)
                 for k, b in enumerate(cap.bindings) if b.tensor is old}
        # (a tensor with history is kept as its value: only where the step's backward ran
        # inside it, so that no later backward can be through that history)
        whole = entry.backward is None
        inside = whole and any(kind == "grad" for kind, _ in cap.writebacks)
        if (not all(isinstance(c, dict) or key is CELL for c, key in cap.kept)
                or any(t.requires_grad for t in made) and not inside
                or reads and not whole
                or any(cap.bindings[k].kind not in ("captured", "arg") for k in reads)):
            return False
        unset = [(name, c, key, fact(old)) for (name, _), (c, key), old
                 in zip(entry.created, cap.kept, cap.kept_before) if not isinstance(old, Tensor)]
        entry.held = Held(entry.held.guards, reads, unset)
        entry.place_symbols = any(isinstance(d, Sym) for k in reads
                                  for d in cap.graph.inputs[k].shape)
        if entry.sharing is not None:   # (an argument that is such a tensor: that place)
            entry.sharing = entry._sharing([b.tensor for b in cap.bindings], by_binding=True)
        modules = {id(vars(m)): m for _, root in self._module_facts.roots
                   for _, m in root.named_modules()}
        for container, key in cap.kept:   # (not guarded by identity: the graph sets them)
            if id(container) in modules:
                self._module_facts.kept.add((id(modules[id(container)]), key))
        self._module_facts.version = None
        names = ", ".join(name for name, _ in entry.created)
        location = entry.created[0][1]
        entry.created, entry.stores, self._made_state = (), True, 0
        self._storing = cap.kept
        self.cache[sig[:3] + (self._module_facts.get(),) + sig[4:]] = entry
        self.records.append(Record(
            "python", f"it keeps a tensor it makes at every call ({names}), replacing the "
            "one of the call before: its graph runs from its guards alone and stores a new "
            "tensor there after each run" + _store_notes(entry, made), "none needed",
            location))
        return True

    def _every_call(self, why: str, location: str, fix: str, once: bool = False) -> None:
        """Run the function's Python at every call from now on (``why``), its ops compiled
        and replayed as a split function's (capture/split.py), instead of eagerly; ``once``:
        at this call only (the caller then traces again at the next)."""
        self._split, self._fast = Splitter(self, why), None
        when = ("at this call, and the next traces again" if once else
                "at every call from now on, replaying the call before")
        self.records.append(Record("python", f"{why}: its Python runs {when}, its ops "
                                   "compiled", fix, location))

    def _same_graph(self, capture, backward, frozen=()) -> Entry | None:
        """An entry already compiled from the same graph as ``capture``, if any (given the
        gradients ``capture`` assumes absent or cleared: :meth:`Entry.assuming`), and
        frozen from the same tensors in the same state as ``frozen`` (its guards then hold
        for this capture too). Keys are computed only once there is a retrace (a single
        capture never needs one)."""
        if not self.cache:
            return None
        keys = self._entry_keys     # (holding each entry, so that its id stays its own)
        state = [(id(f.tensor), id(f.array), f.version) for f in frozen]
        live = {id(entry): entry for entry in self.cache.values()
                if [(id(f.tensor), id(f.array), f.version) for f in entry.frozen] == state
                and entry.capture.size_facts == capture.size_facts   # (the same clamps)
                and not any(f.changed() for f in entry.frozen)}
        for i, entry in live.items():
            if i not in keys:
                keys[i] = (capture_key(entry.capture, entry.backward), entry)
        key = capture_key(capture, backward)
        same = next((entry for i, entry in live.items() if keys[i][0] == key), None)
        return same.assuming(capture) if same is not None else None

    def _known_parameters(self) -> list:
        """The parameters of the compiled module, of the modules the function names and of
        its optimisers (whether each has a ``.grad`` is noted at each capture)."""
        modules = [self.module] if self.module is not None else []
        modules += [m for m in scope_of(self.fn).values() if is_module(m)]
        params = [p for m in modules for p in m.parameters()]
        for opt in self._optimizers or ():
            params += [p for group in opt.param_groups for p in group["params"]]
        return params

    def _retraced_call(self, stale, args, kwargs):
        """The call again, traced anew because a guard of the cached graph failed; a guard
        that fails again right after its own trace (a fact the trace can't fix) would loop,
        so the third time in one call the function runs eagerly from then on, warning."""
        self._stale_depth += 1
        try:
            if self._stale_depth <= 2:
                return self(*args, **kwargs)
            self.records.append(Record("eager", f"a guard failed again right after tracing "
                                       f"({stale})", "none: eager gives the right result"))
            warnings.warn(f"dg.compile: {_name(self.fn)}: a guard failed right after "
                          f"tracing again ({stale}); running it eagerly from now on",
                          stacklevel=3)
            self.eager_only, self._fast = True, None
            return self.fn(*args, **kwargs)
        finally:
            self._stale_depth -= 1

    def _auto_dims(self, args, kwargs, leaves, spec, sig, leaf_dynamic) -> tuple:
        """``(sig, leaf_dynamic)`` for a call that missed the cache: with the dims marked
        dynamic now when only their sizes changed since the latest capture (autodims.py)."""
        names = self.leaf_names(args, kwargs)
        static = signature(leaves, spec, [], self._module_facts.get(), self._optimizers,
                           self._slots, self._dynamic, self._numbers.args)
        marked = self._auto.mark(names, static)
        self._auto.last = (names, static)
        if marked is None:
            return sig, leaf_dynamic
        self._stale = marked
        leaf_dynamic = self._auto.leaf_dynamic(names, leaves)
        return signature(leaves, spec, leaf_dynamic, self._module_facts.get(), self._optimizers,
                         self._slots, self._dynamic, self._numbers.args), leaf_dynamic

    def _static_from_now(self, error: Exception) -> None:
        """Dims marked dynamic that a trace could not keep symbolic (an op that computes
        with a dim as a Python int): a warning naming the line, then static shapes (one
        graph per shape, each guarded) for this function from now on, as if ``dynamic``
        were not given. A user's own error comes back from the static trace, as eager's."""
        where = _user_line(error)
        if self._auto.dims or self._auto.places.marked:   # (dims it marked itself: no
            # warning, explain() says it)
            self._auto.give_up()
            self._stale = None
            self.records.append(Record("static", "automatic dynamic dims given up: "
                                       f"{type(error).__name__}: {error}; one graph per shape "
                                       "from now on", "none needed", where))
            return
        self._auto.give_up()
        self.records.append(Record("static", f"{type(error).__name__}: {error}",
                                   "none needed (or give the failing op static dims)", where))
        warnings.warn(f"dg.compile: {_name(self.fn)} could not be traced with symbolic dims "
                      f"({type(error).__name__}: {error}, at {where}); it is traced with "
                      "static shapes from now on (one graph per shape)", stacklevel=4)
        self.dynamic = None

    def _graph_break(self, e: CaptureError):
        """A break that does not split the function (capture/split.py splits at those where
        Python needs a value): with ``fullgraph`` it raises, else the function runs eagerly
        from now on. A kept tensor of another trace can't run eagerly either: it raises."""
        if self.fullgraph or isinstance(e, StaleTensorError):
            raise e
        self.records.append(Record("break", e.reason, e.fix, e.location))
        warnings.warn(f"dg.compile: graph break in {_name(self.fn)} at {e.location}: "
                      f"{e.reason}; running it eagerly from now on. {e.fix}", stacklevel=4)
        self.eager_only = True
        self._fast = None
        return None

    # -- reports ----------------------------------------------------------------------------
    @property
    def capture(self) -> Capture:
        """The most recent call's capture: its graph (before the passes), how the graph's
        inputs bind to arguments and state, and what its outputs become."""
        if self._last is None:
            raise RuntimeError("nothing captured yet: call the compiled function first")
        return self._last.traced or self._last.capture

    @property
    def graph(self) -> CapturedGraph:
        """The captured graph of the most recent call's signature (before the passes);
        ``.save(path)`` writes it as a self-contained model (capture/freeze.py)."""
        capture = self.capture
        if capture.view is None:
            capture.view = CapturedGraph(capture)
        return capture.view

    def save(self, path, freeze: bool = True) -> None:
        """``self.graph.save(path, freeze)``: write the latest captured graph, by default
        frozen (the tensors it reads are saved as constants with their current values, so
        ``dg.graph.load(path)`` runs with only the function's arguments).

        >>> import dualgraph as dg, os, tempfile
        >>> m = dg.nn.Linear(2, 1)
        >>> path = os.path.join(tempfile.mkdtemp(), "linear.json")
        >>> dg.jit.trace(m, dg.ones(3, 2)).save(path)
        >>> dg.graph.load(path)(dg.ones(3, 2))[0].shape
        (3, 1)
        """
        self.graph.save(path, freeze=freeze)

    @property
    def optimized_graph(self):
        """The graph that runs: the captured one after the pass pipeline."""
        if self._last is None:
            raise RuntimeError("nothing captured yet: call the compiled function first")
        return self._last.graph

    def show(self, path=None, open_browser: bool = False) -> str:
        """Write the latest capture as a self-contained HTML page and return its path: the
        captured graph and the optimised one side by side (ops, shapes, dtypes, source lines,
        fused groups as clusters) and the memory plan's buffers (``graph/html.py``). With no
        ``path``, a new file in the temp directory; ``open_browser=True`` opens it.

        >>> import dualgraph as dg, os, tempfile
        >>> f = dg.compile(lambda x: dg.tanh(x * 2 * 3) + 1)
        >>> _ = f(dg.ones(4))
        >>> path = f.show(os.path.join(tempfile.mkdtemp(), "f.html"))
        >>> "fused" in open(path).read()
        True
        """
        entry = self._last
        if entry is None:
            raise RuntimeError("nothing captured yet: call the compiled function first")
        if path is None:
            fd, path = tempfile.mkstemp(prefix="dualgraph-", suffix=".html")
            os.close(fd)
        write_html(path, [("captured", entry.capture.graph), ("optimised", entry.graph)],
                   plan_in(entry.reports), title=f"dg.compile of {_name(self.fn)}")
        if open_browser:
            webbrowser.open(pathlib.Path(path).resolve().as_uri())
        return path

    @property
    def code(self) -> str:
        if self._last is None:
            raise RuntimeError("nothing captured yet: call the compiled function first")
        return self._last.executable.code

    def explain(self) -> str:
        """What was captured, the guards, each retrace and break with its fix, where each
        capture's compile time went (tracing, autodiff, the passes, code generation, and
        the first forward and backward runs with the kernels they compiled or loaded),
        and the passes' reports (each with its run time)."""
        graphs = (sum(1 + len(e.cases) for e in self.cache.values())
                  + sum(r.kind == "piece" for r in self.records))
        lines = [f"dg.compile report for {_name(self.fn)}: {graphs} graph(s), "
                 f"{sum(r.kind == 'break' for r in self.records)} graph break(s)"]
        for i, r in enumerate(self.records, 1):
            if r.kind in ("capture", "retrace"):
                what = "captured" if r.kind == "capture" else "retraced"
                lines.append(f"{i}. {what} ({r.detail}): {r.nodes} nodes captured")
                if r.fix:
                    lines.append(f"   fix: {r.fix}")
                lines.append("   guards: " + "; ".join(r.guards))
                lines.append("   time: " + r.describe_times())
            elif r.kind == "break":
                lines.append(f"{i}. graph break at {r.location}: {r.detail}")
                lines.append(f"   fix: {r.fix}")
            elif r.kind == "piece":
                lines.append(f"{i}. compiled piece {r.detail}: {r.nodes} nodes")
                if r.times:
                    lines.append("   time: " + r.describe_times())
            elif r.kind == "python":
                lines.append(f"{i}. {r.detail} (at {r.location}). fix: {r.fix}")
            elif r.kind == "static":
                lines.append(f"{i}. symbolic dims given up at {r.location} ({r.detail}): "
                             f"static shapes from now on. fix: {r.fix}")
            elif r.kind == "eager":
                lines.append(f"{i}. running eagerly from now on: {r.detail}. fix: {r.fix}")
            else:
                lines.append(f"{i}. retrace limit reached ({r.detail}); new signatures run "
                             f"eagerly. fix: {r.fix}")
        if self._split is not None:
            lines.append(self._split.describe())
        if self._last is not None:
            entry = self._last
            lines.append(f"passes on the latest graph ({len(entry.capture.graph.nodes)} -> "
                         f"{len(entry.graph.nodes)} nodes):")
            lines += ["  " + line for r in entry.reports for line in str(r).splitlines()]
            executables = [entry.executable, entry.backward_executable]
            for name, body in (b for e in executables if e is not None
                               for b in e.named_bodies()):
                lines.append(f"passes on control-flow body {name} "
                             f"({len(body.source_graph.nodes)} -> {len(body.graph.nodes)} "
                             "nodes):")
                lines += ["  " + line for r in body.reports for line in str(r).splitlines()]
        return "\n".join(lines)


def _arrays_as_tensors(args, kwargs) -> tuple:
    """The arguments with NumPy arrays made tensors (sharing their memory): eager ops take
    an array as they take a tensor, and as a tensor it is a graph input, guarded by shape
    and dtype, where an array would be baked into the graph as a constant."""
    leaves, spec = flatten((args, kwargs))
    if not any(type(x) is np.ndarray for x in leaves):
        return args, kwargs
    return unflatten(spec, [Tensor._make(x) if type(x) is np.ndarray else x for x in leaves])


def _names_in(tree, base: str) -> list[str]:
    """The names of ``tree``'s leaves, one per leaf of its flattened structure."""
    return _names_of(flatten(tree)[1], base)


def _names_of(spec, base: str) -> list[str]:
    if spec is None:
        return [base]
    if len(spec) == 3:   # (a dict's keys, a dataclass's fields, an object's attributes)
        kind, keys, children = spec
        part = "[{!r}]" if issubclass(kind, dict) else ".{}"
        return [n for k, c in zip(keys, children) for n in _names_of(c, base + part.format(k))]
    return [n for i, c in enumerate(spec[1]) for n in _names_of(c, f"{base}[{i}]")]


def _returning(compiled: Compiled, method):
    """``method`` of the compiled module, returning the compiled object where the method
    returns the module itself (``model = dg.compile(model).eval()``, ``.to(...)``)."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        out = method(*args, **kwargs)
        return compiled if out is compiled.module else out
    return call


MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
BACKENDS = ("inductor", "aot_eager", "eager")
OPTIONS = ("check", "passes", "fast_math", "memory_budget")   # options= keys: dg.compile's own


def compile(fn=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,
            options=None, disable=False, check=False, passes=None, fast_math=False,
            memory_budget=None):
    """Capture ``fn`` (a function or module) into static graphs on first call per input
    signature; see :class:`Compiled`. Usable as ``@dg.compile`` or ``@dg.compile(...)``.

    The keywords of ``torch.compile`` are accepted. ``backend="inductor"`` (the default)
    captures and optimises; ``"aot_eager"`` captures and runs the graphs as traced, with no
    optimisation passes; ``"eager"`` runs ``fn`` as written (no capture), to rule the
    compiler out when debugging. A callable backend is a compiler of dualgraph's graphs
    (not torch FX graphs): ``backend(graph, example_inputs)`` is called once per graph
    that runs (a capture's forward and, when it is differentiated, its backward), at its
    first run, with the optimised ``dg.graph.Graph`` (printable; ``graph(*arrays)`` runs it
    in the reference interpreter) and that run's NumPy input arrays, one per
    ``graph.inputs``; it returns a callable taking those arrays positionally and returning
    a list of arrays, one per ``graph.outputs``, run in place of the generated code, or
    None to run the generated code (a backend that only inspects). A callable that can't
    take the inputs, or returns the wrong number of outputs, is a clear error. ``mode`` (torch's names) is recorded and changes nothing:
    the default compile already keeps the per-call overhead low. ``options`` is a dict of
    this function's own options (``check``, ``passes``, ``fast_math``); ``disable=True``
    returns ``fn`` itself. A compiled module stands in for the module (attributes,
    ``train()``/``eval()``, ``state_dict()`` with the module's own keys).

    ``passes`` selects the optimisation passes and lowering rules (None: all; False: none;
    names to run; or ``{name: False}`` to switch some off), as everywhere
    (``passes.run_pipeline``, ``passes.PASS_NAMES``). ``fast_math=True`` lets fused kernels use
    vectorised float32 exp/tanh approximations (~3e-7 relative error) instead of NumPy's.
    ``memory_budget`` (bytes) caps the peak of live intermediate values of each graph: the
    ``rematerialize`` pass recomputes cheap values (elementwise first, matrix products
    last) instead of keeping them alive, and ``explain()`` says whether the budget was met
    (docs/training.md).

    >>> import dualgraph as dg
    >>> f = dg.compile(lambda x: dg.exp(x) * 2)
    >>> f(dg.zeros(2))
    tensor([2., 2.])
    >>> m = dg.compile(dg.nn.Linear(2, 1), mode="reduce-overhead")
    >>> m.eval().training, m.weight.shape == (1, 2), isinstance(m, dg.nn.Module)
    (False, True, True)
    >>> seen = []
    >>> def inspect_only(graph, example_inputs):
    ...     seen.append([node.op.name for node in graph.nodes])
    ...     return None                # (run dualgraph's generated code)
    >>> dg.compile(lambda x: dg.exp(x) * 2, backend=inspect_only)(dg.zeros(2))
    tensor([2., 2.])
    >>> seen
    [['fused']]
    """
    settings = dict(check=check, fullgraph=fullgraph, dynamic=dynamic, passes=passes,
                    fast_math=fast_math, memory_budget=memory_budget)
    settings.update(_torch_options(backend, mode, options, fullgraph, dynamic, passes))
    if disable:
        return (lambda f: f) if fn is None else fn
    if fn is None:
        return lambda f: Compiled(f, **settings)
    return Compiled(fn, **settings)


def _budget(memory_budget):
    if memory_budget is None:
        return None
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or \
            memory_budget < 0:
        raise TypeError(f"dg.compile: memory_budget must be a number of bytes (an int >= 0) "
                        f"or None, got {memory_budget!r}")
    return memory_budget


def _torch_options(backend, mode, options, fullgraph, dynamic, passes) -> dict:
    """Check ``torch.compile``'s keywords; the settings they give ``Compiled``."""
    if mode not in MODES:
        raise ValueError(f"dg.compile: unknown mode={mode!r}; expected one of "
                         f"{', '.join(map(repr, MODES[1:]))} (recorded; none changes what "
                         "runs)")
    if mode is not None and options is not None:
        raise RuntimeError("dg.compile: either mode or options can be specified, but both "
                           "can't be specified at the same time (as torch.compile)")
    if not callable(backend) and backend not in BACKENDS:
        raise ValueError(f"dg.compile: unknown backend={backend!r}; expected one of "
                         f"{', '.join(map(repr, BACKENDS))}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"dg.compile: fullgraph must be True or False, got {fullgraph!r}")
    if not (dynamic is None or isinstance(dynamic, (bool, dict))):
        raise TypeError(f"dg.compile: dynamic must be None, True, False or a dict "
                        f"{{argument: {{dim: name}}}}, got {dynamic!r}")
    settings = {}
    if options is not None:
        unknown = sorted(set(options) - set(OPTIONS)) if isinstance(options, dict) else None
        if unknown != []:
            raise ValueError(f"dg.compile: options must be a dict with keys among "
                             f"{', '.join(OPTIONS)} (torch's inductor options have no "
                             f"counterpart here), got {options!r}")
        settings.update(options)
    if backend == "aot_eager":
        if (settings.get("passes", passes)) not in (None, False):
            raise ValueError("dg.compile: backend='aot_eager' runs no passes; drop passes=")
        settings["passes"] = False
    settings["compile_options"] = dict(backend=backend, mode=mode, options=options)
    return settings
