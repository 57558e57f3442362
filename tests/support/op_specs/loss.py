"""Op-spec rows for softmax/log_softmax/logsumexp (ops/softmax.py) and the losses
(ops/loss.py, ops/loss_binary.py).

The references are written here with loops over samples and the textbook
formulas, independently of the fused implementations.
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

CLASS_WEIGHT = np.array([0.5, 2.0, 1.0, 1.5, 0.25])  # 5 classes
POS_WEIGHT = np.array([0.5, 1.0, 3.0, 2.0])          # 4 outputs of a multi-label head
SAMPLE_WEIGHT = np.array([[1.0], [0.5], [2.0]])      # broadcast over those 4 outputs


def _const(values: np.ndarray, like: ta.Tensor) -> ta.Tensor:
    """A constant in the input's dtype and device (weights must match the input's dtype)."""
    return ta.tensor(values, dtype=like.dtype, device=like.device)


# ---------------------------------------------------------------- references
def ref_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_logsumexp(x: np.ndarray, axis: object, keepdims: bool = False) -> np.ndarray:
    return np.log(np.exp(x).sum(axis=axis, keepdims=keepdims))  # inputs are small: no shift needed


def ref_class_loss(logp: np.ndarray, target: np.ndarray, weight: "np.ndarray | None" = None,
                   ignore_index: int = -100, reduction: str = "mean", smoothing: float = 0.0) -> np.ndarray:
    """PyTorch's nll/cross-entropy definition, one sample at a time; logp has classes on axis 1 (or 0 for 1-D)."""
    axis = 0 if logp.ndim == 1 else 1
    rows = np.moveaxis(logp, axis, -1)
    classes = rows.shape[-1]
    w = np.ones(classes) if weight is None else weight
    losses = np.zeros(target.shape)
    total_weight = 0.0
    for index in np.ndindex(*target.shape):
        t = int(target[index])
        if t == ignore_index:
            continue
        row = rows[index]
        nll = -w[t] * row[t]
        smooth = -sum(w[c] * row[c] for c in range(classes))
        losses[index] = (1 - smoothing) * nll + smoothing / classes * smooth
        total_weight += w[t]
    if reduction == "none":
        return losses
    if reduction == "sum":
        return np.asarray(losses.sum())
    return np.asarray(losses.sum() / total_weight)


def ref_cross_entropy(x: np.ndarray, target: np.ndarray, **kwargs: object) -> np.ndarray:
    axis = 0 if x.ndim == 1 else 1
    return ref_class_loss(np.log(ref_softmax(x, axis)), target, **kwargs)


def ref_reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    return {"none": loss, "sum": np.asarray(loss.sum()), "mean": np.asarray(loss.mean())}[reduction]


def ref_huber(x: np.ndarray, t: np.ndarray, delta: float = 1.0, reduction: str = "mean") -> np.ndarray:
    d = np.abs(x - t)
    return ref_reduce(np.where(d < delta, 0.5 * d ** 2, delta * (d - 0.5 * delta)), reduction)


def ref_smooth_l1(x: np.ndarray, t: np.ndarray, beta: float = 1.0, reduction: str = "mean") -> np.ndarray:
    d = np.abs(x - t)
    loss = d if beta == 0 else np.where(d < beta, 0.5 * d ** 2 / beta, d - 0.5 * beta)
    return ref_reduce(loss, reduction)


def ref_bce(x: np.ndarray, t: np.ndarray, weight: "np.ndarray | None" = None, reduction: str = "mean") -> np.ndarray:
    loss = -(t * np.log(x) + (1 - t) * np.log(1 - x))
    return ref_reduce(loss if weight is None else loss * weight, reduction)


def ref_bce_logits(x: np.ndarray, t: np.ndarray, weight: "np.ndarray | None" = None,
                   pos_weight: "np.ndarray | None" = None, reduction: str = "mean") -> np.ndarray:
    p = 1 / (1 + np.exp(-x))
    pw = 1.0 if pos_weight is None else pos_weight
    loss = -(pw * t * np.log(p) + (1 - t) * np.log(1 - p))
    return ref_reduce(loss if weight is None else loss * weight, reduction)


