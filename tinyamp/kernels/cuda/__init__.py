"""CUDA kernels and the CUDA libraries called directly; imported on every machine, run only on a GPU or the stand-in.

- ``cuda_launch.py``: compiling, launching and counting kernels; their device tables;
- ``cublas_direct.py``, ``cublaslt_direct.py``: cuBLAS and cuBLASLt through ctypes
  (capture-safe GEMMs, the bias epilogue);
- ``cuda_vector.py``: memory-speed kernels (conversions, ReLU, the bias-gradient
  column sum);
- ``cuda_epilogue.py``: ReLU's backward for mixed dtypes;
- ``cuda_loss.py``: cross-entropy forward and backward;
- ``cuda_scaler.py``, ``cuda_optim.py``: the fused loss-scale and optimizer kernels.

Their NumPy transcriptions are in ``tests/support/cuda_kernels_reference.py``; the
reference numerics they must match are in ``tinyamp/kernels/``.
"""
