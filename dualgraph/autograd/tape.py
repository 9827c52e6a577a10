"""The autograd tape: grad mode, backward nodes and leaf accumulators.

Dispatch records one :class:`Node` for every op whose inputs require grad; the node is the
``grad_fn`` of the op's outputs. A node keeps the op, its inputs, stand-ins of its outputs
without their history where the VJP reads them (dispatch._shells: holding the outputs
would make a reference cycle per op), the version of each saved tensor at record time (so
a later in-place change is caught instead of silently giving a wrong gradient), and
``next``: for each input, the node its gradient flows to (another Node, a leaf's
:class:`AccumulateGrad`, or None).

The tape is made of Python objects, and the cyclic garbage collector walks every one of them
that is alive when it runs, as a recorded forward pass grows: so a node keeps its edges
compact (:func:`edge_of`) and no empty containers.
"""
from __future__ import annotations

import contextlib
import itertools
import threading

from .._helpers import format_site, short_location
from ..errors import CaptureError


class _GradMode(threading.local):
    enabled = True
    anomaly = False
    in_backward = False   # the engine is running VJPs (forward NaN checks stay quiet)
    partial = False       # ... for some gradients only (grad(), backward(inputs=...))
    saved_hooks = ()      # (pack, unpack) pairs of saved_tensors_hooks blocks, innermost last
    saved_hooks_off = None   # disable_saved_tensors_hooks' message while one is active


grad_mode = _GradMode()

# How many ``with`` blocks, in all threads together, are now setting each flag away from its
# default (``enabled`` off, ``anomaly`` on). Reading a thread-local flag costs several times
# a plain lookup, and dispatch asks for two at every op: where a count is 0 every thread has
# the default, so the op skips the thread-local read (an exact shortcut, never a guess).
departures = {"enabled": 0, "anomaly": 0, "saved_hooks": 0}
_departures_lock = threading.Lock()   # (threads enter and leave blocks at once)


def is_grad_enabled() -> bool:
    return grad_mode.enabled


class _SetFlag(contextlib.ContextDecorator):
    """Set one ``grad_mode`` flag inside a ``with`` block or a decorated function, and
    restore it after (nesting and re-entry included)."""

    flag = ""

    def __init__(self, value: bool):
        self.value = value
        self.prev = []
        self.departs = value != getattr(_GradMode, self.flag)

    def __enter__(self):
        self.prev.append(getattr(grad_mode, self.flag))
        setattr(grad_mode, self.flag, self.value)
        if self.departs:
            with _departures_lock:
                departures[self.flag] += 1

    def __exit__(self, *exc):
        setattr(grad_mode, self.flag, self.prev.pop())
        if self.departs:
            with _departures_lock:
                departures[self.flag] -= 1
        return False


class set_grad_enabled(_SetFlag):
    """Turns recording on or off, like torch's: at once, as a plain call
    (``torch.set_grad_enabled(False)`` at the top of an inference script), and then a
    ``with`` block or a decorated function restores the mode from before the call. (Its
    subclasses ``no_grad`` and ``inference_mode`` set nothing until entered.)"""

    flag = "enabled"

    def __init__(self, mode: bool):
        super().__init__(bool(mode))
        if type(self) is set_grad_enabled:
            self.before = grad_mode.enabled
            grad_mode.enabled = self.value
            if self.departs:   # (a plain call's mode lasts: the count keeps ops reading it)
                with _departures_lock:
                    departures["enabled"] += 1

    def _take_back_the_call(self):
        """A ``with`` block or a decoration follows the call: it owns the mode now."""
        before = self.__dict__.pop("before", None)
        if before is not None:
            grad_mode.enabled = before
            if self.departs:
                with _departures_lock:
                    departures["enabled"] -= 1

    def __enter__(self):
        self._take_back_the_call()
        super().__enter__()

    def __call__(self, fn):
        self._take_back_the_call()
        return super().__call__(fn)


class no_grad(set_grad_enabled):
    """Ops inside record no gradient history: ``with dg.no_grad(): ...`` or as a decorator."""

    def __init__(self):
        super().__init__(False)