# ---------------------------------------------------------------------- rows
def _ce_rows() -> list[OpSpec]:
    rows = []
    for reduction in ("mean", "sum", "none"):
        rows.append(OpSpec(
            "cross_entropy", lambda x, t, r=reduction: ta.cross_entropy(x, t, reduction=r),
            lambda x, t, r=reduction: ref_cross_entropy(x, t, reduction=r),
            [Arg((6, 5), -2, 2), Arg((6,), 0, 5, kind="int")], id=f"cross_entropy_{reduction}"))
    rows += [
        OpSpec("cross_entropy",
               lambda x, t: ta.cross_entropy(x, t, weight=_const(CLASS_WEIGHT, x), ignore_index=2),
               lambda x, t: ref_cross_entropy(x, t, weight=CLASS_WEIGHT, ignore_index=2),
               [Arg((8, 5), -2, 2), Arg((8,), 0, 5, kind="int")], seed=3, id="cross_entropy_weight_ignore"),
        OpSpec("cross_entropy", lambda x, t: ta.cross_entropy(x, t, label_smoothing=0.2),
               lambda x, t: ref_cross_entropy(x, t, smoothing=0.2),
               [Arg((6, 5), -2, 2), Arg((6,), 0, 5, kind="int")], id="cross_entropy_smoothing"),
        OpSpec("cross_entropy",
               lambda x, t: ta.cross_entropy(x, t, weight=_const(CLASS_WEIGHT, x), ignore_index=1,
                                             label_smoothing=0.1, reduction="none"),
               lambda x, t: ref_cross_entropy(x, t, weight=CLASS_WEIGHT, ignore_index=1, smoothing=0.1,
                                              reduction="none"),
               [Arg((7, 5), -2, 2), Arg((7,), 0, 5, kind="int")], seed=1, id="cross_entropy_all_options"),
        OpSpec("cross_entropy", lambda x, t: ta.cross_entropy(x, t, label_smoothing=0.05),
               lambda x, t: ref_cross_entropy(x, t, smoothing=0.05),
               [Arg((2, 5, 3, 2), -2, 2), Arg((2, 3, 2), 0, 5, kind="int")], id="cross_entropy_spatial"),
        OpSpec("cross_entropy", lambda x, t: ta.cross_entropy(x, t), ref_cross_entropy,
               [Arg((5,), -2, 2), Arg((), 0, 5, kind="int")], id="cross_entropy_unbatched"),
    ]
    return rows


