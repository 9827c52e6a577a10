"""Creation functions: ``tensor``, ``zeros``, ``arange``, ``randn``, ... as in torch."""
from __future__ import annotations

import numpy as np

from .. import devices, dtypes
from ..dispatch import apply, modes
from ..dtypes import cast
from ..shapes import ShapedType, Sym
from ..tensor import Tensor, as_array, check_can_require_grad
from .opdef import defop, get
from .random import (RANDOM, RANDOM_BINOMIAL, RANDOM_INTEGERS,  # noqa: F401
                     RANDOM_PERMUTATION, RANDOM_POISSON, Generator, default_generator, draw,
                     manual_seed, rng_of)

__all__ = ["tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "full", "eye",
           "arange", "linspace", "logspace", "tril_indices", "triu_indices", "full_like", "zeros_like", "ones_like", "empty_like", "rand",
           "randn", "randint", "randperm", "multinomial", "rand_like", "randn_like", "clone",
           "bernoulli", "poisson", "binomial", "normal",
           "Generator",
           "manual_seed", "default_generator", "state", "state_like"]


def _finish(array: np.ndarray, requires_grad: bool, device=None) -> Tensor:
    """The new tensor; made while tracing, it is a constant of the graph. ``device``, as
    every creation function's, must name the CPU."""
    devices.check(device)
    tracer = modes.tracer
    if tracer is None:
        t = Tensor._make(array)
    else:
        t = Tensor._make(tracer.constant(array))
        t._trace_id = tracer.trace_id
    if requires_grad:
        check_can_require_grad(array.dtype)
        t.requires_grad = True
    return t


def _dims(dims: tuple, size) -> tuple:
    """A creation function's dims given as ``zeros(2, 3)``, ``zeros((2, 3))`` or, as torch
    also takes them, ``zeros(size=(2, 3))``."""
    if size is None:
        return dims
    if dims:
        raise TypeError(f"the dims are given twice: {dims} and size={size!r}; give one")
    return (size,)


def _size(size) -> tuple:
    """The dims of a creation function's ``size``: ints, or Syms while tracing with dynamic
    dims (``x.shape[0]`` of a dynamic batch)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(s if isinstance(s, Sym) else int(s) for s in size)


def _filled(size, fill_value, dtype, requires_grad, device) -> Tensor:
    """``size`` filled with ``fill_value``: a constant of a traced graph, or, where a dim or
    the value is symbolic (``full((n,), x.size(0))``), a ``full`` node whose shape and value
    the graph computes from its inputs' shapes when it runs (ONNX: ConstantOfShape of the
    dims read with Shape)."""
    shape = _size(size)
    if not any(isinstance(d, Sym) for d in (*shape, fill_value)):
        array = (np.zeros(shape, dtype) if fill_value == 0 else    # (calloc: no fill pass)
                 np.full(shape, cast(fill_value, dtype), dtype))
        return _finish(array, requires_grad, device)
    devices.check(device)
    out = apply(FULL, shape=shape, fill_value=fill_value, dtype=np.dtype(dtype))
    if requires_grad:
        out.requires_grad_()
    return out


def _onnx_full(e, node):
    fill, dtype = node.attrs["fill_value"], node.attrs["dtype"]
    if isinstance(fill, Sym):   # (a size read from an input's shape, broadcast)
        return [e.op("Expand", [e.cast(e.shape([fill]), dtype), e.shape(node.attrs["shape"])])]
    value = np.asarray([fill], dtype=dtype)
    return [e.op("ConstantOfShape", [e.shape(node.attrs["shape"])],
                 value=e.onnx.numpy_helper.from_array(value))]


FULL = defop("full", lambda shape, fill_value, dtype: np.full(shape, cast(fill_value, dtype),
                                                             dtype),
             lambda shape, fill_value, dtype: ShapedType(tuple(shape), np.dtype(dtype)),
             attrs=("shape", "fill_value", "dtype"), onnx=_onnx_full)


def _float_dtype(dtype) -> np.dtype:
    return dtypes.default_float() if dtype is None else dtypes.to_np(dtype)


def tensor(data, dtype=None, device=None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, arrays, tensors)."""
    array = np.array(as_array(data, dtype), copy=True)
    return _finish(array, requires_grad, device)


