"""The transformer kernels' cases compared with PyTorch (issue 28): one definition run by both libraries.

``make_kernel_references.py`` runs each with torch and stores the answers; tests/kernels/
test_kernels_vs_torch.py runs it with tinyamp. ``lib`` is the torch or tinyamp module; ``t`` maps
input names to tensors of one format (float64, float32 or bfloat16; integer inputs int64).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np


class Case(NamedTuple):
    inputs: dict  # name -> (shape, low, high), or (shape, "int", high) for int64 draws in [0, high)
    call: Callable[[Any, dict], Any]  # (lib, tensors) -> the output tensor
    grads: tuple = ()  # the inputs whose gradient (of sum(out * cot)) is recorded
    seed: int = 0


def _sdpa(lib: Any, t: dict) -> Any:
    return lib.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)


def _layer_norm(lib: Any, t: dict) -> Any:
    return lib.nn.functional.layer_norm(t["x"], (t["x"].shape[-1],), t["w"], t["b"], 1e-5)


CASES = {
    "erf": Case({"x": ((1500,), -6, 6)}, lambda lib, t: lib.erf(t["x"]), ("x",)),
    "gelu": Case({"x": ((1500,), -10, 10)}, lambda lib, t: lib.nn.functional.gelu(t["x"]), ("x",)),
    "gelu_tanh": Case({"x": ((1500,), -10, 10)}, lambda lib, t: lib.nn.functional.gelu(t["x"], approximate="tanh"),
                      ("x",)),
    "layer_norm": Case({"x": ((4, 6, 96), -3, 5), "w": ((96,), -2, 2), "b": ((96,), -1, 1)}, _layer_norm,
                       ("x", "w", "b")),
    "softmax": Case({"x": ((4, 6, 100), -8, 8)}, lambda lib, t: lib.nn.functional.softmax(t["x"], dim=-1), ("x",)),
    "log_softmax": Case({"x": ((4, 6, 100), -8, 8)}, lambda lib, t: lib.nn.functional.log_softmax(t["x"], dim=-1),
                        ("x",)),
    "sdpa_causal": Case({"q": ((2, 2, 40, 16), -1, 1), "k": ((2, 2, 40, 16), -1, 1), "v": ((2, 2, 40, 16), -1, 1)},
                        _sdpa, ("q", "k", "v")),
    "embedding": Case({"idx": ((6, 50), "int", 20), "w": ((20, 24), -1, 1)},
                      lambda lib, t: lib.nn.functional.embedding(t["idx"], t["w"]), ("w",)),
}


def output_shape(case: Case, inputs: dict) -> tuple:
    if "idx" in inputs:
        return inputs["idx"].shape + (inputs["w"].shape[1],)
    return next(iter(inputs.values())).shape


def to_bfloat16_values(a: np.ndarray) -> np.ndarray:
    """float64 values rounded to bfloat16 (nearest even, through the bits): exact in every format compared."""
    bits = a.astype(np.float32).view(np.uint32)  # float64 -> float32 first: the draws are far from ties
    bits = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def draw(case: Case) -> tuple:
    """(inputs, the output's cotangent) from the case's seed: floats drawn uniformly and rounded to bfloat16
    values (so float64, float32 and bfloat16 runs see the same numbers), integers as int64."""
    rng = np.random.default_rng(case.seed)
    inputs = {}
    for name, (shape, low, high) in case.inputs.items():
        inputs[name] = rng.integers(0, high, shape) if low == "int" else to_bfloat16_values(rng.uniform(low, high, shape))
    return inputs, to_bfloat16_values(rng.uniform(-1, 1, output_shape(case, inputs)))
