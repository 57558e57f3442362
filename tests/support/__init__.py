"""What the tests share: reference data made from PyTorch, reference transcriptions of the CUDA
kernels, the op-spec table, helpers (threads, module cases, fused-kernel drivers, loss-scale cases) and the scripts the
distributed tests launch. Imported as ``tests.support`` (pytest puts the repository root on the path:
``pythonpath`` in pyproject.toml)."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]
