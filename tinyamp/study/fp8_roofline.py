"""Can fp8 be faster at these shapes? ``ta.amp.explain_fp8(model, *inputs)``: each Linear GEMM on a roofline.

For every ``nn.Linear`` a forward of ``model(*inputs)`` runs (on a copy, inside
``fp8_autocast``), its three GEMMs (fprop ``M x K @ K x N``, dgrad, wgrad) are
placed on the roofline of a card (default an H200 SXM: 1,979 TFLOP/s dense fp8,
989 bfloat16, 4.8 TB/s HBM):

- bfloat16: ``max(2MNK / peak_bf16, bytes / bandwidth)``, the bytes being the
  two 2-byte operands and the 2-byte output;
- fp8: the same with 1-byte operands at the fp8 peak, **plus the quantisation**
  of each operand the GEMM is the first to use: a memory-bound pass over the
  16-bit tensor. Per element it reads 2 bytes (current and block scaling read
  twice: once for the amax, once for the cast; delayed scaling once, its amax
  fused in the cast) and writes the row-wise and the transposed fp8 copy
  (1 + 1 byte: Hopper's fp8 GEMM takes only the TN layout, so dgrad and wgrad
  need the transposes). fprop pays for the input and the weight, dgrad for the
  output gradient, wgrad reuses them.

The verdict says which limit binds and whether fp8 wins; the figures are
ideal-rate bounds (no launch latency, no fusion beyond the amax), the kind of
estimate Transformer Engine's and torchao's docs use to explain why fp8 is
slower at small shapes. Nothing here times anything.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Any

from ..amp import recipe as recipes
from ..amp.fp8_autocast import fp8_autocast
from ..grad_mode import no_grad
from .report import Trace


@dataclass(frozen=True)
class Card:
    """Peak rates of an accelerator (dense, no sparsity)."""

    name: str
    fp8_tflops: float
    bf16_tflops: float
    hbm_tbps: float

    @property
    def ridge_fp8(self) -> float:
        """FLOP per byte above which an fp8 GEMM is compute-bound."""
        return self.fp8_tflops / self.hbm_tbps


H200 = Card("H200 SXM", 1979.0, 989.0, 4.8)


@dataclass
class GemmEstimate:
    """One GEMM of one layer on the roofline (times in microseconds)."""

    layer: str
    gemm: str                # "fprop", "dgrad", "wgrad"
    m: int
    n: int
    k: int
    bf16_us: float
    fp8_gemm_us: float
    quantize_us: float
    fp8_us: float            # GEMM + the quantisations it pays for
    intensity: float         # FLOP per byte of the fp8 GEMM
    verdict: str

    @property
    def speedup(self) -> float:
        return self.bf16_us / self.fp8_us if self.fp8_us > 0 else math.inf


@dataclass
class Fp8Explanation:
    """``print()`` it: one row per GEMM, then the totals."""

    card: Card
    recipe: str
    gemms: list[GemmEstimate]
    kept_16_bit: list[str]

    @property
    def bf16_us(self) -> float:
        return sum(g.bf16_us for g in self.gemms)

    @property
    def fp8_us(self) -> float:
        return sum(g.fp8_us for g in self.gemms)

    def to_dict(self) -> dict:
        return {"card": asdict(self.card), "recipe": self.recipe, "gemms": [asdict(g) for g in self.gemms],
                "kept_16_bit": self.kept_16_bit, "bf16_us": self.bf16_us, "fp8_us": self.fp8_us}

    def __str__(self) -> str:
        c = self.card
        lines = [f"fp8 on a {c.name} ({c.fp8_tflops:g} TFLOP/s fp8, {c.bf16_tflops:g} bf16, {c.hbm_tbps:g} TB/s; "
                 f"fp8 ridge {c.ridge_fp8:.0f} FLOP/B), {self.recipe}: ideal-rate bounds in microseconds"]
        rows = [("layer", "gemm", "M x N x K", "bf16", "fp8 gemm", "+ quantise", "fp8", "x", "verdict")]
        for g in self.gemms:
            rows.append((g.layer, g.gemm, f"{g.m} x {g.n} x {g.k}", f"{g.bf16_us:.3g}", f"{g.fp8_gemm_us:.3g}",
                         f"{g.quantize_us:.3g}", f"{g.fp8_us:.3g}", f"{g.speedup:.2f}", g.verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
        lines.append(f"total: bf16 {self.bf16_us:.3g} us, fp8 {self.fp8_us:.3g} us "
                     f"({self.bf16_us / self.fp8_us if self.fp8_us else math.inf:.2f}x)")
        if self.kept_16_bit:
            lines.append(f"kept in 16 bits by the module filter: {', '.join(self.kept_16_bit)}")
        return "\n".join(lines)


def _bound(flops: float, nbytes: float, tflops: float, card: Card) -> "tuple[float, bool]":
    """(microseconds, compute-bound?) of ``flops`` and ``nbytes`` at the card's peaks."""
    compute, memory = flops / (tflops * 1e6), nbytes / (card.hbm_tbps * 1e6)
    return max(compute, memory), compute >= memory


