"""Lazy layers, as in ``torch.nn``: ``LazyLinear``, ``LazyConv1d/2d/3d``,
``LazyConvTranspose1d/2d/3d``, ``LazyBatchNorm1d/2d/3d`` and ``LazyInstanceNorm1d/2d/3d`` take
their input size (``in_features``, ``in_channels``, ``num_features``) from their first
input, which is how the d2l book and much newer code write models.

Until then their parameters and running statistics are :class:`UninitializedParameter` /
:class:`UninitializedBuffer` (no shape: empty). The first call creates them in place (the
same objects, so an optimiser made before it sees the real tensors), initialises them as
the plain layer does, and the module becomes that plain layer (``LazyLinear`` ->
``Linear``). Loading a state dict into a lazy layer takes the shapes from the state dict.

Under ``dg.compile`` a first call runs eagerly (the trace stops at the lazy layer, before
anything is drawn or changed) and the next call traces the plain layers into one graph: the
parameters' random initialisation draws once, from the same generator state, as eagerly.
"""
from __future__ import annotations

from ..._helpers import user_location
from ...dispatch import modes, outside_trace
from ...errors import EagerFirstCall
from ...ops import creation
from ...tensor import MUTATIONS, Tensor
from ..parameter import Parameter
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .linear import Linear
from .norm import (BatchNorm1d, BatchNorm2d, BatchNorm3d, InstanceNorm1d, InstanceNorm2d,
                   InstanceNorm3d)
from ._util import check_device


def _materialize(self, shape, device=None, dtype=None) -> None:
    """Give this placeholder ``shape`` (uninitialised values: the layer's
    ``reset_parameters`` fills them) and make it a plain Parameter / Tensor."""
    check_device(device)
    self._data = creation.empty(tuple(shape), dtype=dtype or self.dtype)._data
    self._version = [self._version[0] + 1]
    MUTATIONS[0] += 1
    self.__class__ = self.cls_to_become


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet (a lazy layer's, before its first call)."""

    __slots__ = ()
    cls_to_become = Parameter
    materialize = _materialize

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        check_device(device)
        return super().__new__(cls, creation.empty(0, dtype=dtype), requires_grad)

    def __repr__(self):
        return "<UninitializedParameter>"


class UninitializedBuffer(Tensor):
    """A buffer whose shape is not known yet (a lazy norm's running statistics)."""

    __slots__ = ()
    cls_to_become = Tensor
    materialize = _materialize

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None):
        check_device(device)
        buffer = cls._make(creation.empty(0, dtype=dtype)._data)
        buffer.requires_grad = requires_grad
        return buffer

    def __init__(self, *args, **kwargs):
        pass   # (Tensor.__init__ would copy data)

    def __repr__(self):
        return "<UninitializedBuffer>"


_Uninitialized = (UninitializedParameter, UninitializedBuffer)


def _infer_parameters(module, args, kwargs):
    """The forward pre-hook of a lazy layer: create its parameters from the input, then
    become the plain layer."""
    if modes.building_graph():
        raise EagerFirstCall(f"the first call of {type(module).__name__} (a lazy layer: it "
                             "creates its parameters)", user_location(),
                             "none needed (or call the model once before compiling it)")
    with outside_trace():
        module.initialize_parameters(*args, **kwargs)
    module._initialize_hook.remove()
    module.__class__ = module.cls_to_become


class LazyModuleMixin:
    """A layer whose parameters are created at its first call: subclasses define
    ``initialize_parameters(input)``, which reads the input size, materialises the
    uninitialised tensors and resets them, and ``cls_to_become``."""

    cls_to_become: type

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(_infer_parameters,
                                                               with_kwargs=True)

    def has_uninitialized_params(self) -> bool:
        return any(isinstance(t, _Uninitialized)
                   for t in (*self._parameters.values(), *self._buffers.values()))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing,
                              unexpected, errors):
        for name, t in (*self._parameters.items(), *self._buffers.items()):
            if isinstance(t, _Uninitialized) and prefix + name in state_dict:
                t.materialize(state_dict[prefix + name].shape)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing,
                                      unexpected, errors)

    def _uninitialized(self, *names) -> None:
        """Replace the registered tensors ``names`` (those not None) by placeholders."""
        for name in names:
            if self._parameters.get(name) is not None:
                self.register_parameter(name, UninitializedParameter())
            elif self._buffers.get(name) is not None:
                self.register_buffer(name, UninitializedBuffer())

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self._input_size() != 0:
            super().reset_parameters()


