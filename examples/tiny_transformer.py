"""Train a 2-layer decoder-only transformer with AMP, and see where float16 would bite.

The model (token and position embeddings, two pre-norm blocks of causal
self-attention and a GELU MLP, a final layer norm and a linear head) learns a
synthetic copy task generated from a seed (``ta.data.copy_task``: ``a SEP a``;
the copy is predictable, the prefix is not). It is built as PyTorch users build
one: ``nn.LayerNorm``, ``nn.GELU`` and ``F.scaled_dot_product_attention``.
``--written-out`` trains it with attention and layer norm written out in
tinyamp ops instead (``q @ k^T``, ``masked_fill``, ``softmax``; mean,
``(x - mean) ** 2``, ``rsqrt``), so each step runs under its own autocast tag:
the variants the overflow study below uses to show where float16 overflows.
With ``--amp`` (the default) the example:

1. trains the same model from the same seed in float32 and with AMP (autocast
   to float16, ``GradScaler``) and checks that the final losses agree within
   ``LOSS_RTOL`` (1%; the reason is written beside it);
2. prints the loss-scale trajectory (scale, skipped steps) and, at the last
   step, the update swamping of every parameter (``track_swamping``);
3. finds where float16 overflows, with ``ta.amp.shadow_run`` on the trained
   model with its layer norm and attention written out (the same weights): a
   residual stream made large (as trained transformers' outlier features are)
   is safe under the default tags and overflows in the layer-norm variance once
   the FP32-tagged ops are overridden to LOWER; attention logits made large
   overflow float16 in the ``q @ k^T`` product itself. The fused ops the model
   trains with keep both in float32 inside: the same stress, nothing overflows.

    python examples/tiny_transformer.py                  # AMP and float32: about 10 s on a CPU
    python examples/tiny_transformer.py --out plots/ --trace
    python examples/tiny_transformer.py --no-amp --steps 500
    python examples/tiny_transformer.py --fp8 delayed --out plots/   # fp8 against bfloat16

With ``--fp8 {delayed,current,block,mxfp8}`` the example instead trains the
model with bfloat16 autocast, then again with its Linear GEMMs in fp8
(``ta.amp.fp8_autocast`` inside the bfloat16 region, the recipe's Transformer
Engine rules), and reports the final losses, which fp8 casts lose the most on
the last step (underflow, saturation, SQNR per layer and role) and, with
``--out``, the amax each quantiser saw at every step (``fp8_amax.png``).
``--fp8-format e4m3`` quantises the gradients in E4M3 too; ``--fp8-history``
and ``--fp8-margin`` are delayed scaling's window and margin.

The training loop is in :func:`train` below: PyTorch's AMP recipe with
``import tinyamp as ta``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import textwrap
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common, also when imported by tests
# One BLAS thread unless asked otherwise (before NumPy loads OpenBLAS): this model's products are tiny
# (544 x 32 x 96), where OpenBLAS's threads cost more than they share; on the 2-core dev VM under load
# the default run took 62 s wall and 51 s of CPU with them, 12.5 s and 8.4 s without (benchmarks/RESULTS.md).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import tinyamp as ta  # noqa: E402
import tinyamp.nn.functional as F  # noqa: E402
import _common  # noqa: E402

nn = ta.nn

DEFAULT_STEPS = 200
DEFAULT_LR = 3e-3
WINDOW = 25  # the final loss is the mean over the last WINDOW steps (one batch is noisy)
# AMP must end within LOSS_RTOL of float32's final loss (relative). Both runs
# start from the same weights and see the same batches; float16 rounds every
# matmul's inputs and output (2^-11 relative), which nudges each gradient, and
# Adam turns the nudges into weight differences that stay small because every
# update is normalised (after 200 steps the head's weights differ by 3e-4
# relative). Over seeds 0-4 the final losses differed by at most 8e-5
# relative (5e-4 at any single step); 1% leaves a wide margin for other seeds and machines, and still fails
# an AMP step that loses information (float16 weights without masters swamp most
# late updates: see the swamping table, and the loss stalls well above float32's).
LOSS_RTOL = 0.01
GROWTH_INTERVAL = 100     # GradScaler's growth interval here: PyTorch's 2000 would never grow in a short run
RESIDUAL_STRESS = 300.0   # embeddings scaled: |x - mean| ~ 300, and 300^2 > 65504
LOGIT_STRESS = 20000.0    # q . k times 20000: past 65504 in the trained model and in a fresh one


# ------------------------------------------------------------------ the model
class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * weight + bias, written out: mean, pow, rsqrt are FP32-tagged ops."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(ta.ones(dim))
        self.bias = nn.Parameter(ta.zeros(dim))
        self.eps = eps

    def forward(self, x: ta.Tensor) -> ta.Tensor:
        centered = x - x.mean(-1, keepdim=True)
        variance = (centered ** 2).mean(-1, keepdim=True)   # float16 overflows here once |x - mean| > 256
        return centered * ta.rsqrt(variance + self.eps) * self.weight + self.bias


class CausalSelfAttention(nn.Module):
    """Multi-head attention where position i sees positions 0..i."""

    def __init__(self, dim: int, heads: int, fused: bool = True) -> None:
        super().__init__()
        self.heads, self.fused = heads, fused
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.logit_scale = 1.0  # a stress knob for the overflow demonstration: q . k times this (1: off)

    def forward(self, x: ta.Tensor) -> ta.Tensor:
        batch, length, dim = x.shape
        q, k, v = (t.reshape(batch, length, self.heads, dim // self.heads).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        if self.logit_scale != 1.0:  # through q and k alike, so neither overflows on its own
            q, k = q * math.sqrt(self.logit_scale), k * math.sqrt(self.logit_scale)
        if self.fused:   # one LOWER op that keeps the scores and the softmax in float32 inside
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(dim // self.heads))  # LOWER: float16
            future = ta.triu(ta.ones(length, length, dtype=ta.bool, device=x.device), diagonal=1)
            weights = F.softmax(scores.masked_fill(future, -math.inf), dim=-1)        # FP32
            y = weights @ v                                                           # LOWER
        return self.proj(y.transpose(1, 2).reshape(batch, length, dim))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool = True) -> None:
        super().__init__()
        norm = nn.LayerNorm if fused else LayerNorm
        self.ln1, self.attn = norm(dim), CausalSelfAttention(dim, heads, fused)
        self.ln2 = norm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: ta.Tensor) -> ta.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Embeddings, two pre-norm blocks, a final layer norm and a linear head over the vocabulary."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, layers: int = 2, fused: bool = True) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(length, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, fused) for _ in range(layers)])
        self.ln_f = (nn.LayerNorm if fused else LayerNorm)(dim)
        self.head = nn.Linear(dim, vocab)
        self.residual_scale = 1.0  # a stress knob for the overflow demonstration (1: off)

    def forward(self, idx: ta.Tensor) -> ta.Tensor:
        x = self.tokens(idx) + self.positions(ta.arange(idx.shape[1], device=idx.device))
        if self.residual_scale != 1.0:
            x = x * self.residual_scale
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def loss_of(model: nn.Module, inputs: ta.Tensor, targets: ta.Tensor) -> ta.Tensor:
    """Next-token cross-entropy; the unpredictable prefix has target -100 and is ignored."""
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ------------------------------------------------------------------ training
def train(model: nn.Module, optimizer: ta.optim.Optimizer, scaler: ta.amp.GradScaler, batches: list,
          amp: bool, watch: "Callable[[int, float, ta.amp.GradScaler], None]", dtype: Any = ta.float16,
          fp8_recipe: "ta.amp.recipe.Recipe | None" = None) -> None:
    """The AMP training loop (with ``amp=False`` the region is disabled and the scaler off: float32;
    ``fp8_recipe``: the Linear GEMMs run in fp8 inside the 16-bit region)."""
    for step, (x, y) in enumerate(batches, 1):
        optimizer.zero_grad()
        if step == len(batches) and amp:
            optimizer.track_swamping(names=model.named_parameters())  # measure the last update
        with ta.amp.autocast(dtype=dtype, enabled=amp):
            with ta.amp.fp8_autocast(enabled=fp8_recipe is not None, fp8_recipe=fp8_recipe):
                loss = loss_of(model, x, y)    # matmuls in float16; softmax, norms and the loss in float32
        scaler.scale(loss).backward()      # gradients of loss * scale: small ones stay above 2^-24
        scaler.step(optimizer)             # unscale; skip the update if a gradient is inf or NaN
        scaler.update()                    # halve the scale after a skip, double it after growth_interval good steps
        watch(step, loss.item(), scaler)


def build(args: argparse.Namespace, fused: "bool | None" = None) -> nn.Module:
    """The model from ``--seed`` (``fused`` None: as ``--written-out`` says; else fused or written-out ops)."""
    ta.manual_seed(args.seed)
    fused = not args.written_out if fused is None else fused
    model = TinyTransformer(args.vocab, 2 * args.length, args.dim, args.heads, fused=fused)
    return model.to(ta.device(args.device))


def twin(model: nn.Module, args: argparse.Namespace, fused: bool) -> nn.Module:
    """``model``'s weights in a model built with fused (or written-out) layer norm and attention."""
    other = build(args, fused=fused)
    other.load_state_dict(model.state_dict())
    return other