def estimate(layer: str, gemm: str, m: int, n: int, k: int, quantized: int, card: Card = H200,
             delayed: bool = False) -> GemmEstimate:
    """One GEMM (``quantized`` elements of 16-bit operands quantised for it) on ``card``'s roofline."""
    flops = 2.0 * m * n * k
    bf16, _ = _bound(flops, 2.0 * (m * k + k * n + m * n), card.bf16_tflops, card)
    fp8_bytes = 1.0 * (m * k + k * n) + 2.0 * m * n
    fp8_gemm, compute_bound = _bound(flops, fp8_bytes, card.fp8_tflops, card)
    per_element = (2.0 if delayed else 4.0) + 2.0  # reads (one or two), the row-wise and transposed copies
    quantize = quantized * per_element / (card.hbm_tbps * 1e6)
    total = fp8_gemm + quantize
    if total >= bf16:
        verdict = "fp8 slower: " + ("the quantisation costs more than the GEMM saves" if fp8_gemm < bf16
                                    else "memory-bound, nothing to gain")
    elif compute_bound:
        verdict = "fp8 faster: compute-bound"
    else:
        verdict = "fp8 faster: memory-bound, fewer operand bytes"
    return GemmEstimate(layer, gemm, m, n, k, bf16, fp8_gemm, quantize, total, flops / fp8_bytes, verdict)


def explain_fp8(model: Any, *inputs: Any, fp8_recipe: "recipes.Recipe | None" = None, card: Card = H200,
                module_filter_fn: Any = None) -> Fp8Explanation:
    """The roofline estimate of every Linear GEMM ``model(*inputs)`` runs (see the module docstring).

    The forward runs on a copy of ``model`` (its quantisers are not touched).
    """
    recipe = fp8_recipe if fp8_recipe is not None else recipes.Float8CurrentScaling()
    twin = copy.deepcopy(model)
    keep = None
    if module_filter_fn is not None:  # the filter judges the caller's modules: map the copy's back to them
        originals = {id(c): m for c, m in zip(twin.modules(), model.modules())}
        keep = lambda module: module_filter_fn(originals.get(id(module), module))  # noqa: E731
    with no_grad(), Trace() as t, fp8_autocast(fp8_recipe=recipe, module_filter_fn=keep):
        twin(*inputs)
    gemms, kept = [], []
    delayed = recipe.delayed()
    for op in t.ops:
        if op.name not in ("fp8linear", "linear"):
            continue
        x_shape, w_shape = op.shapes[0], op.shapes[1]
        m, k, n = math.prod(x_shape[:-1]), x_shape[-1], w_shape[0]
        layer = f"Linear({k}, {n})"
        if op.name == "linear":
            kept.append(layer)
            continue
        gemms.append(estimate(layer, "fprop", m, n, k, m * k + n * k, card, delayed))
        gemms.append(estimate(layer, "dgrad", m, k, n, m * n, card, delayed))
        gemms.append(estimate(layer, "wgrad", n, k, m, 0, card, delayed))
    return Fp8Explanation(card, type(recipe).__name__, gemms, kept)