SPECS = [
    OpSpec("softmax", lambda x: ta.softmax(x, 1), lambda x: ref_softmax(x, 1), [Arg((3, 5), -3, 3)]),
    OpSpec("softmax", lambda x: x.softmax(0), lambda x: ref_softmax(x, 0), [Arg((4, 2), -3, 3)],
           id="softmax_dim0"),
    OpSpec("log_softmax", lambda x: ta.log_softmax(x, -1), lambda x: np.log(ref_softmax(x, -1)),
           [Arg((2, 3, 4), -3, 3)]),
    OpSpec("logsumexp", lambda x: ta.logsumexp(x, 1), lambda x: ref_logsumexp(x, 1), [Arg((3, 4), -2, 2)]),
    OpSpec("logsumexp", lambda x: x.logsumexp((0, 2), keepdim=True),
           lambda x: ref_logsumexp(x, (0, 2), keepdims=True), [Arg((2, 3, 4), -2, 2)],
           id="logsumexp_dims_keepdim"),
    *_ce_rows(),
    OpSpec("nll_loss", lambda x, t: ta.nll_loss(x, t), lambda x, t: ref_class_loss(x, t),
           [Arg((6, 4), -3, 0), Arg((6,), 0, 4, kind="int")]),
    OpSpec("nll_loss",
           lambda x, t: ta.nll_loss(x, t, weight=_const(CLASS_WEIGHT, x), ignore_index=0, reduction="sum"),
           lambda x, t: ref_class_loss(x, t, weight=CLASS_WEIGHT, ignore_index=0, reduction="sum"),
           [Arg((8, 5), -3, 0), Arg((8,), 0, 5, kind="int")], id="nll_loss_weight_ignore_sum"),
    OpSpec("nll_loss",
           lambda x, t: ta.nll_loss(x, t, weight=_const(CLASS_WEIGHT, x), reduction="none"),
           lambda x, t: ref_class_loss(x, t, weight=CLASS_WEIGHT, reduction="none"),
           [Arg((2, 5, 3), -3, 0), Arg((2, 3), 0, 5, kind="int")], id="nll_loss_spatial_none"),
    *[OpSpec("mse_loss", lambda x, t, r=r: ta.mse_loss(x, t, reduction=r),
             lambda x, t, r=r: ref_reduce((x - t) ** 2, r), [Arg((3, 4)), Arg((3, 4))], id=f"mse_loss_{r}")
      for r in ("mean", "sum", "none")],
    *[OpSpec("l1_loss", lambda x, t, r=r: ta.l1_loss(x, t, reduction=r),
             lambda x, t, r=r: ref_reduce(np.abs(x - t), r), [Arg((3, 4)), Arg((3, 4), 2, 3)],
             id=f"l1_loss_{r}")  # target in [2, 3), input in [-1, 1): never at the kink
      for r in ("mean", "sum", "none")],
    # Huber / smooth L1: the input stays 0.05 from the kinks at |d| = delta (beta), where the second
    # derivative jumps; rows with a target argument sit wholly in one region so both get gradients.
    *[OpSpec("huber_loss", lambda x, r=r: ta.huber_loss(x, ta.zeros_like(x), reduction=r, delta=0.7),
             lambda x, r=r: ref_huber(x, np.zeros_like(x), 0.7, r), [Arg((3, 4), -2, 2, away_from=(-0.7, 0.7))],
             id=f"huber_loss_{r}")
      for r in ("mean", "sum", "none")],
    OpSpec("huber_loss", lambda x, t: ta.huber_loss(x, t), lambda x, t: ref_huber(x, t),
           [Arg((3, 4), -0.4, 0.4), Arg((3, 4), -0.4, 0.4)], id="huber_loss_quadratic_target"),
    OpSpec("huber_loss", lambda x, t: ta.huber_loss(x, t, reduction="sum", delta=0.5),
           lambda x, t: ref_huber(x, t, 0.5, "sum"), [Arg((3, 4)), Arg((3, 4), 2, 3)], id="huber_loss_linear_target"),
    *[OpSpec("smooth_l1_loss", lambda x, r=r: ta.smooth_l1_loss(x, ta.zeros_like(x), reduction=r, beta=0.5),
             lambda x, r=r: ref_smooth_l1(x, np.zeros_like(x), 0.5, r),
             [Arg((3, 4), -2, 2, away_from=(-0.5, 0.5))], id=f"smooth_l1_loss_{r}")
      for r in ("mean", "sum", "none")],
    OpSpec("smooth_l1_loss", lambda x, t: ta.smooth_l1_loss(x, t, beta=2.0), lambda x, t: ref_smooth_l1(x, t, 2.0),
           [Arg((3, 4)), Arg((3, 4))], id="smooth_l1_loss_quadratic_target"),
    OpSpec("smooth_l1_loss", lambda x, t: ta.smooth_l1_loss(x, t, beta=0.0), lambda x, t: ref_smooth_l1(x, t, 0.0),
           [Arg((3, 4)), Arg((3, 4), 2, 3)], id="smooth_l1_loss_beta0_is_l1"),
    *[OpSpec("binary_cross_entropy", lambda x, t, r=r: ta.binary_cross_entropy(x, t, reduction=r),
             lambda x, t, r=r: ref_bce(x, t, reduction=r), [Arg((3, 4), 0.05, 0.95), Arg((3, 4), 0, 1)],
             id=f"binary_cross_entropy_{r}")
      for r in ("mean", "sum", "none")],
    OpSpec("binary_cross_entropy",
           lambda x, t: ta.binary_cross_entropy(x, t, weight=_const(SAMPLE_WEIGHT, x)),
           lambda x, t: ref_bce(x, t, weight=SAMPLE_WEIGHT), [Arg((3, 4), 0.05, 0.95), Arg((3, 4), 0, 1)],
           id="binary_cross_entropy_weight"),
    *[OpSpec("binary_cross_entropy_with_logits",
             lambda x, t, r=r: ta.binary_cross_entropy_with_logits(x, t, reduction=r),
             lambda x, t, r=r: ref_bce_logits(x, t, reduction=r), [Arg((3, 4), -4, 4), Arg((3, 4), 0, 1)],
             id=f"bce_with_logits_{r}")
      for r in ("mean", "sum", "none")],
    OpSpec("binary_cross_entropy_with_logits",
           lambda x, t: ta.binary_cross_entropy_with_logits(x, t, weight=_const(SAMPLE_WEIGHT, x),
                                                            pos_weight=_const(POS_WEIGHT, x)),
           lambda x, t: ref_bce_logits(x, t, weight=SAMPLE_WEIGHT, pos_weight=POS_WEIGHT),
           [Arg((3, 4), -4, 4), Arg((3, 4), 0, 1)], id="bce_with_logits_weight_pos_weight"),
    OpSpec("binary_cross_entropy_with_logits",
           lambda x, t: ta.binary_cross_entropy_with_logits(x, t, pos_weight=_const(POS_WEIGHT, x),
                                                            reduction="none"),
           lambda x, t: ref_bce_logits(x, t, pos_weight=POS_WEIGHT, reduction="none"),
           [Arg((2, 4), -4, 4), Arg((2, 4), 0, 1)], id="bce_with_logits_pos_weight_none"),
]
