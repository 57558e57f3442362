"""Recurrent layers: RNN, LSTM, GRU and their one-step cells, with PyTorch's parameters and gate order.

Each layer and direction owns ``weight_ih_l{k}{_reverse}`` (gates x input),
``weight_hh_l{k}{_reverse}`` (gates x hidden), ``bias_ih_l{k}...`` and
``bias_hh_l{k}...`` (and an LSTM with ``proj_size`` also ``weight_hr_l{k}...``),
registered in PyTorch's order and initialised U(-1/sqrt(hidden), 1/sqrt(hidden)),
so a PyTorch state_dict loads. The gates are stacked as PyTorch stacks them::

    LSTM (i, f, g, o):  c' = sigmoid(f) c + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c')
    GRU  (r, z, n):     r, z = sigmoid(.), n = tanh(x_n + b_in + r (W_hn h + b_hn)),  h' = (1 - z) n + z h
    RNN:                h' = tanh or relu(W_ih x + b_ih + W_hh h + b_hh)

A cell is composed of tinyamp ops (``linear``, ``sigmoid``, ``tanh``, ``mul``,
``add``), so its backward and double backward come with them, and its precision
is theirs: ``linear`` is LOWER, so under autocast the gates are computed in
float16/bfloat16 as PyTorch's CUDA autocast computes ``lstm_cell``, ``gru_cell``
and cuDNN's RNN; the states are cast to the gates' dtype at the start, as those
kernels receive them (so under autocast a float16, bfloat16 or float32 state
need not have the input's dtype: PyTorch's autocast casts input and states
together). The input's projection ``W_ih x + b_ih`` of a whole sequence is one
``linear`` before the time loop; only ``W_hh h`` runs per step.
"""

from __future__ import annotations

import math
from typing import Any

from .. import dtypes as dt
from ..tensor import Tensor
from ..nn import init
from ..nn.module import Module
from ..nn.parameter import Parameter
from ..amp.autocast import is_autocast_enabled
from ..factories import empty, zeros
from ..ops.activation import relu, sigmoid, tanh
from ..ops.cast import cast
from ..ops.dropout import dropout as dropout_op
from ..ops.linalg import linear
from ..ops.shape import cat, chunk, stack, unbind

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_AUTOCAST_ELIGIBLE = (dt.float16, dt.bfloat16, dt.float32)  # what autocast casts (PyTorch: never float64)


def _lstm_step(gates: Tensor, state: tuple, w_hr: "Tensor | None") -> tuple:
    """(h', c') from gates = W_ih x + b_ih + W_hh h + b_hh and state (h, c)."""
    i, f, g, o = chunk(gates, 4, -1)
    c = sigmoid(f) * state[1] + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c)
    if w_hr is not None:
        h = linear(h, w_hr)
    return h, c


def _gru_step(x_gates: Tensor, h_gates: Tensor, h: Tensor) -> Tensor:
    """h' from x_gates = W_ih x + b_ih and h_gates = W_hh h + b_hh (r, z, n each)."""
    x_r, x_z, x_n = chunk(x_gates, 3, -1)
    h_r, h_z, h_n = chunk(h_gates, 3, -1)
    r = sigmoid(x_r + h_r)
    z = sigmoid(x_z + h_z)
    n = tanh(x_n + r * h_n)
    return (1 - z) * n + z * h


def _activation(mode: str) -> Any:
    return relu if mode == "RNN_RELU" else tanh


def _as_state(name: str, t: Tensor, like: Tensor) -> Tensor:
    """A state in the dtype of the gates it meets (a recorded cast under autocast, else itself)."""
    if t.device != like.device:
        raise RuntimeError(f"{name}: hidden state is on {t.device} but the input is on {like.device}")
    return t if t.dtype == like.dtype else cast(t, like.dtype)


