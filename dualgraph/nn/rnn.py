"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their cells, mirroring ``torch.nn``.

Per layer and direction the input projection of every step is one matmul over the whole
sequence, and the recurrence one layer op (``lstm_layer``, ``gru_layer``, ``rnn_layer``:
one kernel each way, one node once traced). A packed sequence, an LSTM with projections
and the cells run the step functions instead, a Python loop over time steps of ordinary
ops (one unrolled step per time step once traced).

Parameter names, shapes, registration order, initialisation (U(-1/sqrt(hidden),
1/sqrt(hidden)) for everything) and the printed form are torch's, so a torch state dict
loads as is. Gate order is torch's too: LSTM (i, f, g, o), GRU (r, z, n) with
``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.

>>> import dualgraph as dg
>>> lstm = LSTM(8, 16, num_layers=2, batch_first=True)
>>> out, (h, c) = lstm(dg.randn(4, 5, 8))
>>> tuple(out.shape), tuple(h.shape)
((4, 5, 16), (2, 4, 16))
"""
from __future__ import annotations

import functools
import math
import numbers
import warnings
from typing import Callable, NamedTuple

from .._helpers import onnx_exports
from ..dispatch import autocast
from ..ops import (control, creation, elementwise, index, recurrent, recurrent_gru_elman,
                   recurrent_layer)
from ..ops import shape as shape_ops
from ..ops.linalg import linear
from ..tensor import Tensor
from . import functional as F
from . import init
from .layers._util import check_device, new_parameter, optional_parameter
from .module import Module
from .parameter import Parameter
from .utils.rnn import PackedSequence

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


_WEIGHT_BASES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")


class _Weights(NamedTuple):
    """The parameters of one layer and direction (or of one cell); absent ones are None."""
    w_ih: Tensor
    w_hh: Tensor
    b_ih: Tensor | None
    b_hh: Tensor | None
    w_hr: Tensor | None = None


# -- one time step ----------------------------------------------------------------------------
# A step maps the precomputed input projection ``xg`` (W_ih x + b_ih) of one time step and the
# state tuple ((h,) or (h, c)) to the new state; the step's output is the new state[0].
def _tanh_step(xg, state, w: _Weights):
    (h,) = state
    return (elementwise.tanh(xg + linear(h, w.w_hh, w.b_hh)),)


def _relu_step(xg, state, w: _Weights):
    (h,) = state
    return (elementwise.relu(xg + linear(h, w.w_hh, w.b_hh)),)


def _lstm_step(xg, state, w: _Weights):
    h, c = state
    h, c = recurrent.lstm_cell(xg, h, c, w.w_hh, w.b_hh)   # one fused op per step
    if w.w_hr is not None:  # LSTM with projections: the hidden state is W_hr h
        h = linear(h, w.w_hr)
    return h, c


def _gru_step(xg, state, w: _Weights):
    (h,) = state
    # (b_hn stays inside the reset gate's product, as in torch and cuDNN)
    return (recurrent.gru_cell(xg, h, w.w_hh, w.b_hh),)   # one fused op per step


class _Mode(NamedTuple):
    gates: int      # gate rows per hidden unit in weight_ih / weight_hh
    states: int     # tensors in the state: 1 (h) or 2 (h, c)
    step: Callable  # (xg, state, weights) -> new state


_MODES = {"RNN_TANH": _Mode(1, 1, _tanh_step), "RNN_RELU": _Mode(1, 1, _relu_step),
          "LSTM": _Mode(4, 2, _lstm_step), "GRU": _Mode(3, 1, _gru_step)}
_CELL_MODES = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
_ELMAN_STEPS = {_tanh_step: "tanh", _relu_step: "relu"}
# torch's gate blocks in ONNX's order: LSTM (i, f, g, o) -> (i, o, f, c), GRU (r, z, n) ->
# (z, r, h)
_ONNX_GATES = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN_TANH": (0,), "RNN_RELU": (0,)}


def _run_direction(x, state: tuple, w: _Weights, step, reverse: bool):
    """Run one layer in one direction over ``x`` (T, B, F): the outputs (T, B, H) in time
    order and the final state. Each mode is one layer op over the whole sequence (forward
    and backward each one kernel): ``lstm_layer``, ``gru_layer``, ``rnn_layer``; an LSTM
    with projections a step op per time step."""
    xg = linear(x, w.w_ih, w.b_ih)    # one matmul for every step
    if step is _lstm_step and w.w_hr is None:
        y, h, c = recurrent_layer.lstm_layer(xg, *state, w.w_hh, w.b_hh, reverse=reverse)
        return y, (h, c)
    if step is _gru_step:
        y, h = recurrent_gru_elman.gru_layer(xg, *state, w.w_hh, w.b_hh, reverse=reverse)
        return y, (h,)
    if step in _ELMAN_STEPS:
        y, h = recurrent_gru_elman.rnn_layer(xg, *state, w.w_hh, w.b_hh,
                                             nonlinearity=_ELMAN_STEPS[step], reverse=reverse)
        return y, (h,)
    steps = shape_ops.unbind(xg, 0)
    outputs = [None] * len(steps)
    for t in (reversed(range(len(steps))) if reverse else range(len(steps))):
        state = step(steps[t], state, w)
        outputs[t] = state[0]
    return shape_ops.stack(outputs, 0), state


def _packed_direction(x, state: tuple, w: _Weights, step, reverse: bool, sizes=()):
    """``_run_direction`` over the data (N, F) of a PackedSequence with ``sizes`` (its
    batch sizes): step t runs on the first ``sizes[t]`` sequences (the longest first),
    the others keep their state. The outputs are packed as the input."""
    steps = shape_ops.split(linear(x, w.w_ih, w.b_ih), sizes, 0)
    outputs = [None] * len(steps)
    batch = sizes[0]
    for t in (reversed(range(len(steps))) if reverse else range(len(steps))):
        n = sizes[t]
        new = step(steps[t], state if n == batch else tuple(s[:n] for s in state), w)
        outputs[t] = new[0]
        state = new if n == batch else tuple(shape_ops.cat([a, s[n:]], 0)
                                             for a, s in zip(new, state))
    return shape_ops.cat(outputs, 0), state


def _scan_direction(x, state: tuple, w: _Weights, step, reverse: bool):
    """``_run_direction`` as one ``dg.scan`` over the time steps, its body one step (the
    ONNX export writes it as a Scan, whatever the sequence's length)."""
    def body(carry, xg):
        new = step(xg, carry, w)
        return new, new[0]
    state, outputs = control.scan(body, tuple(state), linear(x, w.w_ih, w.b_ih),
                                  reverse=reverse)
    return outputs, state


def _check_size(name: str, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be greater than zero")


class RNNBase(Module):
    """What RNN, LSTM and GRU share: the parameters of every layer and direction, checks of
    the input and initial state, and the loop over layers and directions. ``mode`` is one
    of ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"``, ``"GRU"``."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None):
        super().__init__()
        if mode not in _MODES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          "non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        for name, flag in (("bias", bias), ("batch_first", batch_first)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} should be of type bool, got: {type(flag).__name__}")
        _check_size("input_size", input_size)
        _check_size("hidden_size", hidden_size)
        _check_size("num_layers", num_layers)
        if proj_size < 0:
            raise ValueError(
                "proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        check_device(device)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        self._all_weights = []
        gate_size = _MODES[mode].gates * hidden_size
        real_hidden = proj_size or hidden_size
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * self._directions
            for direction in range(self._directions):
                shapes = [(gate_size, layer_input), (gate_size, real_hidden)]
                if bias:
                    shapes += [(gate_size,), (gate_size,)]
                if proj_size:
                    shapes.append((proj_size, hidden_size))
                names = self._weight_names(layer, direction)
                for name, shape in zip(names, shapes, strict=True):
                    setattr(self, name, new_parameter(shape, dtype=dtype))
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _weight_names(self, layer: int, direction: int) -> list[str]:
        """torch's names, in torch's registration order."""
        suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
        return [base + suffix for base in _WEIGHT_BASES
                if (self.bias or not base.startswith("bias"))
                and (self.proj_size or base != "weight_hr")]

    def _weights(self, layer: int, direction: int) -> _Weights:
        """Looked up by name on every call, so reassigned parameters are picked up."""
        suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
        return _Weights(*(getattr(self, base + suffix, None) for base in _WEIGHT_BASES))

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters per layer and direction, in torch's order."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """A no-op kept for torch compatibility (torch packs weights for cuDNN here)."""

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    # -- forward ------------------------------------------------------------------------------
    def _state_sizes(self) -> tuple:
        """The last dim of each state tensor: (h,), or (h, c) for LSTM."""
        return (self.proj_size or self.hidden_size,)

    def _run(self, input, hx: tuple | None):
        """The shared forward: ``hx`` is None or the tuple of initial state tensors, each
        (layers * directions, B, size) or, for unbatched input, without the B dim. Returns
        the output and the tuple of final states in the same layout."""
        if isinstance(input, PackedSequence):
            return self._run_packed(input, hx)
        name = type(self).__name__
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D "
                             "tensor instead")
        batched = input.ndim == 3
        if hx is not None and any(h.ndim != input.ndim for h in hx):
            kind = "batched 3-D" if batched else "unbatched 2-D"
            dims = ", ".join(f"{h.ndim}-D" for h in hx)
            raise RuntimeError(f"For {kind} input, hx should also be {input.ndim}-D but got "
                               f"({dims}) tensor(s)")
        if not batched:
            input = shape_ops.unsqueeze(input, 0 if self.batch_first else 1)
            hx = None if hx is None else tuple(shape_ops.unsqueeze(h, 1) for h in hx)
        x = shape_ops.transpose(input, 0, 1) if self.batch_first else input  # (T, B, F)
        self._check_input(x)
        states = self._initial_states(x.shape[1], x.dtype, hx)
        # (exported, a layer ONNX's ops can't express runs as a scan: an ONNX Scan)
        x, h_n = self._layers(x, states, hx, _scan_direction if onnx_exports else _run_direction)
        output = shape_ops.transpose(x, 0, 1) if self.batch_first else x
        if not batched:
            output = shape_ops.squeeze(output, 0 if self.batch_first else 1)
            h_n = tuple(shape_ops.squeeze(h, 1) for h in h_n)
        return output, h_n

    def _layers(self, x, states: list, hx, run):
        """Every layer and direction over ``x``, each direction by ``run``: the last
        layer's output and the final states, stacked (layers * directions, B, size)."""
        finals = []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = F.dropout(x, self.dropout, True)
            if onnx_exports and run is _scan_direction and not self.proj_size:
                x, layer_finals = self._sequence_layer(x, hx and states, layer)
                finals += layer_finals   # (ONNX's LSTM has no projection)
                continue
            outputs = []
            for direction in range(self._directions):
                k = layer * self._directions + direction
                out, final = run(x, states[k], self._weights(layer, direction),
                                 _MODES[self.mode].step, reverse=direction == 1)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if len(outputs) == 1 else shape_ops.cat(outputs, -1)
        return x, tuple(shape_ops.stack(parts, 0) for parts in zip(*finals))

    def _run_packed(self, packed: PackedSequence, hx: tuple | None):
        """``_run`` over a PackedSequence: the output packed as the input, the final
        states (those of each sequence's last step) in the batch's order."""
        x, sizes = packed.data, packed.sizes()
        if x.ndim != 2:
            raise ValueError(f"{type(self).__name__}: a PackedSequence's data must be 2-D "
                             f"(steps, input_size), got {x.ndim}-D")
        self._check_input(x)
        if hx is not None and packed.sorted_indices is not None:   # (into the data's order)
            hx = tuple(index.index_select(h, 1, packed.sorted_indices) for h in hx)
        states = self._initial_states(sizes[0], x.dtype, hx)
        run = functools.partial(_packed_direction, sizes=sizes)
        x, h_n = self._layers(x, states, hx, run)
        if packed.unsorted_indices is not None:
            h_n = tuple(index.index_select(h, 1, packed.unsorted_indices) for h in h_n)
        return packed._replace(data=x), h_n

    def _sequence_layer(self, x, states: list, layer: int):
        """Layer ``layer`` over ``x`` (T, B, F) as one ``rnn_sequence`` op, which the ONNX
        export writes as ONNX's LSTM, GRU or RNN op (``states`` None: zeros, which ONNX
        leaves out): the output (T, B, D*H) and the final state tuple per direction."""
        directions = range(self._directions)
        perm = _ONNX_GATES[self.mode]

        def onnx_order(t):
            parts = shape_ops.chunk(t, len(perm), 0)
            return shape_ops.cat([parts[k] for k in perm], 0)

        def stacked(make):
            return shape_ops.stack([make(self._weights(layer, d)) for d in directions], 0)
        w, r = stacked(lambda v: onnx_order(v.w_ih)), stacked(lambda v: onnx_order(v.w_hh))
        if self.bias:
            b = stacked(lambda v: shape_ops.cat([onnx_order(v.b_ih), onnx_order(v.b_hh)], 0))
        else:
            b = creation.zeros(len(directions), 2 * r.shape[1], dtype=x.dtype)
        first = [states[layer * self._directions + d] for d in directions] if states else []
        initial = [shape_ops.stack(parts, 0) for parts in zip(*first)]
        y, h_n, c_n = recurrent.rnn_sequence(x, w, r, b, *initial, mode=self.mode)
        out = shape_ops.flatten(y.permute(0, 2, 1, 3), 2)   # (T, B, D*H)
        finals = [(h_n[d], c_n[d]) if self.mode == "LSTM" else (h_n[d],) for d in directions]
        return out, finals

    def _check_input(self, x):
        dtype = self.weight_ih_l0.dtype
        # (under autocast the recurrence's op casts input, states and weights alike: a
        # float32 layer takes the bfloat16 output of a previous layer, as torch's does)
        if x.dtype != dtype and not (autocast.dtype is not None and x.is_floating_point()):
            raise ValueError(f"RNN input dtype ({x.dtype}) does not match weight dtype "
                             f"({dtype}). Convert input: input.to({dtype}), or convert model: "
                             f"model.to({x.dtype})")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {x.shape[-1]}")

    def _initial_states(self, batch: int, dtype, hx: tuple | None) -> list[tuple]:
        """One state tuple per layer and direction: zeros, or the slices of ``hx``."""
        count = self.num_layers * self._directions
        if hx is None:
            hx = tuple(creation.zeros(count, batch, size, dtype=dtype)
                       for size in self._state_sizes())
        for i, (h, size) in enumerate(zip(hx, self._state_sizes())):
            expected = (count, batch, size)
            if tuple(h.shape) != expected:
                which = f"hidden[{i}]" if len(hx) > 1 else "hidden"
                raise RuntimeError(f"Expected {which} size {expected}, got {list(h.shape)}")
        return list(zip(*(shape_ops.unbind(h, 0) for h in hx)))


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh)`` (or relu).

    ``forward(input, hx=None)`` takes input (T, B, input_size) ((B, T, ...) with
    ``batch_first``, or (T, input_size) unbatched) and returns ``(output, h_n)`` with
    output (T, B, directions * hidden_size) and h_n (layers * directions, B, hidden_size).

    >>> import dualgraph as dg
    >>> out, h = RNN(3, 5, nonlinearity="relu")(dg.randn(7, 2, 3))
    >>> tuple(out.shape), tuple(h.shape)
    ((7, 2, 5), (1, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None, dtype=None):
        if nonlinearity not in _CELL_MODES:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             "'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__(_CELL_MODES[nonlinearity], input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        output, (h_n,) = self._run(input, None if hx is None else (hx,))
        return output, h_n


class LSTM(RNNBase):
    """Long short-term memory (Hochreiter & Schmidhuber, 1997), gates (i, f, g, o) as torch.

    ``forward(input, hx=None)`` with ``hx = (h_0, c_0)`` returns
    ``(output, (h_n, c_n))``. With ``proj_size > 0`` the hidden state is projected to
    ``proj_size`` by ``weight_hr_l{k}`` (Sak et al., 2014).

    >>> import dualgraph as dg
    >>> out, (h, c) = LSTM(3, 5, bidirectional=True)(dg.randn(7, 2, 3))
    >>> tuple(out.shape), tuple(c.shape)
    ((7, 2, 10), (2, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)

    def _state_sizes(self) -> tuple:
        return (self.proj_size or self.hidden_size, self.hidden_size)

    def forward(self, input, hx=None):
        if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError("LSTM expects hx to be a tuple (h_0, c_0)")
        output, (h_n, c_n) = self._run(input, None if hx is None else tuple(hx))
        return output, (h_n, c_n)


class GRU(RNNBase):
    """Gated recurrent unit (Cho et al., 2014), gates (r, z, n) as torch.

    ``forward(input, hx=None)`` returns ``(output, h_n)`` like :class:`RNN`.

    >>> import dualgraph as dg
    >>> out, h = GRU(3, 5, num_layers=2)(dg.randn(7, 3))
    >>> tuple(out.shape), tuple(h.shape)
    ((7, 5), (2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        output, (h_n,) = self._run(input, None if hx is None else (hx,))
        return output, h_n


# -- cells ------------------------------------------------------------------------------------
class RNNCellBase(Module):
    """What the cells share: ``weight_ih`` (chunks * hidden, input), ``weight_hh``,
    ``bias_ih``, ``bias_hh``, torch's init and repr, and 1-D (unbatched) input handling."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        gates = num_chunks * hidden_size
        self.weight_ih = new_parameter((gates, input_size), device, dtype)
        self.weight_hh = new_parameter((gates, hidden_size), device, dtype)
        for name in ("bias_ih", "bias_hh"):
            optional_parameter(self, name, (gates,), bias, device, dtype)
        self.reset_parameters()

    def extra_repr(self) -> str:
        s = "{input_size}, {hidden_size}"
        if "bias" in self.__dict__ and self.bias is not True:
            s += ", bias={bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += ", nonlinearity={nonlinearity}"
        return s.format(**self.__dict__)

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _cell(self, input, hx: tuple | None, mode: str) -> tuple:
        """One step of ``mode`` from state ``hx`` (a tuple, or None for zeros), accepting
        1-D input and states as torch does."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D "
                             "instead")
        for i, h in enumerate(hx or ()):
            if h.ndim not in (1, 2):
                raise ValueError(f"{name}: Expected hx[{i}] to be 1D or 2D, got {h.ndim}D "
                                 "instead")
        batched = input.ndim == 2
        if not batched:
            input = shape_ops.unsqueeze(input, 0)
            hx = None if hx is None else tuple(shape_ops.unsqueeze(h, 0) for h in hx)
        if hx is None:
            zeros = creation.zeros(input.shape[0], self.hidden_size, dtype=input.dtype)
            hx = (zeros,) * _MODES[mode].states
        w = _Weights(self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        state = _MODES[mode].step(linear(input, w.w_ih, w.b_ih), hx, w)
        return state if batched else tuple(shape_ops.squeeze(h, 0) for h in state)


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)`` (or relu).

    >>> import dualgraph as dg
    >>> tuple(RNNCell(3, 4)(dg.randn(2, 3)).shape)
    (2, 4)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device,
                         dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity not in _CELL_MODES:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        (h,) = self._cell(input, None if hx is None else (hx,),
                          _CELL_MODES[self.nonlinearity])
        return h


class LSTMCell(RNNCellBase):
    """One LSTM step: ``forward(input, (h, c)) -> (h', c')``.

    >>> import dualgraph as dg
    >>> h, c = LSTMCell(3, 4)(dg.randn(2, 3))
    >>> tuple(c.shape)
    (2, 4)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device,
                         dtype=dtype)

    def forward(self, input, hx=None):
        return self._cell(input, None if hx is None else tuple(hx), "LSTM")


class GRUCell(RNNCellBase):
    """One GRU step: ``forward(input, h) -> h'``.

    >>> import dualgraph as dg
    >>> tuple(GRUCell(3, 4)(dg.randn(3)).shape)
    (4,)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device,
                         dtype=dtype)

    def forward(self, input, hx=None):
        (h,) = self._cell(input, None if hx is None else (hx,), "GRU")
        return h
