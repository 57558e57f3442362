"""CUDA graphs: a whole training step recorded once and replayed with one launch (``ta.cuda.*``).

- ``capture.py``: ``CUDAGraph``, the ``graph`` context, ``graph_pool_handle``
  and ``is_current_stream_capturing``, PyTorch's names over CuPy's stream
  capture, with a private memory pool per graph.
- ``step.py``: ``make_graphed_step``, the one-call helper for a training step
  (warm-up, capture, static inputs, replay), with its checks.

All of it is reached as ``ta.cuda.<name>``.
"""

from __future__ import annotations

from .capture import CUDAGraph, GraphPool, graph, graph_pool_handle, is_current_stream_capturing
from .step import GraphedStep, make_graphed_step

__all__ = ["CUDAGraph", "GraphPool", "graph", "graph_pool_handle", "is_current_stream_capturing", "GraphedStep",
           "make_graphed_step"]
