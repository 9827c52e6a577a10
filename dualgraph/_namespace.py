"""Names of torch's top-level namespace that are not ops: type tests, thread settings,
matmul precision, the legacy typed constructors (``dg.LongTensor([1, 2])``).

>>> import dualgraph as dg
>>> dg.is_tensor(dg.zeros(2)), dg.numel(dg.zeros(2, 3))
(True, 6)
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from . import dtypes, shapes
from .kernels import tuning
from .ops import creation, linalg, reduce as red, shape as shape_ops
from .tensor import Size, Tensor, print_options

__all__ = ["is_tensor", "is_floating_point", "numel", "finfo", "iinfo", "initial_seed", "seed",
           "set_num_threads", "get_num_threads", "set_printoptions",
           "set_float32_matmul_precision", "get_float32_matmul_precision",
           "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
           "IntTensor", "BoolTensor", "broadcast_shapes", "broadcast_tensors", "_assert",
           "meshgrid", "cdist", "spmm", "use_deterministic_algorithms",
           "are_deterministic_algorithms_enabled", "result_type", "promote_types", "can_cast",
           "get_rng_state", "set_rng_state"]

# torch's functional spellings of Tensor methods, ``torch.exp_(x)`` for ``x.exp_()``: one
# table, each name the method of its first argument (the in-place ops, detach, ...)
METHOD_FORMS = (
    "abs_", "acos_", "acosh_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_",
    "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "clamp_",
    "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "detach", "detach_", "erf_",
    "erfc_", "exp2_", "exp_", "expm1_", "fill_", "fix_", "floor_", "frac_", "gcd_",
    "get_device", "index_put_", "lcm_", "log10_", "log1p_", "log2_", "log_", "logit_",
    "nan_to_num_", "neg_", "negative_", "reciprocal_", "relu_", "round_", "rsqrt_",
    "sigmoid_", "sin_", "sinh_", "sqrt_", "square_", "tan_", "tanh_", "trunc_", "xlogy_",
    "zero_")


def _method_form(name: str):
    def function(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``torch.{name}(input, ...)``: ``input.{name}(...)``."
    return function


globals().update({name: _method_form(name) for name in METHOD_FORMS})
__all__ += list(METHOD_FORMS)


def is_tensor(obj) -> bool:
    """Whether ``obj`` is a dualgraph Tensor (Parameters included)."""
    return isinstance(obj, Tensor)


def is_floating_point(input) -> bool:
    """Whether ``input``'s dtype is a floating-point one."""
    return input.is_floating_point()


def initial_seed() -> int:
    """The seed of the global generator (``dg.manual_seed``'s last argument)."""
    return creation.default_generator.initial_seed()


def seed() -> int:
    """Seed the global generator from the operating system's entropy; returns the seed."""
    value = int(np.random.SeedSequence().entropy % 2 ** 63)
    creation.manual_seed(value)
    return value


class finfo:
    """The limits of a floating-point dtype, as ``torch.finfo``: ``bits``, ``eps``, ``max``,
    ``min``, ``tiny`` (= ``smallest_normal``), ``resolution``, ``dtype``; of the default
    dtype when none is given.

    >>> dg.finfo(dg.float32).min   # doctest: +SKIP
    -3.4028234663852886e+38
    """

    def __init__(self, type=None):
        dtype = dtypes.as_dtype(dtypes.get_default_dtype() if type is None else type)
        if not dtype.is_floating_point:
            raise TypeError(f"finfo needs a floating-point dtype, got {dtype!r}; use iinfo")
        info = ml_dtypes.finfo(dtype.np)
        self.bits, self.dtype = info.bits, dtype.name
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -info.precision   # (torch's: a power of ten exactly)

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, "
                f"eps={self.eps}, smallest_normal={self.tiny}, tiny={self.tiny}, "
                f"dtype={self.dtype})")


class iinfo:
    """The limits of an integer dtype, as ``torch.iinfo``: ``bits``, ``max``, ``min``,
    ``dtype``."""

    def __init__(self, type):
        dtype = dtypes.as_dtype(type)
        if dtype.np.kind not in "iu":
            raise TypeError(f"iinfo needs an integer dtype, got {dtype!r}; use finfo")
        info = np.iinfo(dtype.np)
        self.bits, self.max, self.min, self.dtype = info.bits, int(info.max), int(
            info.min), dtype.name

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


