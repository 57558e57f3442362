"""Fused CUDA kernels for the optimizers: one launch per parameter for SGD and Adam/AdamW.

On a GPU, ``optim/sgd.py`` and ``optim/adam.py`` call :func:`sgd_step` /
:func:`adam_step` instead of chains of CuPy ufuncs (NumPy twins, statement by
statement: tests/cuda_kernels_reference.py). Each is one ``ElementwiseKernel``
that reads float16/bfloat16/float32 gradients, does nothing when the keep flag
(``found_inf == 0``) is false, updates the float32 weights (the masters under
O2) and state, and writes the rounded float16/bfloat16 copy of the weights
(O2). One-thread kernels advance the device-side step counter (and compute
Adam's bias corrections from it).

Same bits as the NumPy paths, except:

- Adam's bias corrections use CUDA's double ``pow`` (within 2 ulp of exact)
  where NumPy uses the C library's; after rounding to float32 the two agree
  unless the double lands within 2 ulp of a float32 rounding boundary.
- A NaN rounded to bfloat16 may carry a different NaN payload.
- With masters (O2) the float16 weights are written only on a kept step;
  the NumPy path rewrites ``round(master)``, the same value (except for a
  -0.0 parameter whose master is +0.0).

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from . import cuda_launch as launch
from .cuda_launch import KernelSpec

_true_flags: dict[int, Any] = {}

ADVANCE_STEP = KernelSpec("tinyamp_advance_step", "raw bool keep", "raw float32 step",
                          "if (keep[0]) step[0] = step[0] + 1.0f;")

ADAM_PREPARE = KernelSpec(
    "tinyamp_adam_prepare", "raw bool keep, float64 lr, float64 beta1, float64 beta2",
    "raw float32 step, raw float32 coef",
    r"""
    const double t = (double)(step[0] + 1.0f);
    coef[0] = (float)(lr / (1.0 - pow(beta1, t)));   // step size
    coef[1] = (float)sqrt(1.0 - pow(beta2, t));      // sqrt of the second bias correction
    if (keep[0]) step[0] = step[0] + 1.0f;
    """)


def sgd_spec(momentum: bool, low_copy: bool) -> KernelSpec:
    """The SGD update, with or without a momentum buffer and a low-precision weight copy."""
    ins = "G g, raw bool keep, float32 lr, float32 weight_decay, bool use_wd, bool maximize"
    outs = "W w"
    if momentum:
        ins += ", raw float32 step, float32 momentum, float32 dampening_c, bool nesterov"
        outs += ", W buf"
    if low_copy:
        outs += ", L w_low"
    body = ["if (keep[0]) {",
            "    const float w32 = static_cast<float>(w);",
            "    float d = static_cast<float>(g);",
            "    if (maximize) d = -d;",
            "    if (use_wd) d = d + weight_decay * w32;"]
    if momentum:
        body += ["    const float b = step[0] > 0.0f ? momentum * static_cast<float>(buf) + dampening_c * d : d;",
                 "    d = nesterov ? d + momentum * b : b;",
                 "    buf = b;"]
    body += ["    const float w_new = w32 - lr * d;", "    w = w_new;"]
    if low_copy:
        body.append("    w_low = w_new;")
    body.append("}")
    name = "tinyamp_sgd" + ("_momentum" if momentum else "") + ("_low" if low_copy else "")
    return KernelSpec(name, ins, outs, "\n".join(body))


def adam_spec(amsgrad: bool, low_copy: bool) -> KernelSpec:
    """The Adam/AdamW update (``coef`` from ``ADAM_PREPARE``), optionally AMSGrad and a low copy."""
    ins = ("G g, raw bool keep, raw float32 coef, float32 beta1_c, float32 beta2, float32 beta2_c, "
           "float32 eps, float32 weight_decay, float32 decay, bool use_wd, bool decoupled")
    outs = "W w, W m, W v" + (", W v_max" if amsgrad else "") + (", L w_low" if low_copy else "")
    body = ["if (keep[0]) {",
            "    float w32 = static_cast<float>(w);",
            "    float g32 = static_cast<float>(g);",
            "    if (use_wd) {",
            "        if (decoupled) w32 = w32 * decay;",
            "        else g32 = g32 + weight_decay * w32;",
            "    }",
            "    const float m32 = static_cast<float>(m);",
            "    const float m_new = m32 + beta1_c * (g32 - m32);",
            "    const float v_new = beta2 * static_cast<float>(v) + beta2_c * (g32 * g32);",
            "    float second = v_new;"]
    if amsgrad:
        body += ["    const float vm = static_cast<float>(v_max);",
                 "    second = (vm >= v_new || isnan(vm)) ? vm : v_new;  // NumPy's maximum: nan wins",
                 "    v_max = second;"]
    body += ["    const float denom = sqrtf(second) / coef[1] + eps;",
             "    const float w_new = w32 - coef[0] * (m_new / denom);",
             "    w = w_new;", "    m = m_new;", "    v = v_new;"]
    if low_copy:
        body.append("    w_low = w_new;")
    body.append("}")
    name = "tinyamp_adam" + ("_amsgrad" if amsgrad else "") + ("_low" if low_copy else "")
    return KernelSpec(name, ins, outs, "\n".join(body))


def elementwise_specs() -> list[KernelSpec]:
    """Every ElementwiseKernel this module can launch (all variants)."""
    return ([ADVANCE_STEP, ADAM_PREPARE]
            + [sgd_spec(m, lo) for m in (False, True) for lo in (False, True)]
            + [adam_spec(a, lo) for a in (False, True) for lo in (False, True)])


def _keep_flag(keep: Any, like: Any) -> Any:
    """The optimizer's keep mask as a 1-element device bool (``True`` means no AMP mask)."""
    if keep is True:
        dev = launch._device(like)
        flag = _true_flags.get(dev.id)
        if flag is None:
            with dev:
                flag = _true_flags[dev.id] = launch._cp().ones((1,), dtype=np.bool_)
        return flag
    return keep.reshape(1)


