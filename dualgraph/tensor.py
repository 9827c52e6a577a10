"""Tensor: an array (eager) or a symbolic graph value (while tracing), plus autograd state.

``_data`` is a NumPy array in eager mode and a graph ``Value`` while tracing; both have
``.shape``, ``.dtype`` and ``.ndim``, so nothing here asks which mode it is in. Only the
dispatcher runs ops. The op methods (``x + y``, ``x.sum()``, ...) are attached by
``dualgraph.ops`` because ops are defined above this layer; see ``ops/methods.py``.
"""
from __future__ import annotations

import sys
import weakref

import numpy as np

from . import devices, dtypes
from ._helpers import user_location
from .autograd.tape import AccumulateGrad
from .errors import CONCRETE_FIX, CaptureError


concretize_hook = None   # set by dg.jit.inspect while it runs
_modes = None   # dispatch's modes: dispatch sets it when it is imported (it imports this module)


def _is_traced_state(t) -> bool:
    """Whether eager tensor ``t`` is state of the function a graph is being traced for (a
    parameter, buffer or tensor its scope reaches: the tracer's names)."""
    tracer = _modes.tracer
    return tracer is not None and _modes.building_graph() and id(t) in tracer.names


# Counts every change of an existing tensor that a compiled call's guards read it for: an
# in-place write (its version counter moved, :func:`bump`) and a new array or version
# counter given to a tensor (``p.data = t``, ``module.to()``, a trace's swaps, a compiled
# call's writebacks). A guard that finds the count where it was at its last full check
# need not read its tensors again (capture/fastpath.py). Tensors made fresh (an op's
# output) are not counted: no graph holds them yet. tests/test_freezing.py checks that every
# function of dualgraph that writes ``_data`` or ``_version`` counts it or makes the tensor.
MUTATIONS = [0]


def bump(t) -> None:
    """Count an in-place write of ``t``'s storage: its version counter (shared with its
    views, as torch's) and :data:`MUTATIONS`."""
    t._version[0] += 1
    MUTATIONS[0] += 1


# how tensors print (dg.set_printoptions changes them; torch's defaults)
print_options = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80}