class LazyLinear(LazyModuleMixin, Linear):
    """A Linear whose ``in_features`` is the last dim of its first input."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, out_features, bias, device, dtype)
        self._uninitialized("weight", "bias")

    def _input_size(self) -> int:
        return self.in_features

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            self.in_features = int(input.shape[-1])
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()
        self.in_features = self.weight.shape[1]   # (also after loading a state dict)


class _LazyConv(LazyModuleMixin):
    """A convolution whose ``in_channels`` is its first input's channel count; constructed
    with the plain layer's arguments less ``in_channels``."""

    def __init__(self, out_channels: int, *args, **kwargs):
        super().__init__(0, out_channels, *args, **kwargs)
        self._uninitialized("weight", "bias")

    def _input_size(self) -> int:
        return self.in_channels

    def initialize_parameters(self, input, *args, **kwargs) -> None:
        if self.has_uninitialized_params():
            batched = input.ndim == len(self._spatial) + 2
            self.in_channels = int(input.shape[1 if batched else 0])
            if self.in_channels % self.groups:
                raise ValueError(f"{type(self).__name__}: in_channels ({self.in_channels}, "
                                 f"from the input) must be divisible by groups "
                                 f"({self.groups})")
            outer, inner = self.out_channels, self.in_channels // self.groups
            if self.transposed:
                outer, inner = self.in_channels, self.out_channels // self.groups
            self.weight.materialize((outer, inner) + self.kernel_size)
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()
        w = self.weight.shape   # (also after loading a state dict)
        self.in_channels = w[0] if self.transposed else w[1] * self.groups


def _lazy(base, plain, size: str, **attrs):
    name = "Lazy" + plain.__name__
    return type(name, (base, plain), {
        "cls_to_become": plain, "__module__": __name__, **attrs,
        "__doc__": f"A {plain.__name__} whose ``{size}`` is read from its first input "
                   f"(constructed with {plain.__name__}'s arguments less that one)."})


LazyConv1d = _lazy(_LazyConv, Conv1d, "in_channels")
LazyConv2d = _lazy(_LazyConv, Conv2d, "in_channels")
LazyConv3d = _lazy(_LazyConv, Conv3d, "in_channels")
LazyConvTranspose1d = _lazy(_LazyConv, ConvTranspose1d, "in_channels")
LazyConvTranspose2d = _lazy(_LazyConv, ConvTranspose2d, "in_channels")
LazyConvTranspose3d = _lazy(_LazyConv, ConvTranspose3d, "in_channels")


class _LazyNorm(LazyModuleMixin):
    """A batch or instance norm whose ``num_features`` is its first input's channel count."""

    _unbatched_ok = False   # (instance norms take one sample (C, ...) too)

    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        # (affine and running statistics by default for the instance norms too, as torch's
        # lazy ones, unlike InstanceNorm*d)
        super().__init__(0, eps, momentum, affine, track_running_stats, device, dtype)
        self._uninitialized("weight", "bias", "running_mean", "running_var")

    def _input_size(self) -> int:
        return self.num_features

    def initialize_parameters(self, input) -> None:
        unbatched = self._unbatched_ok and input.ndim == len(self._spatial) + 1
        channels = int(input.shape[0 if unbatched else 1])
        if self.has_uninitialized_params():
            self.num_features = channels
            for t in (self.weight, self.bias, self.running_mean, self.running_var):
                if isinstance(t, _Uninitialized):
                    t.materialize((channels,))
            self.reset_parameters()
        known = next((t for t in (self.weight, self.running_mean) if t is not None), None)
        self.num_features = channels if known is None else int(known.shape[0])


LazyBatchNorm1d = _lazy(_LazyNorm, BatchNorm1d, "num_features")
LazyBatchNorm2d = _lazy(_LazyNorm, BatchNorm2d, "num_features")
LazyBatchNorm3d = _lazy(_LazyNorm, BatchNorm3d, "num_features")
LazyInstanceNorm1d = _lazy(_LazyNorm, InstanceNorm1d, "num_features", _unbatched_ok=True)
LazyInstanceNorm2d = _lazy(_LazyNorm, InstanceNorm2d, "num_features", _unbatched_ok=True)
LazyInstanceNorm3d = _lazy(_LazyNorm, InstanceNorm3d, "num_features", _unbatched_ok=True)