def constant(array: np.ndarray) -> Tensor:
    """A tensor over ``array`` that an op's implementation makes for itself (an index grid,
    an identity matrix): eagerly the array itself; while tracing a constant of the graph,
    not an input read from this tensor object, which exists for one trace only."""
    return _finish(array, False)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    devices.check(device)
    if isinstance(data, Tensor) and (dtype is None or data.dtype == dtype):
        return data
    return Tensor._make(as_array(data, dtype))


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array`` (its dtype must be a supported one)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a NumPy array, got {type(array).__name__}")
    dtypes.from_np(array.dtype)
    return Tensor._make(array)


def zeros(*dims, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_dims(dims, size), 0, _float_dtype(dtype), requires_grad, device)


def ones(*dims, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_dims(dims, size), 1, _float_dtype(dtype), requires_grad, device)


def empty(*dims, size=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_dims(dims, size), 0, _float_dtype(dtype), requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    if dtype is None:
        dtype = dtypes.scalar_dtype(fill_value)
    return _filled((size,), fill_value, dtypes.to_np(dtype), requires_grad, device)


def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(np.eye(n, m, dtype=_float_dtype(dtype)), requires_grad, device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Values from ``start`` up to (not including) ``end``; int64 unless a bound is a float."""
    if end is None:
        start, end = 0, start
    if isinstance(end, Sym) and start == 0 and step == 1:
        return _arange_of_symbolic_length(end, dtype, requires_grad, device)
    if dtype is None:
        is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = dtypes.int64 if is_int else dtypes.get_default_dtype()
    dt = dtypes.to_np(dtype)
    n = int(np.ceil((end - start) / step))
    return _finish((start + step * np.arange(max(n, 0), dtype=np.float64)).astype(dt)
                   if dt.kind == "f" else np.arange(start, end, step, dtype=dt), requires_grad,
                   device)


def _arange_of_symbolic_length(end, dtype, requires_grad, device) -> Tensor:
    """``arange(end)`` of a traced length (``torch.arange(x.size(1))``, a causal mask's
    positions): a running count of ones less one, so the graph keeps its dims symbolic
    where an array of the traced length would make them static."""
    ones = _filled((end,), 1, np.dtype(np.int64), False, device)
    # (the op by its registered name: reduce.py builds on this module)
    out = apply(get("cumsum"), ones, dim=0, reverse=False) - 1
    out = out if dtype is None else out.to(dtype)
    return out.requires_grad_() if requires_grad else out


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(linspace_values(start, end, steps, _float_dtype(dtype)), requires_grad,
                   device)


def linspace_values(start, end, steps: int, dt: np.dtype) -> np.ndarray:
    """``torch.linspace``'s values in ``dt``. In float32, bit for bit torch's CPU kernel:
    the step ``(end - start) / (steps - 1)`` rounded to float32, the first half
    ``start + step * i`` and the second ``end - step * (steps - 1 - i)``, each one fused
    multiply-add (exact in float64, then rounded once). NumPy's values differ from those
    by an ulp at some points, which moves a grid coordinate across a pixel
    (``affine_grid``, then ``grid_sample``'s gradient at the pixel's edge) or a bin edge.
    Other dtypes: NumPy's float64 values, rounded."""
    if dt != np.float32 or steps < 2:
        return np.linspace(start, end, steps, dtype=np.float64).astype(dt)
    lo, hi = np.float32(start), np.float32(end)
    step = np.float64((hi - lo) / np.float32(steps - 1))
    i = np.arange(steps)
    return np.where(i < steps // 2, np.float64(lo) + step * i,
                    np.float64(hi) - step * (steps - 1 - i)).astype(np.float32)


def logspace(start, end, steps: int, base=10.0, dtype=None, device=None,
             requires_grad=False) -> Tensor:
    """``base ** linspace(start, end, steps)``, as ``torch.logspace``."""
    dt = _float_dtype(dtype)
    values = np.power(float(base), np.linspace(start, end, steps, dtype=np.float64))
    return _finish((np.floor(values + 0.5) if dt.kind in "iu" else values).astype(dt),
                   requires_grad, device)


def _trilu_indices(which, row, col, offset, dtype, device) -> Tensor:
    rows, cols = which(row, offset, col)
    dt = dtypes.int64.np if dtype is None else dtypes.to_np(dtype)
    return _finish(np.stack([rows, cols]).astype(dt).reshape(2, -1), False, device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None,
                 layout=None) -> Tensor:
    """The (2, N) row and column indices of the lower triangle of a ``row`` x ``col``
    matrix (the ``offset`` diagonal included), row by row, as ``torch.tril_indices``."""
    return _trilu_indices(np.tril_indices, row, col, offset, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None,
                 layout=None) -> Tensor:
    """The (2, N) indices of the upper triangle, as ``torch.triu_indices``."""
    return _trilu_indices(np.triu_indices, row, col, offset, dtype, device)


def _full_like_kernel(x, fill_value, dtype):
    return np.full(x.shape, cast(fill_value, dtype), dtype=dtype)   # (-1 in uint8: 255)


def _onnx_full_like(e, node):
    value = np.asarray([node.attrs["fill_value"]], dtype=node.attrs["dtype"])
    shape = e.op("Shape", [e.input(0)])
    return [e.op("ConstantOfShape", [shape], value=e.onnx.numpy_helper.from_array(value))]


FULL_LIKE = defop("full_like", _full_like_kernel,
                  lambda x, fill_value, dtype: ShapedType(tuple(x.shape), np.dtype(dtype)),
                  attrs=("fill_value", "dtype"),
                  onnx=_onnx_full_like,
                  shape_only=True)


def full_like(x, fill_value, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    """A tensor shaped like ``x`` filled with ``fill_value`` (traces with symbolic shapes);
    ``memory_format`` is checked and read as row-major (dtypes.MemoryFormat)."""
    devices.check(device)
    dtypes.check_memory_format(memory_format, "full_like")
    dt = x._data.dtype if dtype is None else dtypes.to_np(dtype)
    out = apply(FULL_LIKE, x, fill_value=fill_value, dtype=dt)
    if requires_grad:
        out.requires_grad_()
    return out


def zeros_like(x, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    return full_like(x, 0, dtype, device, requires_grad)


def ones_like(x, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    return full_like(x, 1, dtype, device, requires_grad)


def empty_like(x, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    return full_like(x, 0, dtype, device, requires_grad)


def rand(*dims, size=None, generator=None, dtype=None, device=None,
         requires_grad=False) -> Tensor:
    """Uniform samples in [0, 1)."""
    devices.check(device)
    return _random(_dims(dims, size), generator, dtype, requires_grad, "uniform")


def randn(*dims, size=None, generator=None, dtype=None, device=None,
          requires_grad=False) -> Tensor:
    """Standard normal samples."""
    devices.check(device)
    return _random(_dims(dims, size), generator, dtype, requires_grad, "normal")


def _random(size, generator, dtype, requires_grad, dist) -> Tensor:
    dt = _float_dtype(dtype)
    out = draw(RANDOM, generator, shape=_size(size), dtype=np.dtype(dt), dist=dist)
    if requires_grad:
        out.requires_grad_(True)
    return out


def randint(low, high=None, size=None, generator=None, dtype=None, device=None) -> Tensor:
    """Integers uniform in [low, high) (int64 by default); as torch, ``randint(high, size)``
    draws from [0, high).

    >>> randint(10, (3,)).shape
    dualgraph.Size([3])
    """
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    devices.check(device)
    dt = dtypes.int64.np if dtype is None else dtypes.to_np(dtype)
    return draw(RANDOM_INTEGERS, generator, shape=_size(((),) if size is None else (size,)),
                low=int(low), high=int(high), dtype=np.dtype(dt))


def randperm(n: int, generator=None, dtype=None, device=None) -> Tensor:
    devices.check(device)
    dt = dtypes.int64.np if dtype is None else dtypes.to_np(dtype)
    return draw(RANDOM_PERMUTATION, generator, n=int(n), dtype=np.dtype(dt))


def multinomial(input, num_samples: int, replacement: bool = False, *,
                generator=None) -> Tensor:
    """``num_samples`` category indices per row of ``input`` (1-d, or 2-d for a batch of
    distributions), drawn with probability proportional to its non-negative weights: int64
    of shape (num_samples,) or (rows, num_samples). Eager only (the draw is data).

    >>> multinomial(tensor([0.0, 1.0, 0.0]), 2, replacement=True)
    tensor([1, 1])
    """
    weights = _multinomial_weights(input, num_samples, replacement)
    rng = rng_of(generator)
    rows, k = weights.shape
    if replacement:
        # inverse CDF, one searchsorted for all rows: row r's CDF (ending in exactly 1.0)
        # is shifted by 2r so the rows stay sorted end to end
        cdf = np.cumsum(weights, axis=1)
        shift = 2.0 * np.arange(rows)[:, None]
        flat = (cdf / cdf[:, -1:] + shift).ravel()
        u = rng.random((rows, num_samples)) + shift
        out = np.searchsorted(flat, u.ravel(), side="right").reshape(rows, num_samples)
        out -= k * np.arange(rows)[:, None]
    else:
        # exponential races: the n smallest E/w (E ~ Exp(1)) are a draw without replacement
        # in proportion to w; zero weights get an infinite time and come last, as in torch
        with np.errstate(divide="ignore"):
            keys = rng.standard_exponential((rows, k)) / weights
        out = np.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    out = out.astype(np.int64)
    return Tensor._make(out if input.ndim == 2 else out[0])


def _multinomial_weights(input, num_samples, replacement) -> np.ndarray:
    """The weights as float64 rows, after torch's checks."""
    if not dtypes.from_np(input._data.dtype).is_floating_point:
        raise TypeError(f"multinomial expects floating-point weights, got {input.dtype!r}")
    if input.ndim not in (1, 2):
        raise ValueError(f"multinomial expects 1-d or 2-d weights, got shape "
                         f"{tuple(input.shape)}")
    weights = input._concrete("multinomial()").astype(np.float64).reshape(-1, input.shape[-1])
    if num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    if not replacement and num_samples > weights.shape[1]:
        raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement "
                         f"from {weights.shape[1]} categories")
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("multinomial: weights must be finite and non-negative")
    if (weights.sum(axis=1) <= 0).any():
        raise ValueError("multinomial: every row of weights needs a positive sum")
    return weights


def rand_like(x, generator=None, dtype=None, device=None, requires_grad=False,
              memory_format=None) -> Tensor:
    return rand(tuple(x.shape), generator=generator, dtype=dtype or x.dtype, device=device,
                  requires_grad=requires_grad)


def randn_like(x, generator=None, dtype=None, device=None, requires_grad=False,
               memory_format=None) -> Tensor:
    return randn(tuple(x.shape), generator=generator, dtype=dtype or x.dtype, device=device,
                  requires_grad=requires_grad)


def clone(x, *, memory_format=None) -> Tensor:
    """A copy with its own storage, row-major; gradients flow through it."""
    dtypes.check_memory_format(memory_format, "clone")
    return apply(CLONE, x)


# (row-major, so that a clone is contiguous: Tensor.contiguous() is a clone)
CLONE = defop("clone", lambda x: np.array(x, copy=True, order="C"),
              lambda x: ShapedType(tuple(x.shape), x.dtype),
              vjp=lambda g, out, x: g, saves="", elementwise="{0}", onnx="Identity",
              # (graph values are never written in place: an Identity needs no copy)
              onnx_import={"Identity": lambda b, xs, attrs: xs[0]})

# -- torch's Tensor.new_* : new tensors of this tensor's dtype (unless ``dtype`` is given) --
def new_tensor(self, data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """``x.new_tensor(data)``: ``dg.tensor(data)`` of ``x``'s dtype (unless ``dtype``)."""
    return tensor(data, dtype or self.dtype, device, requires_grad)


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """``x.new_zeros(2, 3)``: zeros of ``x``'s dtype (unless ``dtype``)."""
    return zeros(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return ones(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return empty(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)


def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(size, fill_value, dtype or self.dtype, device, requires_grad)


def new(self, *args) -> Tensor:
    """Legacy ``x.new(*sizes)`` (zeros of that shape) / ``x.new(data)``, of ``x``'s dtype."""
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return zeros(*args, dtype=self.dtype)
    return tensor(args[0], self.dtype)


# -- in-place random fills: a fresh sample copied in (the old value's history is cut) ------
def uniform_(self, a=0.0, b=1.0, *, generator=None) -> Tensor:
    """Fill with samples uniform in ``[a, b)``, as ``torch.Tensor.uniform_``.

    >>> w = dg.empty(3).uniform_(-0.1, 0.1)
    """
    return self.copy_(rand(tuple(self.shape), generator=generator, dtype=self.dtype)
                      * (b - a) + a)


def normal_(self, mean=0.0, std=1.0, *, generator=None) -> Tensor:
    """Fill with normal samples of ``mean`` and ``std``, as ``torch.Tensor.normal_``."""
    return self.copy_(randn(tuple(self.shape), generator=generator, dtype=self.dtype)
                      * std + mean)


def exponential_(self, lambd=1.0, *, generator=None) -> Tensor:
    """Fill with samples of the exponential distribution of rate ``lambd``."""
    uniform = rand(tuple(self.shape), generator=generator, dtype=dtypes.float64)
    return self.copy_(-(1 - uniform).log() / lambd)


def random_(self, from_=0, to=None, *, generator=None) -> Tensor:
    """Fill with integers uniform in ``[from_, to)`` (``random_(to)`` is ``[0, to)``); eager
    only, like ``randint``."""
    if to is None:
        from_, to = 0, from_
    return self.copy_(randint(from_, to, tuple(self.shape), generator=generator))


def bernoulli(input, p=None, *, generator=None) -> Tensor:
    """0/1 samples, 1 with probability ``input`` (or ``p``) per entry, of ``input``'s dtype,
    as ``torch.bernoulli``.

    >>> dg.bernoulli(dg.tensor([0.0, 1.0]))
    tensor([0., 1.])
    """
    prob = input if p is None else p
    draw = rand(tuple(input.shape), generator=generator, dtype=dtypes.float64)
    return (draw < prob).to(input.dtype)


def poisson(input, generator=None) -> Tensor:
    """Poisson counts of rate ``input`` per entry, of ``input``'s dtype, as
    ``torch.poisson`` (a seeded draw: compiled draws equal eager ones).

    >>> dg.poisson(dg.zeros(2))
    tensor([0., 0.])
    """
    return draw(RANDOM_POISSON, generator, params=(input,), shape=(), dtype=input.dtype.np)


def binomial(count, prob, generator=None) -> Tensor:
    """Successes of ``count`` trials of probability ``prob`` per entry (tensors that
    broadcast), of ``count``'s dtype, as ``torch.binomial``.

    >>> dg.binomial(dg.tensor([4.0]), dg.tensor([1.0]))
    tensor([4.])
    """
    return draw(RANDOM_BINOMIAL, generator, params=(count, prob), shape=(),
                dtype=count.dtype.np)


def bernoulli_(self, p=0.5, *, generator=None) -> Tensor:
    """Fill with 0/1 samples, 1 with probability ``p`` (a number or a tensor)."""
    return self.copy_(bernoulli(self, p, generator=generator))


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None) -> Tensor:
    """Normal samples of ``mean`` and ``std`` (numbers, or tensors that broadcast), of
    ``size`` when both are numbers, as ``torch.normal``.

    >>> dg.normal(0.0, 1.0, size=(2, 3)).shape
    dualgraph.Size([2, 3])
    """
    shapes = [tuple(v.shape) for v in (mean, std) if isinstance(v, Tensor)]
    if size is None and not shapes:
        raise ValueError("normal: give size=... when mean and std are numbers")
    if size is not None:
        shape = _size((size,))
    else:
        shape = tuple(np.broadcast_shapes(*shapes))
    floats = [v._data.dtype for v in (mean, std) if isinstance(v, Tensor)]
    return randn(shape, generator=generator, dtype=dtype or (floats[0] if floats else None)
                 ) * std + mean


def to_dense(self, dtype=None, *, masked_grad=None) -> Tensor:
    """The tensor itself (cast to ``dtype``): dualgraph's tensors are dense already
    (``dg.sparse_coo_tensor`` makes a dense one)."""
    return self if dtype is None else self.to(dtype)


METHODS = {"clone": clone, "to_dense": to_dense, "multinomial": multinomial, "new_tensor": new_tensor,
           "new_zeros": new_zeros, "new_ones": new_ones, "new_empty": new_empty,
           "new_full": new_full, "uniform_": uniform_, "normal_": normal_,
           "bernoulli": bernoulli, "bernoulli_": bernoulli_, "exponential_": exponential_,
           "random_": random_, "new": new}


def state(size, fill_value=0, dtype=None) -> Tensor:
    """A new *persistent state* tensor (optimiser moments, step counts, running stats).

    Unlike ``full``, it is always a real (eager) tensor, also while a function is being
    traced: the captured graph then reads it as an input and writes its updates back, so the
    state lives on between calls of a compiled training step instead of being rebuilt
    inside the graph at each call.
    """
    shape = _size((size,)) if not isinstance(size, tuple) else tuple(size)
    if not all(isinstance(d, int) for d in shape):
        raise ValueError(f"state tensors need a concrete shape, got {shape}")
    dt = dtypes.default_float() if dtype is None else dtypes.to_np(dtype)
    return Tensor._make(np.full(shape, fill_value, dtype=dt))


def state_like(x, fill_value=0, dtype=None) -> Tensor:
    """:func:`state` shaped like ``x`` (and of its dtype unless ``dtype`` is given)."""
    return state(tuple(x.shape), fill_value, x._data.dtype if dtype is None else dtype)