class Tensor:
    # Autograd state defaults live on the class, so making a tensor sets only the two
    # attributes every tensor needs: dispatch creates one per op, and this is its hot path.
    requires_grad = False
    grad = None
    grad_fn = None
    _output_nr = 0          # which output of grad_fn this tensor is
    _base = None            # the tensor this one is a view of
    _alias = False          # a view of all of _base as it is (.data, .detach())
    _view = None            # (view op, attrs) that made it from _base (ops/views.py)
    _view_version = 0       # the storage's version its value and history are of
    _hooks = None           # gradient hooks of a leaf
    _post_accumulate_hooks = None   # hooks called after backward accumulated into .grad
    _retains_grad = False
    _returned_by = None     # the custom Function that returned this input as it is
    _accumulator = None     # the leaf's AccumulateGrad node, made on first use: a weak
    #                         reference to its own (see _accumulate_node), or a foreign one
    _trace_id = 0           # the trace whose Value it holds, when made by one (capture/)

    def __init__(self, *data, dtype=None, requires_grad: bool = False):
        """``dg.Tensor(...)``, torch's legacy constructor; prefer ``dg.tensor(data)``.
        Given sizes (``dg.Tensor(2, 3)``, ``dg.Tensor(dg.Size([2, 3]))``) it makes a tensor
        of that shape (zeros, where torch leaves memory uninitialised); given data (a list,
        an array, a number) it makes a tensor of the default float dtype whatever the
        data's, as ``torch.Tensor([1, 2])`` is float32; a tensor keeps its dtype."""
        if len(data) == 1 and isinstance(data[0], Size):
            data = tuple(data[0])
        if all(type(d) is int for d in data):   # sizes (none: an empty tensor)
            array = np.zeros(data or (0,), dtypes.to_np(dtype) if dtype is not None
                             else dtypes.default_float())
        elif len(data) == 1:
            if dtype is None and not isinstance(data[0], Tensor):
                dtype = dtypes.from_np(dtypes.default_float())
            array = as_array(data[0], dtype)
        else:
            raise TypeError(f"Tensor(): expected sizes (ints) or one data argument, got "
                            f"{tuple(type(d).__name__ for d in data)}")
        self._data = array
        self._version = [0]
        if requires_grad:
            check_can_require_grad(array.dtype)
            self.requires_grad = True

    # -- construction used by dispatch (no checks, no copies) --------------------------
    @classmethod
    def _make(cls, data, base=None):
        t = object.__new__(cls)
        t._data = data
        if base is None:
            t._version = [0]
        else:
            t._base = base
            t._version = base._version   # views share a version counter, as in torch
        return t

    # -- metadata -------------------------------------------------------------------------
    def _shaped(self):
        """The array (or traced Value) whose shape a metadata read gives. The traced
        function's state whose shape the user's code reads (``self.k.shape[1]``) becomes a
        graph input, whose shape is checked at every call: else the trace's sizes would be
        baked in unguarded, wrong once ``self.k.data`` is given another shape. (dualgraph's
        own reads, binding arguments say, leave it: an op that uses it binds it.)"""
        data = self._data
        if (_modes.tracer is not None and type(data) is np.ndarray and _is_traced_state(self)
                and not sys._getframe(2).f_globals.get("__name__", "").startswith("dualgraph")):
            return _modes.tracer.value_of(self)
        return data

    @property
    def shape(self):
        if _modes.tracer is None:   # (eager: the hot path)
            return Size(self._data.shape)
        return Size(self._shaped().shape)

    @property
    def dtype(self) -> dtypes.DType:
        return dtypes.from_np(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim if _modes.tracer is None else self._shaped().ndim

    def dim(self) -> int:
        return self._shaped().ndim

    def size(self, dim=None):
        shape = self._data.shape if _modes.tracer is None else self._shaped().shape
        return Size(shape) if dim is None else shape[dim]

    def numel(self) -> int:
        data = self._data if _modes.tracer is None else self._shaped()
        if type(data) is np.ndarray:   # (its size: np.prod of the shape takes microseconds)
            return data.size
        return int(np.prod(data.shape, dtype=np.int64))

    nelement = numel
    ndimension = dim

    def element_size(self) -> int:
        return self._data.dtype.itemsize

    @property
    def device(self) -> devices.device:
        """Where the tensor lives: always ``dg.device("cpu")``."""
        return devices.CPU

    is_cuda = False
    is_cpu = True
    is_meta = False

    def get_device(self) -> int:
        """-1, torch's answer for a CPU tensor."""
        return -1

    def cpu(self):
        """This tensor (it is on the CPU already), as torch returns it."""
        return self

    def cuda(self, device=None, non_blocking: bool = False):
        """Raises ``ValueError``: dualgraph has no CUDA device."""
        devices.check("cuda")

    def pin_memory(self, device=None):
        """This tensor: there is no device to pin memory for (as ``DataLoader(pin_memory=)``
        is accepted and ignored)."""
        return self

    def stride(self, dim=None):
        """Elements to step in storage per index of each dim, as torch's (a broadcast dim
        has stride 0). A traced tensor reports the strides of a contiguous array."""
        data = self._data
        if type(data) is np.ndarray:
            strides = tuple(s // data.itemsize for s in data.strides)
        else:
            strides, step = (), 1
            for d in reversed(tuple(data.shape)):
                strides, step = (step,) + strides, step * d
        return strides if dim is None else strides[dim]

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"`` formats a 0-d tensor's value, as torch does; other tensors
        take only the empty spec (their ``str``)."""
        if self._data.ndim == 0:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f" or self._data.dtype == dtypes.bfloat16_np

    @property
    def data(self):
        """The same storage without history (as torch's ``.data``); ``p.data = t`` is set
        in ``ops/inplace.py``."""
        t = Tensor._make(self._data, base=self)
        t._alias = True
        return t

    def _storage_owner(self, bound=()):
        """The tensor whose storage this one shares (through ``.data`` / ``.detach()``,
        which share the version counter too), or itself: a trace writes an in-place update
        of ``p.data`` to ``p`` and reads the alias as ``p``'s current value. The search
        stops at a tensor whose id is in ``bound`` (a traced function's argument
        ``h.detach()`` is an input itself)."""
        t = self
        while t._alias and id(t) not in bound and t._base._version is t._version:
            t = t._base
        return t

    @property
    def _version_value(self) -> int:
        return self._version[0]

    # -- conversion to Python / NumPy -------------------------------------------------------
    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise RuntimeError(
                "can't call numpy() on a tensor that requires grad; "
                "use tensor.detach().numpy()")
        return self._concrete("numpy()")

    def _concrete(self, what: str) -> np.ndarray:
        """The NumPy array; a traced tensor has none, which is a CaptureError naming the
        user's line (compile turns it into a graph break unless fullgraph=True)."""
        data = self._data
        if type(data) is not np.ndarray:
            if concretize_hook is not None:   # dg.jit.inspect: note the hazard, go on
                return concretize_hook(self, what)
            raise CaptureError(f"{what} on a traced tensor", user_location(), CONCRETE_FIX)
        return data

    def _python_value(self, what: str) -> np.ndarray:
        """``_concrete`` for a value Python goes on with (``item()``, ``tolist()``,
        ``bool()``). Reading the traced function's state so (``int(self.queue_ptr)``) while
        its graph is traced is a graph break too, as TorchDynamo's: its value would be baked
        into the graph unguarded, wrong once the state changes."""
        data = self._data
        if type(data) is not np.ndarray:
            return self._concrete(what)
        if _modes.tracer is not None and _is_traced_state(self):
            if concretize_hook is not None:   # (a split trace's break)
                return concretize_hook(self, what)
            raise CaptureError(f"{what} of the traced function's state", user_location(),
                               CONCRETE_FIX)
        return data

    def item(self):
        data = self._python_value("item()")
        if data.size != 1:
            raise ValueError(
                f"item() needs a tensor with one element, this one has shape "
                f"{tuple(data.shape)}; index it first or reduce it (e.g. .sum())")
        return data.reshape(()).item()

    def tolist(self):
        return self._python_value("tolist()").tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._data.dtype.kind not in "iu":
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __bool__(self):
        data = self._python_value("bool()")
        if data.size != 1:
            raise RuntimeError(
                f"the truth value of a tensor of shape {tuple(data.shape)} is ambiguous; "
                "use .any() or .all()")
        return bool(data.reshape(()))

    def __len__(self):
        data = self._shaped()
        if not data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return data.shape[0]

    def __iter__(self):
        if not self._data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    # NumPy's scalars and arrays defer their arithmetic with a tensor to the tensor's
    # reflected operators (as torch's tensors ask): ``np.log(2) - x`` is a tensor, with
    # x's gradient, not an array of x's values without it
    __array_priority__ = 1000

    def __array__(self, dtype=None, copy=None):
        data = self.detach().numpy()
        return data if dtype is None else data.astype(dtype)

    __hash__ = object.__hash__

    def __str__(self):
        data = self._data
        if type(data) is not np.ndarray:   # print(x) inside a captured function
            data = self._concrete("print()/str()")   # (a graph break: its value, split)
        return self._show(data)

    def __repr__(self):
        data = self._data
        if type(data) is not np.ndarray:
            return f"tensor(<traced {data}>)"
        return self._show(data)

    def _show(self, data: np.ndarray) -> str:
        """``tensor([...], dtype=..., grad_fn=...)`` with ``data`` as the values."""
        shown = data.astype(np.float32) if data.dtype == dtypes.bfloat16_np else data
        # As torch: whole numbers print as "1.", anything else with 4 fixed decimals.
        fixed = shown.dtype.kind == "f" and not np.all(np.mod(shown[np.isfinite(shown)], 1) == 0)
        opts = print_options
        body = np.array2string(shown, separator=", ", prefix="tensor(",
                               threshold=opts["threshold"], edgeitems=opts["edgeitems"],
                               max_line_width=opts["linewidth"], precision=opts["precision"],
                               floatmode="fixed" if fixed else "maxprec")
        extras = []
        if data.dtype != dtypes.default_float() and data.dtype not in (np.int64, np.bool_):
            extras.append(f"dtype={self.dtype!r}")
        if data.size == 0:
            extras.append(f"size={tuple(data.shape)}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + ", ".join([body] + extras) + ")"

    # -- autograd state ---------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True):
        if not requires_grad and self.grad_fn is not None:
            raise RuntimeError(
                "you can only change requires_grad of leaf tensors; use .detach() to get a "
                "tensor without history")
        if requires_grad:
            check_can_require_grad(self._data.dtype)
        self.requires_grad = requires_grad
        return self

    def detach(self):
        """A tensor that shares storage but has no history (changes are seen by both)."""
        t = Tensor._make(self._data, base=self)
        t._alias = True
        return t

    def detach_(self):
        self.grad_fn = None
        self.requires_grad = False
        return self

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a non-None return
        replaces the gradient. Returns a handle with ``.remove()``."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require grad")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = []
            hooks = self._hooks
        else:
            if self.grad_fn.hooks is None:
                self.grad_fn.hooks = {}
            hooks = self.grad_fn.hooks.setdefault(self._output_nr, [])
            if type(self._data) is not np.ndarray and not hooks:   # (traced: kept for replay)
                tracer = _modes.tracer
                if tracer is not None and hasattr(tracer, "tensor_hooks"):
                    tracer.tensor_hooks.append((self._data, hooks))
        hooks.append(hook)
        return _HookHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` each time backward has accumulated a gradient into this
        leaf's ``.grad`` (as torch's; data parallelism starts communication there).
        Returns a handle with ``.remove()``.

        >>> w = dg.ones(2, requires_grad=True)
        >>> h = w.register_post_accumulate_grad_hook(lambda p: print(p.grad))
        """
        if not self.requires_grad or self.grad_fn is not None:
            raise RuntimeError("post-accumulate-grad hooks can only be registered on leaf "
                               "tensors that require grad")
        if self._post_accumulate_hooks is None:
            self._post_accumulate_hooks = []
        self._post_accumulate_hooks.append(hook)
        return _HookHandle(self._post_accumulate_hooks, hook)

    def retain_grad(self):
        """Keep ``.grad`` for a non-leaf tensor after backward."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that doesn't require grad")
        if self.grad_fn is None or self._retains_grad:
            return
        if type(self._data) is not np.ndarray:   # (its hook would keep a traced gradient)
            raise CaptureError("retain_grad() on a traced tensor", user_location(),
                               "Call retain_grad() and read .grad outside the compiled "
                               "function (torch.compile does not keep it either).")
        self._retains_grad = True
        ref = self

        def store(grad):
            ref.grad = grad if ref.grad is None else ref.grad + grad
        self.register_hook(store)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def __getstate__(self):
        """What pickle and ``copy.deepcopy`` copy: all but the weak reference to this leaf's
        accumulator (it can't be pickled, and a copy sharing it would send its gradients
        to this leaf's ``.grad``: the copy makes its own)."""
        state = self.__dict__
        if type(state.get("_accumulator")) is weakref.ref:
            state = dict(state)
            del state["_accumulator"]
        return state

    def _accumulate_node(self) -> AccumulateGrad:
        """The leaf's AccumulateGrad. Its own is held weakly, as torch holds it: the nodes
        that lead to it keep it alive, and a leaf no graph reaches any more gets a new one,
        so leaf -> accumulator -> leaf is no reference cycle (which left a dropped model's
        parameters to a full collection). An alias that stands for another leaf (a
        view's root, a traced input) holds that leaf's accumulator strongly."""
        acc = self._accumulator
        if acc is not None:
            if type(acc) is AccumulateGrad:
                return acc
            acc = acc()
            if acc is not None:
                return acc
        acc = AccumulateGrad(self)
        self._accumulator = weakref.ref(acc)
        return acc


class Size(tuple):
    """A shape, printed as torch prints it: ``dualgraph.Size([2, 3])``."""

    def __repr__(self):
        return f"dualgraph.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


class _HookHandle:
    def __init__(self, hooks, hook):
        self.hooks, self.hook = hooks, hook

    def remove(self):
        if self.hook in self.hooks:
            self.hooks.remove(self.hook)


def check_can_require_grad(np_dtype):
    if not (np_dtype.kind == "f" or np_dtype == dtypes.bfloat16_np):
        raise RuntimeError(
            f"only floating point tensors can require gradients, this one is "
            f"{dtypes.from_np(np_dtype)!r}; convert it first with .float()")


def as_array(data, dtype=None) -> np.ndarray:
    """Python data, a NumPy array or a Tensor -> a NumPy array with PyTorch's dtype defaults
    (Python floats -> the default float dtype, ints -> int64, bools -> bool)."""
    target = None if dtype is None else dtypes.to_np(dtype)
    if isinstance(data, Tensor):
        traced = type(data._data) is not np.ndarray
        array = data._concrete("tensor()")
        if traced and not array.flags.writeable:   # (a graph break's value, e.g. of empty():
            array = array.copy()                   # no storage to share, Parameter writes it)
    elif isinstance(data, (np.ndarray, np.generic)):
        array = np.asarray(data)
        if target is None and array.dtype not in dtypes._BY_NP:
            if array.dtype.kind == "f":
                target = np.dtype(np.float64) if array.itemsize == 8 else np.dtype(np.float32)
            elif array.dtype.kind in "iu":
                target = np.dtype(np.int64)
            else:
                raise TypeError(f"unsupported NumPy dtype {array.dtype}")
    else:
        # (a Tensor inside nested lists converts through its __array__, whose errors, a
        # traced tensor's CaptureError included, propagate: no Python walk over the lists)
        array = np.asarray(data)
        if target is None:
            if array.dtype.kind == "f":
                target = dtypes.default_float()
            elif array.dtype.kind in "iu":
                target = np.dtype(np.int64)
            elif array.dtype.kind == "b":
                target = np.dtype(np.bool_)
            else:
                raise TypeError(
                    f"can't make a tensor from {type(data).__name__} "
                    f"(NumPy made an array of dtype {array.dtype})")
    if target is not None and array.dtype != target:
        array = array.astype(target)
    return array