class inference_mode(set_grad_enabled):
    """As ``torch.inference_mode``: no gradient history inside, here exactly ``no_grad``
    (dualgraph has no separate inference tensors). A context manager and a decorator, with
    or without the call: ``@dg.inference_mode()``, ``@dg.inference_mode``."""

    def __new__(cls, mode=True):
        if callable(mode):   # bare @inference_mode on a function
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        super().__init__(not mode)


class enable_grad(set_grad_enabled):
    """Turn recording back on inside a ``no_grad`` block."""

    def __init__(self):
        super().__init__(True)


class detect_anomaly(_SetFlag):
    """Record where each op was called and raise at the first NaN, naming the op and line.

    Forward: an op that turns NaN-free inputs into a NaN output raises at once. Backward: a
    VJP that returns NaN raises, naming the forward op and the user line that called it.
    """

    flag = "anomaly"

    def __init__(self, check_nan: bool = True):
        super().__init__(check_nan)


class set_detect_anomaly:
    """``torch.autograd.set_detect_anomaly(mode, check_nan=True)``: anomaly mode
    (:class:`detect_anomaly`) on or off from the call itself, for the calling thread; used
    as a ``with`` block, it is put back as it was at the block's end. (A plain call that
    turns it on keeps ``departures`` counted for good: the per-op shortcut then reads the
    thread's flag, which is always right.)"""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.prev = grad_mode.anomaly
        self.counted = bool(mode) and check_nan
        if self.counted:
            with _departures_lock:
                departures["anomaly"] += 1
        grad_mode.anomaly = self.counted

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        grad_mode.anomaly = self.prev
        if self.counted:
            with _departures_lock:
                departures["anomaly"] -= 1
        return False


# Creation order of nodes. A node's gradient is complete once every node created after it
# has run (consumers are always created after their producers), so the engine runs nodes
# in decreasing sequence number, as PyTorch does.
_sequence = itertools.count()


def edge_of(t) -> object:
    """Where the gradient of tensor ``t`` (which requires grad) goes, in the compact form a
    node's ``_next`` keeps: the producing node itself for its output 0 (nearly every edge:
    no pair to allocate and for the garbage collector to walk), ``(node, output index)``
    for another output, a leaf's :class:`AccumulateGrad`."""
    fn = t.grad_fn
    return t._accumulate_node() if fn is None else fn if not t._output_nr else (fn, t._output_nr)


class Node:
    """A recorded op: the ``grad_fn`` of its outputs. ``print(y.grad_fn)`` shows the call.

    ``next[i]`` is ``(node, output index)`` for input i's gradient, or None when input i
    needs none; it is fixed at record time, so later in-place ops on an input do not
    rewire this node. The node keeps them compact, in ``_next`` (:func:`edge_of`)."""

    # Dispatch makes one per recorded op: the rarely set ``hooks`` live on the class until
    # set (in the ``__dict__`` slot, which stays unallocated until then).
    __slots__ = ("op", "inputs", "outputs", "attrs", "_next", "versions", "site", "seq",
                 "__dict__", "__weakref__")
    hooks = None     # {output index: [hook, ...]} from register_hook on outputs
    packed = False   # some inputs are :class:`Packed` (saved_tensors_hooks; autograd/graph.py)

    def __init__(self, op, inputs, outputs, attrs, next_nodes, versions, site):
        """``next_nodes``: per input, its edge as :func:`edge_of` gives it, or None."""
        self.seq = next(_sequence)
        self.op = op
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs
        self._next = next_nodes
        self.versions = versions
        self.site = site      # (code, offset) of the user's call; see `location`

    @property
    def next(self) -> tuple:
        """Per input, ``(node, output index)`` of its gradient, or None."""
        return tuple(e if e is None or type(e) is tuple else (e, 0) for e in self._next)

    @property
    def freed(self) -> bool:
        """Whether the engine dropped its saved tensors (a backward without
        ``retain_graph``): it has no inputs then."""
        return self.inputs is None

    @property
    def location(self) -> str:
        """``file:line`` of the user code that called the op."""
        return format_site(self.site)

    def name(self) -> str:
        return "".join(p.capitalize() for p in self.op.name.split("_")) + "Backward"

    @property
    def next_functions(self):
        """Like torch: ((node, output index), ...) per input; leaves give AccumulateGrad."""
        return tuple(edge if edge is not None else (None, 0) for edge in self.next)

    def __repr__(self):
        if self.freed:
            args = "<freed>"
        else:
            args = ", ".join(_describe(x) for x in self.inputs)
            if self.attrs:
                args += ", " + ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        where = f" at {short_location(self.location)}" if self.site else ""
        return f"<{self.name()}: {self.op.name}({args}){where}>"


