"""Instruments for studying mixed precision; nothing here changes what a step computes.

The mechanism (autocast, casting, the loss scaler, the op table) is :mod:`tinyamp.amp`;
this package watches it run:

- :mod:`.report`: the precision report (``ta.amp.trace()``), every op, cast and rule;
- :mod:`.rounding`: what one conversion into another dtype lost;
- :mod:`.shadow`: the step again as a float32/float64 twin, compared op by op
  (``ta.amp.shadow_run``);
- :mod:`.grad_stats`: gradient exponent histograms against float16's range;
- :mod:`.swamping`: which updates float16 weights would have lost
  (``optimizer.track_swamping()``);
- :mod:`.memory`: the bytes a step keeps alive, per dtype (``ta.memory``).
"""

from __future__ import annotations

from . import grad_stats, memory, rounding, swamping
from .grad_stats import exponent_histogram, plot_exponent_histogram
from .report import Trace, trace
from .shadow import ShadowReport, shadow_run

__all__ = ["trace", "Trace", "shadow_run", "ShadowReport", "grad_stats", "exponent_histogram",
           "plot_exponent_histogram", "rounding", "swamping", "memory"]