def run(args: argparse.Namespace, batches: list, amp: bool, dtype: Any = ta.float16,
        fp8_recipe: "ta.amp.recipe.Recipe | None" = None) -> dict:
    """Train one model; returns its losses, scales, skipped steps, the amax each fp8 quantiser saw, the model."""
    model = build(args)
    optimizer = ta.optim.Adam(model.parameters(), lr=args.lr)
    # A short run: growth every 100 good steps (PyTorch's 2000 would never grow here). bfloat16 needs no scaling.
    scaler = ta.amp.GradScaler(init_scale=_common.LOSS_SCALE_INIT, growth_interval=GROWTH_INTERVAL,
                               enabled=amp and dtype == ta.float16)
    record: dict = {"losses": [], "scales": [], "skipped": [], "amax": {}}
    label = "float32" if not amp else ("AMP    " if fp8_recipe is None and dtype == ta.float16 else
                                       "fp8    " if fp8_recipe is not None else "bf16   ")
    progress = _common.Progress(len(batches), sys.stdout, max(1, len(batches) // 10), bar=args.json is None,
                                label=label)

    def watch(step: int, loss: float, scaler: ta.amp.GradScaler) -> None:
        record["losses"].append(loss)
        record["scales"].append(scaler.get_scale() if scaler.is_enabled() else 1.0)
        if scaler.is_enabled() and scaler.last_step.skipped:
            record["skipped"].append(step)
        progress.update(step, loss, record["scales"][-1] if scaler.is_enabled() else None, len(record["skipped"]))
        for name, module in model.named_modules():  # fp8: what each quantiser measured this step
            for role, quantizer in module.__dict__.get("_fp8_meta", (None, {}))[1].items():
                if quantizer.last_amax is not None:
                    record["amax"].setdefault(f"{name}.{role}", []).append(float(quantizer.last_amax))

    tracer = ta.amp.trace() if amp and args.trace else None
    if tracer is not None:  # the first step's precision trace, with what every cast lost
        with tracer:
            train(model, optimizer, scaler, batches[:1], amp, watch, dtype, fp8_recipe)
        train(model, optimizer, scaler, batches[1:], amp, lambda s, l, sc: watch(s + 1, l, sc), dtype, fp8_recipe)
    else:
        train(model, optimizer, scaler, batches, amp, watch, dtype, fp8_recipe)
    progress.close()
    record.update(model=model, optimizer=optimizer, scaler=scaler, trace=tracer)
    return record


def final_loss(losses: list) -> float:
    return float(np.mean(losses[-WINDOW:]))


# ------------------------------------------------------------------ where float16 bites
def overflow_study(model: nn.Module, args: argparse.Namespace, x: ta.Tensor, y: ta.Tensor,
                   say: Callable[..., None], scaler: "ta.amp.GradScaler | None" = None) -> dict:
    """Shadow runs of the model made to stress float16: where does it overflow, and which tag prevents it.

    The four main runs use ``model``'s weights with layer norm and attention
    written out (one op per step, each under its own tag); two more put the
    same stress on the fused ops (``nn.LayerNorm``, SDPA). ``scaler``: its
    scale seeds the AMP runs' backward (default a fresh GradScaler's 2^16).
    """
    scaler = ta.amp.GradScaler() if scaler is None else scaler
    written, fused = twin(model, args, fused=False), twin(model, args, fused=True)

    def step(lower_ops: "set[str] | None" = None, fp32_ops: "set[str] | None" = None) -> Callable:
        def forward_and_loss(m: nn.Module, x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
            with ta.amp.autocast(dtype=ta.float16, lower_ops=lower_ops, fp32_ops=fp32_ops):
                return loss_of(m, x, y)
        return forward_and_loss

    def first_bad(report: ta.amp.ShadowReport) -> str:
        row = report.first_bad_forward
        if row is None:
            return "none: every op within the tolerance"
        err = "inf" if row.forward.rms == math.inf else f"{row.forward.rms:.2g}"
        return f"#{row.index} {row.name} ({row.tag}, {'/'.join(row.inputs)} -> {'/'.join(row.outputs)}), error {err}"

    def shadow(forward_and_loss: Callable, m: nn.Module) -> ta.amp.ShadowReport:
        with np.errstate(over="ignore", invalid="ignore"):  # the overflows are the point
            return ta.amp.shadow_run(forward_and_loss, m, x, y, scaler=scaler)

    def stressed(m: nn.Module, residual: float = 1.0, logits: float = 1.0) -> nn.Module:
        m = copy.deepcopy(m)
        m.residual_scale = residual
        for block in m.blocks:
            block.attn.logit_scale = logits
        return m

    def fp32_tagged(report: ta.amp.ShadowReport) -> list:
        return sorted({r.name for r in report.ops if r.tag == "FP32"})

    results = {}
    big_residual = stressed(written, residual=RESIDUAL_STRESS)
    default = shadow(step(), big_residual)
    lowered = shadow(step(lower_ops=set(fp32_tagged(default))), big_residual)
    say(f"\nwhere float16 overflows (ta.amp.shadow_run against a float32 twin, tolerance {default.tolerance:g}), on "
        f"the trained weights with layer norm and attention written out in tinyamp ops:")
    say(f"  residual stream x{RESIDUAL_STRESS:g} (|x - mean| ~ {RESIDUAL_STRESS:g}; float16 squares overflow "
        f"past 256):")
    say(f"    default tags: first bad op {first_bad(default)}")
    say(f"    FP32-tagged ops ({', '.join(fp32_tagged(default))}) overridden to LOWER: first bad op {first_bad(lowered)}")
    results["residual_default"], results["residual_lowered"] = _summary(default), _summary(lowered)

    big_logits = stressed(written, logits=LOGIT_STRESS)
    scores = shadow(step(), big_logits)
    fixed = shadow(step(fp32_ops={"matmul"}), big_logits)
    say(f"  attention logits x{LOGIT_STRESS:g} (as sharp attention grows them; q @ k^T passes 65504 before the "
        f"1/sqrt(d) scaling):")
    say(f"    default tags: first bad op {first_bad(scores)}")
    say(f"    matmul overridden to FP32 (PyTorch users' fix): first bad op {first_bad(fixed)}")
    results["logits_default"], results["logits_matmul_fp32"] = _summary(scores), _summary(fixed)

    fused_residual = stressed(fused, residual=RESIDUAL_STRESS)
    fused_tags = fp32_tagged(shadow(step(), fused_residual))
    fused_lowered = shadow(step(lower_ops=set(fused_tags)), fused_residual)
    fused_scores = shadow(step(), stressed(fused, logits=LOGIT_STRESS))
    say("  the same weights with the fused ops the model trains with (nn.LayerNorm, F.scaled_dot_product_attention):")
    say(f"    residual stream x{RESIDUAL_STRESS:g}, FP32-tagged ops ({', '.join(fused_tags)}) overridden to LOWER: "
        f"first bad op {first_bad(fused_lowered)} (layer_norm computes mean and variance in float32 inside, "
        f"whatever its tag)")
    say(f"    attention logits x{LOGIT_STRESS:g}, default tags: first bad op {first_bad(fused_scores)} "
        f"(SDPA is LOWER but keeps the scores and the softmax in float32 inside: q @ k^T never exists in float16)")
    results["fused_residual_lowered"], results["fused_logits_default"] = _summary(fused_lowered), _summary(fused_scores)
    say("  softmax itself does not overflow: it subtracts the row maximum first, so exp sees values <= 0; "
        "what float16 costs there is resolution (probabilities below 2^-24 flush to zero)")
    return results


def _summary(report: ta.amp.ShadowReport) -> dict:
    row = report.first_bad_forward
    return {"first_bad_forward": None if row is None else {"index": row.index, "name": row.name, "tag": row.tag},
            "worst_rms": report.worst()}


# ------------------------------------------------------------------ where fp8 hurts
def fp8_recipe(args: argparse.Namespace) -> "ta.amp.recipe.Recipe":
    """The recipe ``--fp8`` names, with ``--fp8-format`` (default: the recipe's own), history and margin."""
    r = ta.amp.recipe
    fmt = {} if args.fp8_format is None else {"fp8_format": r.Format[args.fp8_format.upper()]}
    if args.fp8 == "delayed":
        return r.DelayedScaling(amax_history_len=args.fp8_history, margin=args.fp8_margin, **fmt)
    return {"current": r.Float8CurrentScaling, "block": r.Float8BlockScaling,
            "mxfp8": r.MXFP8BlockScaling}[args.fp8](**fmt)


def fp8_study(args: argparse.Namespace, batches: list, say: Callable[..., None]) -> dict:
    """bfloat16 against fp8 (the same seed and batches): final losses, the worst fp8 casts, amax histories."""
    recipe = fp8_recipe(args)
    bf16 = run(args, batches, amp=True, dtype=ta.bfloat16)
    fp8 = run(args, batches, amp=True, dtype=ta.bfloat16, fp8_recipe=recipe)
    base, got = final_loss(bf16["losses"]), final_loss(fp8["losses"])
    gap = (got - base) / base
    say(f"bfloat16: loss {bf16['losses'][0]:.3f} -> {base:.4f} (mean of the last {WINDOW} steps)")
    say(f"fp8 ({recipe!r}): loss {fp8['losses'][0]:.3f} -> {got:.4f}; {gap:+.2%} against bfloat16")
    # Where fp8 hurts: one more step on the last batch under a trace, on a copy of the trained fp8 model.
    model = copy.deepcopy(fp8["model"])
    x, y = batches[-1]
    with ta.amp.trace() as t:
        with ta.amp.autocast(dtype=ta.bfloat16):
            with ta.amp.fp8_autocast(fp8_recipe=recipe):
                loss = loss_of(model, x, y)
        loss.backward()
    casts = [c for c in t.fp8_casts if c.stats is not None]
    worst = sorted(casts, key=lambda c: (-c.stats.underflow_pct, -c.stats.saturated_pct, c.stats.sqnr_db))[:6]
    say("\nwhere fp8 loses most on the last step (->0: values that became zero; sat: clipped; SQNR in dB):")
    rows = [("phase", "layer", "quantizer", "->0 %", "sat %", "SQNR")]
    rows += [(c.phase, c.layer, c.quantizer, f"{c.stats.underflow_pct:.3g}", f"{c.stats.saturated_pct:.3g}",
              f"{c.stats.sqnr_db:.1f}") for c in worst]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)))
    summary = {"bf16_loss": base, "fp8_loss": got, "fp8_gap": gap, "fp8_recipe": repr(recipe),
               "fp8_worst_casts": [{"phase": c.phase, "layer": c.layer, "quantizer": c.quantizer,
                                    "underflow_pct": c.stats.underflow_pct, "saturated_pct": c.stats.saturated_pct,
                                    "sqnr_db": c.stats.sqnr_db} for c in worst],
               "fp8_underflow_pct_mean": float(np.mean([c.stats.underflow_pct for c in casts])) if casts else 0.0}
    if args.out:
        summary["plot"] = write_amax_plot(args.out, fp8["amax"], recipe, say)
    return summary


