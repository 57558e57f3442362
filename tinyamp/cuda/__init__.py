"""``ta.cuda``: PyTorch's ``torch.cuda``, built above amp and optim so that it can name them directly.

- ``devices.py``: availability, the current GPU (``ta.cuda.device(i)`` as a context), synchronisation and its
  accounting, the stand-in's counters;
- ``memory.py``: memory statistics over CuPy's pool (PyTorch's names and meaning);
- CUDA graphs: ``CUDAGraph``, ``graph``, ``graph_pool_handle``, ``is_current_stream_capturing``
  (``kernels/cuda/capture.py``) and ``make_graphed_step`` (``graphed_step.py``: a whole AMP step
  captured once and replayed);
- the CUDA generators' state and seeds (``tinyamp/random.py``) and the deprecated ``ta.cuda.amp``
  spellings (``porting/cuda_amp.py``).

``accelerator.py`` is ``ta.accelerator``.
"""

from __future__ import annotations

from ..kernels.cuda.capture import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing
from ..porting import cuda_amp as amp
from ..random import (cuda_get_rng_state as get_rng_state, cuda_get_rng_state_all as get_rng_state_all,
                      cuda_manual_seed as manual_seed, cuda_manual_seed_all as manual_seed_all,
                      cuda_set_rng_state as set_rng_state, cuda_set_rng_state_all as set_rng_state_all)
from .devices import (current_device, device, device_count, is_available, is_bf16_supported, note_sync,
                      reset_sync_count, set_device, standin_counters, sync_count, synchronize)
from .graphed_step import GraphedStep, make_graphed_step
from .memory import (empty_cache, max_memory_allocated, memory_allocated, memory_reserved,
                     reset_max_memory_allocated, reset_peak_memory_stats)
