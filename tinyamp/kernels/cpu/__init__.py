"""CPU kernels: the numba loops behind ``convert``, ReLU, linear's bias epilogue, the loss scale and the optimizers.

- ``cpu_path.py``: which path the 16-bit CPU kernels take (numba, or ``astype``);
- ``cpu_numba.py``: the numba loops (conversions on bit patterns, ReLU, the
  bias epilogue, unscale, the SGD/Adam updates), each written once with its
  scalar conversion passed in;
- ``elementwise_cpu.py``: ReLU forward/backward on 16-bit bit patterns;
- ``cpu_optim.py``: SGD and Adam/AdamW on one float32 parameter in one numba pass.

Each is bit-identical to the NumPy expression it replaces (the reference
numerics in ``tinyamp/kernels/``).
"""