def save_figure(plt: Any, fig: Any, out: str, name: str, say: Callable[..., None], note: str = "") -> str:
    """Lay ``fig`` out, write it as ``out/name``, close it, say where; the path."""
    fig.tight_layout()
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    say(f"plot: {path}" + (f" {note}" if note else ""))
    return path


def write_amax_plot(out: str, amax: dict, recipe: Any, say: Callable[..., None]) -> "str | None":
    """fp8_amax.png: the amax each quantiser measured at every step (what delayed scaling's history holds)."""
    try:
        plt = ta.amp.grad_stats.require_matplotlib()
    except ImportError as exc:
        say(f"no plot written: {exc}")
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharex=True)
    for ax, role in zip(axes, ("input", "weight", "grad_output")):
        for name, values in amax.items():
            if name.endswith("." + role):
                ax.plot(np.arange(1, len(values) + 1), values, linewidth=0.8, label=name[:-len(role) - 1])
        ax.set(xlabel="step", ylabel="amax", yscale="log", title=f"{role} amax per step")
        if ax.lines:
            ax.legend(fontsize=6)
    if not amax:  # block recipes scale each block: no per-tensor amax to draw
        fig.text(0.5, 0.5, f"{type(recipe).__name__} keeps block scales, no per-tensor amax", ha="center")
    fig.suptitle(f"amax histories, {type(recipe).__name__}")
    return save_figure(plt, fig, out, "fp8_amax.png", say)