class RNNBase(Module):
    """Multi-layer, optionally bidirectional recurrence over (L, N, H_in) or (N, L, H_in) with batch_first."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(f"hidden_size and num_layers must be positive, got {hidden_size} and {num_layers}")
        if proj_size < 0 or (proj_size and mode != "LSTM"):
            raise ValueError("proj_size should be a positive integer or zero to disable projections"
                             if proj_size < 0 else "proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        directions = 2 if bidirectional else 1
        real_hidden = proj_size or hidden_size
        gate_size = _GATES[mode] * hidden_size
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            for direction in range(directions):
                layer_input = input_size if layer == 0 else real_hidden * directions
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for stem, shape in shapes:
                    setattr(self, stem + suffix, Parameter(empty(*shape, dtype=dtype, device=device)))
                    self._flat_weights_names.append(stem + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def _weights(self, layer: int, direction: int) -> tuple:
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        get = lambda stem: getattr(self, stem + suffix, None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    def flatten_parameters(self) -> None:
        """Nothing to do: PyTorch packs the weights for cuDNN here; tinyamp keeps them as they are."""

    def _check(self, x: Tensor) -> None:
        name = type(self).__name__
        if x.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {x.ndim}D tensor of shape "
                             f"{list(x.shape)}")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {x.shape[-1]} (input {list(x.shape)})")
        weight_dtype = self.weight_ih_l0.dtype
        if x.dtype != weight_dtype and not is_autocast_enabled():
            raise ValueError(f"{name}: input must have the type {dt.dtype_name(weight_dtype)}, got type "
                             f"{dt.dtype_name(x.dtype)}")

    def _initial(self, hx: Any, batch: int, x: Tensor, unbatched: bool) -> list:
        """[h0] or [h0, c0], each (layers * directions, N, size), zeros when hx is None."""
        name = type(self).__name__
        directions = 2 if self.bidirectional else 1
        sizes = [self.proj_size or self.hidden_size] + ([self.hidden_size] if self.mode == "LSTM" else [])
        if hx is None:
            return [zeros(self.num_layers * directions, batch, s, dtype=x.dtype, device=x.device)
                    for s in sizes]
        # Under autocast the input and the states are cast together to the gates' dtype (_as_state), as
        # PyTorch's autocast casts input, h0 and c0: a state from an earlier autocast chunk (truncated BPTT)
        # may have another dtype than this chunk's input.
        autocast = is_autocast_enabled(x.device.type) and x.dtype in _AUTOCAST_ELIGIBLE
        states = list(hx) if self.mode == "LSTM" else [hx]
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(states) != 2):
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0) for an LSTM")
        out = []
        for state, size in zip(states, sizes):
            if unbatched:
                if state.ndim != 2:
                    raise RuntimeError(f"{name}: For unbatched 2-D input, hx and cx should also be 2-D but got "
                                       f"({state.ndim}-D) tensor")
                state = state.unsqueeze(1)
            expected = (self.num_layers * directions, batch, size)
            if tuple(state.shape) != expected:
                raise RuntimeError(f"{name}: Expected hidden size {list(expected)}, got {list(state.shape)}")
            if state.dtype != x.dtype and not (autocast and state.dtype in _AUTOCAST_ELIGIBLE):
                raise RuntimeError(f"{name}: input and hidden state must have the same dtype, got input "
                                   f"{dt.dtype_name(x.dtype)} and hidden state {dt.dtype_name(state.dtype)}"
                                   + (" (autocast casts float16, bfloat16 and float32 states, never float64)"
                                      if autocast else ""))
            out.append(state)
        return out

    def _run_direction(self, x: Tensor, layer: int, direction: int, state: list) -> tuple:
        """One layer in one direction over (L, N, H_in): the outputs (L, N, H) and the final state."""
        w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
        x_gates = linear(x, w_ih, b_ih)  # every step's input projection in one product
        state = [_as_state(type(self).__name__, s, x_gates) for s in state]
        steps = unbind(x_gates, 0)
        order = range(len(steps) - 1, -1, -1) if direction else range(len(steps))
        outputs: list = [None] * len(steps)
        for t in order:
            h_gates = linear(state[0], w_hh, b_hh)
            if self.mode == "LSTM":
                state = list(_lstm_step(steps[t] + h_gates, state, w_hr))
            elif self.mode == "GRU":
                state = [_gru_step(steps[t], h_gates, state[0])]
            else:
                state = [_activation(self.mode)(steps[t] + h_gates)]
            outputs[t] = state[0]
        return stack(outputs, 0), state

    def forward(self, input: Tensor, hx: Any = None) -> tuple:  # noqa: A002 - PyTorch's name
        self._check(input)
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if x.shape[0] == 0:
            raise RuntimeError(f"{type(self).__name__}: expected a sequence of at least one step, got input "
                               f"{list(input.shape)}")
        states = self._initial(hx, x.shape[1], x, unbatched)
        directions = 2 if self.bidirectional else 1
        finals: list = [[] for _ in states]
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                x = dropout_op(x, self.dropout, True)
            outs = []
            for direction in range(directions):
                k = layer * directions + direction
                out, last = self._run_direction(x, layer, direction, [s[k] for s in states])
                outs.append(out)
                for kept, s in zip(finals, last):
                    kept.append(s)
            x = outs[0] if directions == 1 else cat(outs, -1)
        output = x.squeeze(1) if unbatched else (x.transpose(0, 1) if self.batch_first else x)
        final = [stack(kept, 0) for kept in finals]
        if unbatched:
            final = [f.squeeze(1) for f in final]
        return (output, tuple(final)) if self.mode == "LSTM" else (output, final[0])

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            text += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


class RNN(RNNBase):
    """Elman RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (``nonlinearity='relu'``: relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype)