def _describe(x) -> str:
    shape = getattr(x, "shape", None)
    if shape is None:
        return repr(x)
    dt = x._data.dtype
    short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
             "int32": "i32", "int64": "i64", "bool": "bool"}.get(dt.name, dt.name)
    return f"{short}[{','.join(map(str, shape))}]"


class Packed:
    """A saved input as a ``saved_tensors_hooks`` pack hook returned it, with the unpack
    hook that gives the tensor back when the VJP runs (autograd/graph.py), and whether the
    input required grad (the VJP asks the tensor it gets)."""

    __slots__ = ("value", "unpack", "requires_grad")

    def __init__(self, value, unpack, requires_grad):
        self.value, self.unpack, self.requires_grad = value, unpack, requires_grad


def pack_saved(node: Node, saved, tracer) -> None:
    """Hand the tensors ``node``'s VJP reads (inputs ``saved``, None: all) to the innermost
    active pack hook, and keep what it returns in their place (torch's saved tensor hooks:
    the node holds the packed objects, and unpacks them when its VJP runs). While
    ``tracer`` builds a graph, user hooks are a graph break: they would run once, at the
    trace, not at each call."""
    hooks = grad_mode.saved_hooks[-1]
    if hooks is None:   # (save_on_cpu's: an identity on the CPU)
        return
    pack, unpack = hooks
    if getattr(tracer, "graph", None) is not None:   # (a block entered eagerly
        raise CaptureError(                          # around a compiled call)
            f"{node.op.name} recorded inside saved_tensors_hooks", node.location,
            "Its pack and unpack hooks run Python for each saved tensor: the call runs "
            "eagerly (a graph break). Call the compiled function outside the block.")
    inputs = list(node.inputs)
    active, grad_mode.saved_hooks = grad_mode.saved_hooks, ()   # (the hook's own ops
    try:                                                         # save as they are)
        for i, a in enumerate(inputs):
            if hasattr(a, "_data") and (saved is None or i in saved):
                inputs[i] = Packed(pack(a), unpack, a.requires_grad)
                node.packed = True
    finally:
        grad_mode.saved_hooks = active
    node.inputs = tuple(inputs)


def unpacked_inputs(node: Node) -> tuple:
    """``node``'s inputs with each :class:`Packed` one given back by its unpack hook (at
    every backward through the node, as torch calls it)."""
    if grad_mode.enabled:
        raise NotImplementedError(
            f"a backward with create_graph=True through {node.op.name} (called at "
            f"{node.location}), whose saved tensors went through saved_tensors_hooks: the "
            "unpacked tensors have no history to differentiate again. Leave that forward "
            "outside the hooks' block")
    out = []
    for a in node.inputs:
        if type(a) is Packed:
            t = a.unpack(a.value)
            if not hasattr(t, "_data"):
                raise TypeError(f"the unpack hook of saved_tensors_hooks returned "
                                f"{type(t).__name__}, not a tensor (for the gradient of "
                                f"{node.op.name}, called at {node.location})")
            if t.requires_grad != a.requires_grad:   # (a pack hook's detached copy: the
                t = t.detach()                       # VJP reads the flag, as torch's
                t.requires_grad = a.requires_grad    # unpacking restores it)
            a = t
        out.append(a)
    return tuple(out)


class AccumulateGrad:
    """The end of a gradient path at a leaf tensor: adds the gradient into ``leaf.grad``."""

    __slots__ = ("leaf", "seq", "hooks", "__weakref__")

    def __init__(self, leaf):
        self.seq = next(_sequence)
        self.leaf = leaf
        self.hooks = None

    def __repr__(self):
        return f"<AccumulateGrad: leaf {_describe(self.leaf)}>"
