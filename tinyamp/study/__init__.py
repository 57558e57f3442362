"""Instruments for studying mixed precision; nothing here changes what a step computes.

The mechanism (autocast, casting, the loss scaler, the op table) is :mod:`tinyamp.amp`;
this package watches it run:

- :mod:`.report`: the precision report (``ta.amp.trace()``), every op, cast and rule;
- :mod:`.rounding`: what one conversion into another dtype lost (an fp8 quantisation too);
- :mod:`.shadow`: the step again as a float32/float64 twin, or under another fp8
  recipe, compared op by op (``ta.amp.shadow_run``);
- :mod:`.fp8_roofline`: whether fp8 can be faster at a model's GEMM shapes
  (``ta.amp.explain_fp8``);
- :mod:`.grad_stats`: gradient exponent histograms against float16's range;
- :mod:`.swamping`: which updates float16 weights would have lost
  (``optimizer.track_swamping()``);
- :mod:`.memory`: the bytes a step keeps alive, per dtype (``ta.memory``).
"""

from __future__ import annotations

from . import fp8_roofline, grad_stats, memory, rounding, swamping
from .fp8_roofline import explain_fp8
from .grad_stats import exponent_histogram, plot_exponent_histogram
from .report import Trace, trace
from .shadow import ShadowReport, shadow_run

__all__ = ["trace", "Trace", "shadow_run", "ShadowReport", "grad_stats", "exponent_histogram",
           "plot_exponent_histogram", "rounding", "swamping", "memory", "explain_fp8", "fp8_roofline"]