class LSTM(RNNBase):
    """Long short-term memory; forward(input, (h_0, c_0)) -> (output, (h_n, c_n))."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit; forward(input, h_0) -> (output, h_n)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype)


class RNNCellBase(Module):
    """One step: weight_ih (G, input), weight_hh (G, hidden), bias_ih and bias_hh (G)."""

    _mode = ""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates = _GATES[self._mode] * hidden_size
        self.weight_ih = Parameter(empty(gates, input_size, dtype=dtype, device=device))
        self.weight_hh = Parameter(empty(gates, hidden_size, dtype=dtype, device=device))
        if bias:
            self.bias_ih = Parameter(empty(gates, dtype=dtype, device=device))
            self.bias_hh = Parameter(empty(gates, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def _prepare(self, x: Tensor, states: list) -> tuple:
        """Batched input, its gates' input part, the states (zeros when None) in the gates' dtype."""
        name = type(self).__name__
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"{name}: Expected input of shape (N, {self.input_size}) or ({self.input_size},), "
                             f"got {list(x.shape)} ({dt.dtype_name(x.dtype)})")
        unbatched = x.ndim == 1
        xb = x.unsqueeze(0) if unbatched else x
        x_gates = linear(xb, self.weight_ih, self.bias_ih)
        prepared = []
        for state in states:
            if state is None:
                state = zeros(xb.shape[0], self.hidden_size, dtype=x_gates.dtype, device=x.device)
            elif unbatched:
                state = state.unsqueeze(0)
            if tuple(state.shape) != (xb.shape[0], self.hidden_size):
                raise RuntimeError(f"{name}: hidden state has shape {list(state.shape)}, expected "
                                   f"{[xb.shape[0], self.hidden_size]} for input {list(x.shape)}")
            prepared.append(_as_state(name, state, x_gates))
        return unbatched, x_gates, prepared

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        return text


class RNNCell(RNNCellBase):
    """h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (``nonlinearity='relu'``: relu)."""

    _mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: "Tensor | None" = None) -> Tensor:  # noqa: A002
        unbatched, x_gates, (h,) = self._prepare(input, [hx])
        act = relu if self.nonlinearity == "relu" else tanh
        h = act(x_gates + linear(h, self.weight_hh, self.bias_hh))
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """(h', c') = one LSTM step (gates i, f, g, o)."""

    _mode = "LSTM"

    def forward(self, input: Tensor, hx: "tuple | None" = None) -> tuple:  # noqa: A002
        states = [None, None] if hx is None else list(hx)
        unbatched, x_gates, state = self._prepare(input, states)
        h, c = _lstm_step(x_gates + linear(state[0], self.weight_hh, self.bias_hh), state, None)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """h' = one GRU step (gates r, z, n)."""

    _mode = "GRU"

    def forward(self, input: Tensor, hx: "Tensor | None" = None) -> Tensor:  # noqa: A002
        unbatched, x_gates, (h,) = self._prepare(input, [hx])
        h = _gru_step(x_gates, linear(h, self.weight_hh, self.bias_hh), h)
        return h.squeeze(0) if unbatched else h
