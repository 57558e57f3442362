"""``torch.backends``: the flags real training scripts set (``ta.backends.cuda.matmul.allow_tf32 = True``).

``cuda.matmul.allow_tf32`` is a precision knob with a meaning here: it is
``ta.set_float32_matmul_precision("high")`` (False: "highest"), which lets
float32 GEMMs run on TF32 tensor cores (``kernels/gemm.py``; emulated on the
CPU). The cuDNN flags are accepted and kept but change nothing: tinyamp has
no cuDNN; its convolutions are GEMMs that follow ``matmul.allow_tf32``.
``fp8.accumulate`` chooses how fp8 GEMMs accumulate (float32, or a model of
Hopper's fp8 tensor cores).
"""

from __future__ import annotations

from . import cuda, cudnn, fp8

__all__ = ["cuda", "cudnn", "fp8"]
