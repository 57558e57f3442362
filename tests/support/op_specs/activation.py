"""Op-spec rows for the activation family (tinyamp/ops/activation.py)."""

from __future__ import annotations

import math

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

# math.erf is correctly rounded to within an ulp; tinyamp's erf is written independently.
_erf = np.vectorize(math.erf)
_K, _C = math.sqrt(2 / math.pi), 0.044715


def _softplus(x: np.ndarray, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    return np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta)


SPECS = [
    OpSpec("relu", ta.relu, lambda x: np.maximum(x, 0), [Arg((3, 4), away_from=(0.0,))]),
    OpSpec("relu", lambda x: x.relu(), lambda x: np.maximum(x, 0), [Arg((2, 3, 4), away_from=(0.0,))],
           id="relu_method"),
    OpSpec("leaky_relu", lambda x: ta.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x),
           [Arg((3, 4), away_from=(0.0,))]),
    OpSpec("leaky_relu", ta.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x),
           [Arg((3, 4), away_from=(0.0,))], id="leaky_relu_default"),
    OpSpec("leaky_relu", lambda x: ta.leaky_relu(x, -0.5), lambda x: np.where(x > 0, x, -0.5 * x),
           [Arg((3, 4), away_from=(0.0,))], id="leaky_relu_negative_slope"),
    OpSpec("erf", ta.erf, _erf, [Arg((4, 5), -3.5, 3.5)]),
    OpSpec("erf", lambda x: x.erf(), _erf, [Arg((20,), -0.3, 0.3)], id="erf_small"),
    OpSpec("gelu", ta.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), [Arg((4, 5), -4.0, 4.0)]),
    OpSpec("gelu", lambda x: ta.gelu(x, approximate="tanh"),
           lambda x: 0.5 * x * (1 + np.tanh(_K * (x + _C * x ** 3))), [Arg((4, 5), -4.0, 4.0)],
           id="gelu_tanh"),
    OpSpec("tanh", lambda x: x.tanh(), np.tanh, [Arg((3, 4), -3.0, 3.0)]),
    OpSpec("sigmoid", ta.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [Arg((3, 4), -6.0, 6.0)]),
    OpSpec("softplus", ta.softplus, _softplus, [Arg((3, 4), -4.0, 4.0)]),
    # beta x crosses the threshold at x = 0.5: keep away from that jump
    OpSpec("softplus", lambda x: ta.softplus(x, beta=2.0, threshold=1.0),
           lambda x: _softplus(x, 2.0, 1.0), [Arg((3, 4), -2.0, 2.0, away_from=(0.5,))],
           id="softplus_threshold"),
    # silu = x sigmoid(x); elu (kink at 0 for alpha != 1)
    OpSpec("silu", ta.nn.functional.silu, lambda x: x / (1 + np.exp(-x)), [Arg((3, 4), -4.0, 4.0)]),
    OpSpec("elu", lambda x: ta.nn.functional.elu(x, alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x)),
           [Arg((3, 4), -3.0, 3.0, away_from=(0.0,))]),
]