def sgd_step(w: Any, g: Any, buf: Any, step: Any, keep: Any, *, low: Any = None, lr: float, momentum: float,
             dampening: float, weight_decay: float, nesterov: bool, maximize: bool) -> None:
    """Fused ``optim.sgd._sgd_param`` (``buf``/``step`` None without momentum); writes ``low`` too."""
    with launch._device(w):
        flag = _keep_flag(keep, w)
        args = [g, flag, lr, weight_decay, weight_decay != 0, bool(maximize)]
        outs = [w]
        if momentum != 0:
            args += [step.reshape(1), momentum, 1 - dampening, bool(nesterov)]
            outs.append(buf)
        if low is not None:
            outs.append(low)
        launch.elementwise(sgd_spec(momentum != 0, low is not None), *args, *outs)
        if momentum != 0:  # after the update, which read the old count
            launch.elementwise(ADVANCE_STEP, flag, step.reshape(1), size=1)


def adam_step(w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, keep: Any, *, low: Any = None,
              lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, decoupled: bool) -> None:
    """Fused ``optim.adam._adam_param`` (``v_max`` None without AMSGrad); writes ``low`` too."""
    with launch._device(w):
        flag = _keep_flag(keep, w)
        coef = launch._cp().empty((2,), dtype=np.float32)
        launch.elementwise(ADAM_PREPARE, flag, float(lr), float(beta1), float(beta2), step.reshape(1), coef,
                           size=1)
        outs = [w, m, v] + ([v_max] if v_max is not None else []) + ([low] if low is not None else [])
        launch.elementwise(adam_spec(v_max is not None, low is not None), g, flag, coef, 1 - beta1, beta2,
                           1 - beta2, eps, weight_decay, 1 - lr * weight_decay, weight_decay != 0,
                           bool(decoupled), *outs)



@backend.on_cuda_switch
def _forget_device_flags() -> None:
    """The keep flags are arrays of one CUDA backend (CuPy or the stand-in): drop them on a switch."""
    _true_flags.clear()
