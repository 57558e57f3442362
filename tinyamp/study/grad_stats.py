"""Gradient exponent statistics against float16's range: why loss scaling exists.

The mixed-precision paper (Micikevicius et al., 2018) motivates loss scaling with
a histogram of log2 |g| over a network's gradients: a large share of the values
lies below float16's smallest subnormal, 2^-24, and would flush to zero, while
the range above is nearly empty up to float16's largest value, 65504.
Multiplying the loss by S shifts the whole histogram right by log2 S.

- :func:`exponent_histogram` counts the exponents of a set of gradients (Tensors
  or arrays, any dtype; read in float64 on the host) and reports the fraction
  of non-zero values below 2^-24 (lost), below 2^-14 (subnormal: fewer bits)
  and above 65504 (overflow), with and without a scale.
- :func:`plot_exponent_histogram` draws it with matplotlib (a tinyamp
  dependency, imported only when a plot is drawn; where it is missing a clear
  ImportError says how to install it).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from .. import backend

__all__ = ["exponent_histogram", "plot_exponent_histogram", "FP16_SUBNORMAL_MIN", "FP16_NORMAL_MIN",
           "FP16_MAX", "require_matplotlib"]

FP16_SUBNORMAL_MIN = 2.0 ** -24   # smallest positive float16 (subnormal)
FP16_NORMAL_MIN = 2.0 ** -14      # smallest positive normal float16
FP16_MAX = 65504.0                # largest finite float16

_DEFAULT_BINS = np.arange(-60, 21, 1.0)  # log2 |g| from 2^-60 to 2^20 in steps of one binade


def _host_values(grads: Any) -> np.ndarray:
    """All gradient values as one flat float64 host array (Nones skipped)."""
    if grads is None:
        return np.zeros(0)
    items: Iterable[Any] = grads if isinstance(grads, (list, tuple)) else [grads]
    parts = []
    for g in items:
        if g is None:
            continue
        data = getattr(g, "array", g)  # a Tensor's array, or the array itself
        parts.append(backend.to_host(data).astype(np.float64).ravel())
    return np.concatenate(parts) if parts else np.zeros(0)


def _fractions(magnitudes: np.ndarray, nonzero: int) -> dict:
    """Fractions of the non-zero values below/above float16's limits."""
    if nonzero == 0:
        return {"below_subnormal": 0.0, "below_normal": 0.0, "above_max": 0.0}
    with np.errstate(over="ignore"):
        return {
            "below_subnormal": float(np.count_nonzero(magnitudes < FP16_SUBNORMAL_MIN)) / nonzero,
            "below_normal": float(np.count_nonzero(magnitudes < FP16_NORMAL_MIN)) / nonzero,
            "above_max": float(np.count_nonzero(magnitudes > FP16_MAX)) / nonzero,
        }


def exponent_histogram(grads: Any, scale: float = 1.0, bins: Any = None) -> dict:
    """Histogram of log2 |g| over ``grads`` (a Tensor, an array, or a list of them).

    ``grads`` should be the *unscaled* gradients; ``scale`` is the loss scale to
    compare against (the scaled picture is the same histogram shifted by
    log2 ``scale``). Zeros have no exponent and are counted separately; non-finite
    values are counted and left out of the histogram.

    Returns a dict: ``edges`` (bin edges in log2 units, list), ``counts`` and
    ``scaled_counts`` (per bin; values outside the edges are clipped into the
    first or last bin), ``total``, ``zeros``, ``nonfinite``, ``scale``,
    ``unscaled`` and ``scaled``: each ``{"below_subnormal", "below_normal",
    "above_max"}``, the fractions of the non-zero finite values below 2^-24,
    below 2^-14 and above 65504.
    """
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"exponent_histogram: scale must be a positive finite number, got {scale!r}")
    edges = np.asarray(_DEFAULT_BINS if bins is None else bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"exponent_histogram: bins must be increasing log2 edges (at least two), got {bins!r}")
    values = _host_values(grads)
    finite = np.isfinite(values)
    magnitudes = np.abs(values[finite])
    zeros = int(np.count_nonzero(magnitudes == 0))
    magnitudes = magnitudes[magnitudes > 0]
    exponents = np.log2(magnitudes)
    shift = math.log2(scale)
    low, high = edges[0], np.nextafter(edges[-1], -np.inf)  # clip into the outer bins
    counts, _ = np.histogram(np.clip(exponents, low, high), bins=edges)
    scaled_counts, _ = np.histogram(np.clip(exponents + shift, low, high), bins=edges)
    nonzero = int(magnitudes.size)
    return {
        "edges": edges.tolist(), "counts": counts.tolist(), "scaled_counts": scaled_counts.tolist(),
        "total": int(values.size), "zeros": zeros, "nonfinite": int(values.size - np.count_nonzero(finite)),
        "scale": scale,
        "unscaled": _fractions(magnitudes, nonzero),
        "scaled": _fractions(magnitudes * scale, nonzero),
    }


def require_matplotlib() -> Any:
    """``matplotlib.pyplot`` with a non-interactive backend, or a clear ImportError."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib, which is not installed: "
                          "pip install matplotlib (a tinyamp dependency: pip install -e . installs it)") from exc
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_exponent_histogram(hist: dict, path: "str | None" = None, title: str = "gradient exponents") -> Any:
    """Draw an :func:`exponent_histogram` result: unscaled and scaled, with float16's limits.

    Vertical lines mark 2^-24 (smallest subnormal: below it a value becomes 0),
    2^-14 (smallest normal) and 65504 (largest finite). Saves to ``path`` when
    given; returns the matplotlib Figure.
    """
    plt = require_matplotlib()
    edges = np.asarray(hist["edges"])
    centers, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    total = max(sum(hist["counts"]), 1)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(centers, np.asarray(hist["counts"]) / total, width=width, alpha=0.6,
           label="unscaled" if hist["scale"] != 1.0 else "gradients")
    if hist["scale"] != 1.0:
        ax.bar(centers, np.asarray(hist["scaled_counts"]) / total, width=width, alpha=0.6,
               label=f"scaled by {hist['scale']:g} (2^{math.log2(hist['scale']):g})")
    for value, label, style in ((FP16_SUBNORMAL_MIN, "2^-24 smallest subnormal", ":"),
                                (FP16_NORMAL_MIN, "2^-14 smallest normal", "--"),
                                (FP16_MAX, "65504 largest", "-")):
        ax.axvline(math.log2(value), color="k", linestyle=style, linewidth=1, label=label)
    below = hist["unscaled"]["below_subnormal"]
    below_scaled = hist["scaled"]["below_subnormal"]
    scaled_words = (f"{below_scaled:.1%} after scaling by {hist['scale']:g}" if hist["scale"] != 1.0
                    else "no loss scaling")
    ax.set_title(f"{title}\n{below:.1%} of non-zero values below 2^-24 (they would flush to zero in float16), "
                 f"{scaled_words}\n{hist['zeros']} exact zeros not shown", fontsize=9)
    # Show the occupied bins and float16's whole range, not the empty tails.
    occupied = np.flatnonzero(np.asarray(hist["counts"]) + np.asarray(hist["scaled_counts"]))
    if occupied.size:
        left = min(edges[occupied[0]], math.log2(FP16_SUBNORMAL_MIN)) - 2
        right = max(edges[occupied[-1] + 1], math.log2(FP16_MAX)) + 2
        ax.set_xlim(left, right)
    ax.set_xlabel("log2 |gradient|")
    ax.set_ylabel("fraction of non-zero values")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig
