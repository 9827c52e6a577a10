"""Tracing: run a Python function with symbolic tensors and record the ops into a Graph.

While a :class:`Tracer` is active, dispatch hands every op call to :meth:`Tracer.run`,
which appends a node and returns symbolic Values (Tensors then hold Values instead of
arrays). Autograd records as usual, so ``loss.backward()`` inside the function traces the
backward ops into the same graph.

Tensors the function reads but did not receive as arguments (module parameters, buffers,
optimiser state, globals) are *bound*: they become graph inputs fed, at every call, from
the same tensor objects, so updates made outside the graph are seen. In-place updates of
bound tensors and new ``.grad`` values are *functionalised*: the graph returns the new
values and the caller writes them back (see :class:`Capture`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from .._helpers import format_site, user_site
from .._pytree import flatten
from ..dispatch import op_error, pop_tracer, push_tracer
from ..errors import CaptureError
from ..shapes import ShapeError
from ..graph import Graph
from ..graph.ir import Value
from ..ops.views import refresh
from ..tensor import MUTATIONS, Tensor
from . import symbolic


_TRACE_IDS = itertools.count(1)   # (0: a tensor no trace made)


class StaleTensorError(CaptureError):
    """A tensor an earlier trace made (and left where no walk for kept state found it)
    read by a later one: it holds that trace's symbolic value, no array, so the call can't
    run eagerly either; raised, never a graph break."""

    def __init__(self, location: str):
        super().__init__(
            "using a traced tensor from another capture (kept from an earlier call, where "
            "the compiled function does not look for the state it keeps?)", location,
            "Don't keep tensors from inside a compiled function where it can't reach them "
            "(a helper's global or closure cell, a default argument, deep inside an object): "
            "return them, or keep them in a module attribute, a global or closure variable "
            "of the function, or the optimiser's state, where they become real tensors "
            "after each call.")


@dataclass
class Binding:
    """A tensor from outside the graph that the graph reads as an input.

    ``kind`` is "arg" (the i-th tensor argument), "captured" (read by identity: parameters,
    buffers, state, globals) or "grad" (the ``.grad`` of ``tensor``, read when backward
    accumulates into an existing gradient).
    """
    kind: str
    tensor: Tensor
    value: Value
    array: np.ndarray | None      # the storage at trace time, restored when tracing ends
    grad: object = None            # tensor.grad when first seen, restored when tracing ends
    index: int = -1                # for "arg": the position among the tensor arguments
    history: tuple = ()            # (grad_fn, output index, accumulator), restored at the end
    cut: bool = False              # a value an earlier piece of a split call computed
    required: bool = False         # tensor.requires_grad when bound (the step may turn it off)


@dataclass
class Capture:
    """The result of one trace: the graph and how to feed it and use its outputs.

    Graph inputs are ``bindings`` in order; graph outputs are the user's outputs
    (``out_spec`` rebuilds their structure, ``out_consts`` holds non-tensor leaves), then
    one output per entry of ``writebacks``: ("data", tensor) writes the new value into the
    tensor's storage; ("grad", tensor) makes it the tensor's ``.grad``; ("new", tensor) makes
    it the storage of a tensor the traced call created and kept.
    """
    graph: Graph
    bindings: list
    out_spec: object
    out_leaves: list               # per user output leaf: "value" or ("const", python value)
    writebacks: list = field(default_factory=list)
    grads_cleared: list = field(default_factory=list)   # tensors whose .grad ends as None
    # id -> whether it had a .grad when the trace began, for the parameters of the compiled
    # module and of the modules and optimisers the function names (``Compiled`` fills it in)
    had_grad: dict = field(default_factory=dict)
    view: object = None   # the CapturedGraph ``Compiled.graph`` shows (capture/freeze.py)
    # (slot, value): the Python values the traced call wrote (capture/pyvalues.py)
    py_writes: list = field(default_factory=list)
    # (param group, key, tensor): hyper-parameters that are graph inputs and that the traced
    # call set (``group["lr"] = ...``): their tensor is written back ("data"), then the
    # group gets its value as a Python float again, as eager leaves it
    hyper_writes: list = field(default_factory=list)
    # (slot, tensor): Python numbers that are graph inputs and that the traced call set to
    # a traced value (``state["step"] += 1``): the tensor is written back ("data"), then the
    # slot gets its value as a Python number again (capture/symbolic.py)
    number_writes: list = field(default_factory=list)
    # leaf position -> binding, for each output that is a bound tensor itself (``return x``)
    returned: dict = field(default_factory=dict)
    # "Fn.apply at file:line" per custom autograd function the call applied: their
    # backward is the user's, which a replay of the forward's ops would not call
    custom_functions: list = field(default_factory=list)
    # (Value, hooks) per traced tensor the call registered gradient hooks on
    # (``h.register_hook(fn)`` in a forward): a create_graph replay registers them again
    tensor_hooks: list = field(default_factory=list)
    # (container, key) where the traced call kept each tensor it made, in the order of the
    # ("new", tensor) writebacks (a graph that stores them anew at every run: compile.py)
    kept: list = field(default_factory=list)
    # (name, container, key, tensor): places outside modules that held a tensor the graph
    # reads by identity, before and after the trace (guarded: capture/held.py)
    held: list = field(default_factory=list)
    # what each place of ``kept`` held when the trace began (the tensor it rebinds, if any)
    kept_before: list = field(default_factory=list)
    # the storages of the arguments that are (views of) tensors the function reads as state
    arg_state: set = field(default_factory=set)
    # the storages of the parameters and buffers the function can read or step (its
    # modules' and optimisers'), whether or not the traced call did: an argument that is
    # one of them at a later call is guarded as state (a step that skipped a parameter
    # with no gradient would not see it get one through the argument)
    param_state: set = field(default_factory=set)
    # what the shape rules decided by the traced sizes (``shapes.SizeCases``: expressions
    # each at least 0), which the sizes of a call must keep for the graph to run it
    size_facts: set = field(default_factory=set)


class Tracer:
    """The trace mode: each op call becomes a node of ``graph``."""

    def __init__(self, names: dict | None = None):
        self.graph = Graph()
        # Which trace made a tensor (dispatch stamps its outputs): a split call replaying
        # the call before hands out that call's Values again (capture/replay.py), so a
        # tensor kept from it holds a Value of this graph that is not this call's.
        self.trace_id = next(_TRACE_IDS)
        self.bindings: list[Binding] = []
        self._bound: dict[int, Binding] = {}        # id(tensor) -> binding (args, captured)
        self._grad_bound: dict[int, Binding] = {}   # id(leaf) -> binding of leaf.grad
        self.names = names or {}                     # id(tensor) -> readable input name
        self._mutated: dict[int, Binding] = {}
        self._refreshed: dict[int, tuple] = {}   # stale views given new values (restored)
        self._grad_written: dict[int, Tensor] = {}
        self._arrays: dict[int, Tensor] = {}        # id(array) -> its tensor (array_tensor)
        # id(tensor) -> (tensor, stand-in): the strides a traced tensor has eagerly after
        # an in-place view op (``h.t_()``), which its Value (row-major) does not carry
        self.layouts: dict[int, tuple] = {}
        self.backward_site = None   # while autograd traces a VJP: the forward op's site
        self.recomputing = False    # while a checkpointed region is traced again (backward)
        self.custom_functions: list = []   # custom autograd functions applied (autograd/function.py)
        self.tensor_hooks: list = []       # (Value, hooks) of hooked tensors (tensor.py)
        self.program = None         # the dg.static.Program this tracer builds, if any
        self.numbers = False        # whether Python numbers are traced (capture/symbolic.py)
        self.number_uses: list = []   # (name, use, location): where one needed its value
        self.arg_numbers: list = []   # positions of the argument leaves traced as numbers
        self.size_cases = None   # the traced sizes of its symbolic dims (shapes.SizeCases)

    # -- the mode interface used by dispatch, autograd and in-place ops ------------------
    def run(self, op, args, attrs):
        if self.numbers:
            number = symbolic.in_attrs(attrs)
            if number is not None:
                number.needs_value(f"the attribute of {op.name}, a static value")
        inputs = [self.value_of(a) if isinstance(a, Tensor) else
                  self.value_of(self.array_tensor(a)) if type(a) is np.ndarray else a
                  for a in args]
        return self.add(op, inputs, attrs)

    def add(self, op, inputs: list, attrs: dict):
        """The node of ``op`` on ``inputs`` (Values and literals), at the user's line: its
        output Value (a tuple of them for an op with several)."""
        site = self.backward_site
        if site is not None:
            location = f"{format_site(site)} (vjp)"
        else:
            location = format_site(user_site()) + (" (recompute)" if self.recomputing else "")
        try:
            outs = self.graph.add_node(op, inputs, attrs, location=location)
        except (ShapeError, TypeError, IndexError, ValueError) as e:   # (as eager raises)
            raise op_error(op, inputs, attrs, e, location) from None
        return outs[0] if op.num_outputs == 1 else outs

    def lift(self, args) -> tuple:
        """``args`` with the traced Python numbers among them as tensors
        (capture/symbolic.py)."""
        return symbolic.lift(args)

    def value_of(self, t: Tensor) -> Value:
        if t._alias:   # p.data, p.detach(): p's storage, maybe updated since
            t = t._storage_owner(self._bound)
        elif t._view is not None and t._view_version != t._version[0]:
            refresh(t)   # a view whose base was written since: its view op again
        data = t._data
        if type(data) is Value:
            made_by = t._trace_id
            if data not in self.graph or (made_by and made_by != self.trace_id):
                raise StaleTensorError(format_site(user_site()))
            return data
        binding = self._bound.get(id(t))
        if binding is not None:
            return binding.value
        return self.bind(t, "captured").value

    def array_tensor(self, array: np.ndarray) -> Tensor:
        """The tensor for a user's NumPy array that the traced code hands an op (eager ops
        take arrays as tensors, sharing memory): a captured input, read from that array at
        every call as eager reads it, where a constant would keep the trace's values."""
        t = self._arrays.get(id(array))
        if t is None:
            t = self._arrays[id(array)] = Tensor._make(array)
        return t

    def bind(self, t: Tensor, kind: str, name: str | None = None, shape=None,
             index: int = -1) -> Binding:
        """Make eager tensor ``t`` a graph input; while tracing it holds the input Value.
        ``shape`` may replace dims with Syms (dynamic dims)."""
        array = t._data
        name = name or self.names.get(id(t)) or ("arg" if kind == "arg" else "captured")
        value = self.new_input(t, kind, name, array.shape if shape is None else shape,
                               array.dtype, index)
        binding = Binding(kind, t, value, array, t.grad, index,
                          (t.grad_fn, t._output_nr, t._accumulator), required=t.requires_grad)
        self.bindings.append(binding)
        self._bound[id(t)] = binding
        t._data, t._trace_id = value, self.trace_id
        MUTATIONS[0] += 1   # (and given back by ``_restore``: guards read it again)
        # Inside the graph an input is a leaf: gradients stop here (the compiled call is one
        # node on the outer tape, connected to the input's real history).
        t.grad_fn, t._accumulator = None, None
        return binding

    def new_input(self, t: Tensor, kind: str, name: str, shape, dtype, index: int = -1):
        """The graph input that tensor ``t`` (or its ``.grad``: ``kind`` "grad") feeds."""
        return self.graph.add_input(shape, dtype, name=name)

    def constant(self, array: np.ndarray) -> Value:
        """A tensor made inside the traced function (dg.zeros, dg.tensor, ...)."""
        return self.graph.add_constant(array)

    def note_mutation(self, target: Tensor) -> None:
        """Called before an in-place op replaces ``target``'s value while tracing."""
        binding = self._bound.get(id(target))
        if binding is None and type(target._data) is not Value:
            binding = self.bind(target, "captured")
        if binding is not None:
            self._mutated[id(target)] = binding

    def grad_value(self, leaf: Tensor) -> Value:
        """The Value of ``leaf.grad`` (an eager gradient read by accumulation)."""
        binding = self._grad_bound.get(id(leaf))
        if binding is None:
            grad = leaf.grad
            value = self.new_input(leaf, "grad", self.names.get(id(leaf), "leaf") + ".grad",
                                   grad._data.shape, grad._data.dtype)
            binding = Binding("grad", leaf, value, None)
            self.bindings.append(binding)
            self._grad_bound[id(leaf)] = binding
        return binding.value

    def note_refresh(self, view: Tensor) -> None:
        """Called before a stale view takes a new traced value (ops/views.py): remember
        what it held, to give back when the trace ends."""
        if id(view) not in self._refreshed:
            self._refreshed[id(view)] = (view, view._data, view._trace_id,
                                         view.requires_grad, view.grad_fn, view._output_nr,
                                         view._view_version)

    def note_grad(self, leaf: Tensor) -> None:
        """Called when backward sets ``leaf.grad`` to a traced value. A bound tensor with
        autograd history outside the function (an argument ``h = net(x)`` or a view
        ``a[1]``) is a leaf only inside the graph: eagerly the backward goes on into that
        history, before anything after it in the function runs."""
        binding = self._bound.get(id(leaf))
        if binding is not None and binding.history and binding.history[0] is not None:
            raise CaptureError(
                f"a backward inside the function through {binding.value.name}, a tensor "
                "with autograd history outside it", format_site(user_site()),
                "Return the loss and call backward() outside the compiled function, or pass "
                "a leaf (x.detach().requires_grad_()).")
        self._grad_written[id(leaf)] = leaf

    def history_of(self, t: Tensor) -> str | None:
        """The name of the tensor argument whose storage ``t`` is (``t`` itself or a
        view), or None: an in-place write that gives it history can't be written back."""
        binding = self._bound.get(id(t._storage_owner(self._bound)))
        return binding.value.name if binding is not None and binding.kind == "arg" else None

    # -- start and finish ----------------------------------------------------------------------
    def __enter__(self):
        push_tracer(self)
        return self

    def __exit__(self, *exc):
        pop_tracer()
        self._restore()
        return False

    def finish(self, result, created=()) -> Capture:
        """Turn the function's return value and the recorded side effects into outputs;
        ``created``: tensors the function made and kept (capture/escape.py), which become
        real tensors holding their values after the call."""
        leaves, spec = flatten(result)
        self.result_leaves = leaves
        outputs, kinds, returned = [], [], {}
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, Tensor):
                if id(leaf) in self._bound:   # (``return x``, x a bound tensor, written or not)
                    returned[i] = self._bound[id(leaf)]
                outputs.append(self.value_of(leaf))
                kinds.append("value")
            else:
                kinds.append(("const", leaf))
        capture = Capture(self.graph, self.bindings, spec, kinds)
        capture.returned = returned
        capture.custom_functions = list(self.custom_functions)
        capture.tensor_hooks = list(self.tensor_hooks)
        if self.size_cases is not None:
            capture.size_facts = set(self.size_cases.facts)
        superseded = self._superseded_grads()
        for binding in self._mutated.values():
            if id(binding.tensor) in superseded:
                continue
            outputs.append(self.value_of(binding.tensor))
            capture.writebacks.append(("data", binding.tensor))
        for t in created:
            outputs.append(t._data)
            capture.writebacks.append(("new", t))
        for leaf in self._touched_leaves():
            grad = leaf.grad
            if grad is None:
                capture.grads_cleared.append(leaf)
            elif type(grad._data) is Value:
                outputs.append(grad._data)
                capture.writebacks.append(("grad", leaf))
        self.graph.set_outputs(outputs)
        return capture

    def _superseded_grads(self) -> set:
        """Ids of gradient tensors written in place (``zero_grad(set_to_none=False)``'s
        ``zero_()``) whose leaf's gradient the call then sets again: the gradient's
        writeback copies the final value into the same tensor after the call, so the
        earlier value need not be an output (nor computed)."""
        return {id(b.grad) for b in self.bindings
                if b.kind != "grad" and b.grad is not None and b.tensor.grad is not b.grad
                and b.tensor.grad is not None and type(b.tensor.grad._data) is Value}

    def _touched_leaves(self):
        seen = {}
        for b in self.bindings:
            if b.kind != "grad" and (b.tensor.grad is not b.grad):
                seen[id(b.tensor)] = b.tensor
        seen.update(self._grad_written)
        return list(seen.values())

    def _restore(self):
        """Give every bound tensor back its storage and gradient from before the trace."""
        MUTATIONS[0] += 1
        for view, *before in reversed(self._refreshed.values()):
            (view._data, view._trace_id, view.requires_grad, view.grad_fn, view._output_nr,
             view._view_version) = before
        for b in self.bindings:
            if b.kind == "grad":
                continue
            b.tensor._data = b.array
            b.tensor.grad = b.grad
            b.tensor.grad_fn, b.tensor._output_nr, b.tensor._accumulator = b.history
        for leaf in self._grad_written.values():
            if id(leaf) not in self._bound:
                leaf.grad = None