def numel(input) -> int:
    """The number of elements of ``input``."""
    return input.numel()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for intra-op work, as ``torch.set_num_threads``: one count for
    every pool dualgraph's kernels run on, the threads of NumPy's OpenBLAS (GEMMs, and the
    loops whose rows are handed to its workers), dualgraph's own loops
    (``DUALGRAPH_NUM_THREADS``) and the batch-1 products' helper thread (``n = 1`` stops
    using it), so that none oversubscribes the cores the others use
    (``kernels.tuning.share_cores``; docs/kernels.md, "Threads")."""
    if int(n) < 1:
        raise ValueError(f"set_num_threads expects a positive number of threads, got {n}")
    tuning.share_cores(int(n))


def get_num_threads() -> int:
    """The number of threads dualgraph's big loops are split over."""
    return tuning.cores()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None) -> None:
    """How tensors print, as ``torch.set_printoptions``: ``precision`` (digits after the
    point), ``threshold`` (elements before the middle is elided), ``edgeitems``,
    ``linewidth``; ``profile`` ``"default"``, ``"short"`` or ``"full"`` sets them all.
    ``sci_mode`` is accepted and left to NumPy's choice."""
    profiles = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
                "full": (4, 2 ** 63 - 1, 3, 80)}
    options = print_options
    if profile is not None:
        options.update(zip(("precision", "threshold", "edgeitems", "linewidth"),
                           profiles[profile]))
    for name, value in (("precision", precision), ("threshold", threshold),
                        ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            options[name] = int(value)


_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """Accepted for torch programs (``"highest"``, ``"high"``, ``"medium"``) and kept:
    float32 matmuls on the CPU always run in full float32 precision."""
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f"invalid float32 matmul precision {precision!r}: expected "
                         "'highest', 'high' or 'medium'")
    _matmul_precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _matmul_precision[0]


class _TypedTensor(type):
    """The class of ``dg.FloatTensor`` & co: calling one makes a Tensor of its dtype, and
    ``isinstance(x, dg.LongTensor)`` tests a Tensor's dtype, as torch's legacy types do."""

    def __call__(cls, *args, device=None):
        if not args:
            return creation.zeros(0, dtype=cls.dtype, device=device)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            # dg.FloatTensor(2, 3) is a new tensor of that shape (zeros; torch's is
            # uninitialised memory)
            return creation.zeros(*args, dtype=cls.dtype, device=device)
        if len(args) > 1:
            raise TypeError(f"{cls.__name__}() takes sizes or one sequence of data, got "
                            f"{args!r}")
        return creation.tensor(args[0], dtype=cls.dtype, device=device)

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype


def _typed(name: str, dtype) -> type:
    return _TypedTensor(name, (), {"dtype": dtype, "__doc__": (
        f"``dg.{name}(data)`` or ``dg.{name}(*sizes)``: a tensor of dtype "
        f"{dtype!r}, as torch's legacy ``torch.{name}``.")})


FloatTensor = _typed("FloatTensor", dtypes.float32)
DoubleTensor = _typed("DoubleTensor", dtypes.float64)
HalfTensor = _typed("HalfTensor", dtypes.float16)
BFloat16Tensor = _typed("BFloat16Tensor", dtypes.bfloat16)
LongTensor = _typed("LongTensor", dtypes.int64)
IntTensor = _typed("IntTensor", dtypes.int32)
BoolTensor = _typed("BoolTensor", dtypes.bool_)


def broadcast_shapes(*shapes_) -> Size:
    """The shape that tensors of ``shapes_`` broadcast to, as ``torch.broadcast_shapes``."""
    return Size(shapes.broadcast_shapes(*(
        (s,) if isinstance(s, int) else tuple(s) for s in shapes_)))


def broadcast_tensors(*tensors) -> tuple:
    """The tensors expanded to their common broadcast shape (views, as torch's)."""
    shape = shapes.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    return tuple(t if tuple(t.shape) == shape else shape_ops.expand(t, shape)
                 for t in tensors)


def _assert(condition, message) -> None:
    """``torch._assert``: ``assert`` that scripted code can call; raises AssertionError."""
    if not condition:
        raise AssertionError(message)