# ------------------------------------------------------------------ flags, plots, main
def build_parser() -> argparse.ArgumentParser:
    p = _common.make_parser(os.path.basename(__file__), __doc__.split("\n\n")[0])
    p.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True,
                   help="train with AMP and in float32 and compare; --no-amp trains in float32 only")
    p.add_argument("--steps", type=_common.positive_int, default=DEFAULT_STEPS)
    p.add_argument("--batch-size", type=_common.positive_int, default=32)
    p.add_argument("--lr", type=_common.positive_float, default=DEFAULT_LR, help="Adam's learning rate")
    p.add_argument("--length", type=_common.positive_int, default=8, help="tokens to copy (sequence 2 * length)")
    p.add_argument("--vocab", type=_common.positive_int, default=16, help="vocabulary, separator included (>= 3)")
    p.add_argument("--dim", type=_common.positive_int, default=32, help="model width")
    p.add_argument("--heads", type=_common.positive_int, default=2, help="attention heads (must divide --dim)")
    p.add_argument("--written-out", action="store_true",
                   help="train with attention and layer norm written out in tinyamp ops (q @ k^T, softmax; mean, "
                        "pow, rsqrt) instead of F.scaled_dot_product_attention and nn.LayerNorm")
    p.add_argument("--seed", type=_common.non_negative_int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", metavar="DIR", default=None, help="write amp_study.png there (with --no-amp: loss.png, float32's loss)")
    p.add_argument("--trace", action="store_true", help="print the precision trace of the first AMP step")
    p.add_argument("--json", metavar="PATH", default=None, help="write the JSON summary to this file (progress as plain lines)")
    p.add_argument("--fp8", choices=sorted(ta.amp.recipe.RECIPES), default=None,
                   help="train bfloat16 and fp8 (this recipe on the Linear GEMMs) and compare them")
    p.add_argument("--fp8-format", choices=["hybrid", "e4m3"], default=None,
                   help="HYBRID (E5M2 gradients) or E4M3 everywhere (default: the recipe's own)")
    p.add_argument("--fp8-history", type=_common.positive_int, default=16, help="delayed scaling's amax_history_len")
    p.add_argument("--fp8-margin", type=_common.non_negative_int, default=0, help="delayed scaling's margin")
    return p


def parse_args(argv: "list[str] | None") -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.vocab < 3:
        parser.error(f"--vocab: must be at least 3 (two tokens and the separator), got {args.vocab}")
    if args.dim % args.heads:
        parser.error(f"--heads {args.heads} must divide --dim {args.dim}")
    if args.device == "cuda" and not ta.cuda.is_available():
        parser.error("--device cuda: no usable CUDA GPU (install CuPy with a driver, or use --device cpu)")
    _common.check_output_flags(parser, args)
    return args


def main(argv: "list[str] | None" = None) -> dict:
    """Parse ``argv``, train, print the study; return the JSON summary."""
    args = parse_args(argv)
    say = print
    inputs, targets = ta.data.copy_task(args.steps * args.batch_size, args.length, args.vocab, seed=args.seed)
    device = ta.device(args.device)
    batches = [(ta.tensor(inputs[i:i + args.batch_size], device=device),
                ta.tensor(targets[i:i + args.batch_size], device=device))
               for i in range(0, len(inputs), args.batch_size)]
    say(f"tinyamp tiny transformer | copy task: {args.length} tokens of {args.vocab - 1}, a separator, the copy | "
        f"2 layers, width {args.dim}, {args.heads} heads, "
        f"{'written-out attention and layer norm' if args.written_out else 'SDPA, nn.LayerNorm, nn.GELU'} | "
        f"Adam lr {args.lr:g}, batch {args.batch_size}, {args.steps} steps | device {device}")
    if _common.device_note(device):
        say(_common.device_note(device))
    if args.fp8:
        summary = {"steps": args.steps, "config": vars(args), **fp8_study(args, batches, say)}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=2, default=str)
        return summary
    fp32 = run(args, batches, amp=False)
    summary: dict = {"steps": args.steps, "float32_loss": final_loss(fp32["losses"]),
                     "first_loss": fp32["losses"][0], "config": vars(args)}
    say(f"float32: loss {fp32['losses'][0]:.3f} -> {summary['float32_loss']:.4f} (mean of the last {WINDOW} steps)")
    if args.amp:
        amp = run(args, batches, amp=True)
        if amp["trace"] is not None:
            say(amp["trace"])
        gap = abs(final_loss(amp["losses"]) - summary["float32_loss"])
        tolerance = LOSS_RTOL * summary["float32_loss"]
        within = gap <= tolerance
        summary.update(amp_loss=final_loss(amp["losses"]), loss_gap=gap, loss_tolerance=tolerance,
                       amp_matches_float32=within, final_scale=amp["scales"][-1], skipped_at=amp["skipped"],
                       scales=amp["scales"])
        say(f"AMP:     loss {amp['losses'][0]:.3f} -> {summary['amp_loss']:.4f}; |AMP - float32| = {gap:.2e} "
            f"{'<=' if within else '>'} {LOSS_RTOL:.0%} of float32's loss ({tolerance:.2e}): "
            f"{'AMP matches float32' if within else 'AMP does NOT match float32'} (float16 rounds each matmul by "
            f"2^-11; Adam's normalised updates keep the two runs' weights close)")
        say(f"loss scale: {amp['scales'][0]:g} after step 1 -> {amp['scales'][-1]:g}; skipped steps: "
            f"{len(amp['skipped'])}" + (f" (at {', '.join(map(str, amp['skipped'][:10]))})" if amp["skipped"] else "")
            + f" ({_common.scale_finding(amp['scales'], GROWTH_INTERVAL)})")
        report = amp["optimizer"].swamping()
        say(report)
        summary["swamping"] = report.to_dict()
        x, y = batches[-1]
        summary["overflow"] = overflow_study(amp["model"], args, x, y, say, amp["scaler"])
        if args.out:
            summary["plot"] = write_plot(args.out, fp32["losses"], amp, report, say)
    elif args.out:
        summary["plot"] = write_loss_plot(args.out, fp32["losses"], say)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2, default=str)
        say(f"summary: {args.json}")
    return summary


