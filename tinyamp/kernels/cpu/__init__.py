"""CPU kernels: the fast paths behind ``convert``, ReLU, the GEMM epilogue, the loss scale and the optimizers.

- ``cpu_path.py``: which path the 16-bit CPU kernels take (numba, NumPy bit
  recipes or ``astype``);
- ``cpu_numba.py``: the numba loops (conversions on bit patterns, ReLU, the
  bias epilogue, unscale);
- ``cpu_numpy.py``: the NumPy bit recipes used without numba;
- ``elementwise_cpu.py``: ReLU forward/backward on 16-bit bit patterns and the
  fused GEMM epilogue (bias in float32 + optional ReLU + one downcast);
- ``cpu_optim.py``: SGD and Adam/AdamW on one float32 parameter in one numba pass.

Each is bit-identical to the NumPy expression it replaces (the reference
numerics in ``tinyamp/kernels/``).
"""