def meshgrid(*tensors, indexing: str = "ij") -> tuple:
    """Coordinate grids of 1-d tensors, as ``torch.meshgrid`` ('ij' or 'xy' indexing)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    swap = indexing == "xy" and len(tensors) >= 2
    order = [1, 0, *range(2, len(tensors))] if swap else list(range(len(tensors)))
    shape = tuple(tensors[k].numel() for k in order)
    grids = []
    for axis, k in enumerate(order):
        view = [1] * len(tensors)
        view[axis] = -1
        grids.append((k, shape_ops.expand(shape_ops.reshape(tensors[k], tuple(view)), shape)))
    return tuple(g for _, g in sorted(grids, key=lambda kg: kg[0]))


def cdist(x1, x2, p: float = 2.0, compute_mode=None):
    """The ``p``-norm distance between each row of ``x1`` (..., P, M) and each row of
    ``x2`` (..., R, M): (..., P, R), as ``torch.cdist``."""
    diff = shape_ops.unsqueeze(x1, -2) - shape_ops.unsqueeze(x2, -3)
    return red.norm(diff, p, -1)


def spmm(input, mat2):
    """``torch.spmm``: a matrix product (dualgraph's tensors are dense)."""
    return linalg.mm(input, mat2)


_deterministic = [False]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Recorded only: dualgraph's CPU kernels are deterministic already."""
    _deterministic[0] = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return _deterministic[0]


def result_type(tensor1, tensor2) -> dtypes.DType:
    """The dtype an arithmetic op on ``tensor1`` and ``tensor2`` (tensors or numbers)
    gives, as ``torch.result_type``: dimensioned tensors rank over 0-d ones over numbers."""
    operands = (getattr(x, "_data", x) for x in (tensor1, tensor2))
    return dtypes.from_np(dtypes.result_type(*operands))


def promote_types(type1, type2) -> dtypes.DType:
    """The smallest dtype both ``type1`` and ``type2`` cast to, as ``torch.promote_types``."""
    return dtypes.from_np(dtypes.promote_types(dtypes.to_np(type1), dtypes.to_np(type2)))


def can_cast(from_, to) -> bool:
    """Whether torch's casting rule allows ``from_`` into ``to`` for an op's output: no
    floating point into an integer or bool, no integer into bool (``torch.can_cast``)."""
    return dtypes.can_cast(from_, to)


# get_rng_state's layout: PCG64's 128-bit state and increment, its buffered 32-bit draw
# (flag, value), the generator's seed and the seed state compiled graphs draw from
_STATE_FIELDS = ((16, "state"), (16, "inc"), (1, "has_uint32"), (4, "uinteger"),
                 (8, "seed"), (8, "graph_seed"))
_STATE_BYTES = sum(n for n, _ in _STATE_FIELDS)


def get_rng_state() -> Tensor:
    """The global generator's state as a uint8 tensor, as ``torch.get_rng_state``; giving
    it to :func:`set_rng_state` later makes the same draws again (eager and compiled)."""
    generator = creation.default_generator
    pcg = generator.get_state()
    values = {"state": pcg["state"]["state"], "inc": pcg["state"]["inc"],
              "has_uint32": pcg["has_uint32"], "uinteger": pcg["uinteger"],
              "seed": generator.initial_seed() % 2 ** 64,
              "graph_seed": int(generator.seed_state._data)}
    raw = b"".join(int(values[name]).to_bytes(n, "little") for n, name in _STATE_FIELDS)
    return creation.tensor(np.frombuffer(raw, np.uint8), dtype=dtypes.uint8)


def set_rng_state(new_state) -> None:
    """Restore the global generator to a state :func:`get_rng_state` returned."""
    if (not isinstance(new_state, Tensor) or new_state.dtype != dtypes.uint8
            or tuple(new_state.shape) != (_STATE_BYTES,)):
        raise TypeError(f"set_rng_state expects the uint8 tensor of {_STATE_BYTES} bytes "
                        f"that get_rng_state returns, got {new_state!r:.60}")
    raw, values, at = new_state.numpy().tobytes(), {}, 0
    for n, name in _STATE_FIELDS:
        values[name] = int.from_bytes(raw[at:at + n], "little")
        at += n
    generator = creation.default_generator
    generator.set_state({"bit_generator": "PCG64",
                         "state": {"state": values["state"], "inc": values["inc"]},
                         "has_uint32": values["has_uint32"], "uinteger": values["uinteger"]})
    seed = values["seed"]
    generator._seed = seed - 2 ** 64 if seed >= 2 ** 63 else seed
    generator.seed_state._data[...] = np.int64(values["graph_seed"])