def write_loss_plot(out: str, losses: list, say: Callable[..., None]) -> "str | None":
    """loss.png: float32's loss alone (--no-amp: no AMP run to compare, no scale, no swamping)."""
    try:
        plt = ta.amp.grad_stats.require_matplotlib()
    except ImportError as exc:
        say(f"no plot written: {exc}")
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(1, len(losses) + 1), losses, linewidth=1)
    ax.set(xlabel="step", ylabel="loss", yscale="log",
           title=f"copy task, float32: loss {losses[0]:.3g} -> {final_loss(losses):.3g} (mean of the last {WINDOW})")
    return save_figure(plt, fig, out, "loss.png", say,
                       "(float32's loss only: amp_study.png compares AMP with float32, which --no-amp skips)")


def write_plot(out: str, fp32_losses: list, amp: dict, report: Any, say: Callable[..., None]) -> "str | None":
    """amp_study.png: the two loss curves, the loss-scale trajectory, and the last step's swamping."""
    try:
        plt = ta.amp.grad_stats.require_matplotlib()
    except ImportError as exc:
        say(f"no plot written: {exc}")
        return None
    steps = np.arange(1, len(fp32_losses) + 1)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    axes[0].plot(steps, fp32_losses, label="float32", linewidth=1)
    axes[0].plot(steps, amp["losses"], label="AMP (float16)", linewidth=1, alpha=0.8)
    axes[0].set(xlabel="step", ylabel="loss", yscale="log")
    axes[0].set_title(f"copy task: AMP {final_loss(amp['losses']):.4f}, float32 {final_loss(fp32_losses):.4f}\n"
                      f"(mean of the last {WINDOW} steps)", fontsize=9)
    axes[0].legend()
    axes[1].step(steps, amp["scales"], where="post")
    if amp["skipped"]:
        axes[1].plot(amp["skipped"], [amp["scales"][s - 1] for s in amp["skipped"]], "rx", label="skipped step")
        axes[1].legend()
    axes[1].set(xlabel="step", ylabel="loss scale", yscale="log")
    axes[1].set_title("GradScaler's scale: " + textwrap.fill(_common.scale_finding(amp["scales"], GROWTH_INTERVAL), 60),
                      fontsize=9)
    rows = [r for r in report.rows if r.kept_fp32]
    positions = np.arange(len(rows))
    axes[2].barh(positions, [r.survived_fraction for r in rows], color="tab:blue", label="kept by float32 (master) weights")
    axes[2].barh(positions, [r.vanished_fraction for r in rows], color="tab:red", label="lost by float16 weights")
    axes[2].set_yticks(positions, [r.name for r in rows], fontsize=6)
    axes[2].invert_yaxis()
    totals = report.totals()
    axes[2].set(xlabel="fraction of the parameter's elements")
    axes[2].set_title(f"last update: {totals['vanished_fp16']} of {totals['kept_fp32']} update elements "
                      f"({totals['vanished_fp16'] / max(totals['kept_fp32'], 1):.0%})\nwould vanish on float16 "
                      f"weights; float32 master weights keep them", fontsize=9)
    axes[2].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return save_figure(plt, fig, out, "amp_study.png", say)


if __name__ == "__main__":
    main()
