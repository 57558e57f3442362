"""The porting wing: PyTorch's surface beyond the AMP path, so that training code ports by its imports.

The AMP core (tensor, autograd, ops, amp, kernels) and the modules and optimizers it
needs (nn, optim, data) are what a student reads; this wing holds the rest of what
real training scripts touch:

- ``rnn.py`` (RNN/LSTM/GRU and their cells), ``attention.py`` (MultiheadAttention),
  ``transformer.py`` (the Transformer layers): composed of ops, re-exported by ``ta.nn``;
- ``swa_utils.py`` (``torch.optim.swa_utils``), ``foreach.py`` (``torch._foreach_*``),
  ``utils/`` (``torch.utils.data``, ``torch.utils.checkpoint``), ``backends/``
  (``torch.backends`` flags), ``cuda_amp.py`` (the deprecated ``torch.cuda.amp`` spellings);
- ``distributed/`` (``torch.distributed``: the process group over MPI or NCCL, the
  launcher) and ``parallel/`` (``DistributedDataParallel``), ``distributed_sampler.py``;
- ``modules/`` (``torch.nn.modules`` paths);
- ``vision.py``, ``vision_functional.py`` (padding, pixel shuffle, upsampling, instance and local response
  norms), ``sync_batchnorm.py``, ``lbfgs.py`` (``optim.LBFGS``), ``jit.py`` (``torch.jit.is_scripting``),
  ``legacy_types.py`` (``torch.LongTensor`` and friends).

The namespaces above re-export these under PyTorch's names (``ta.nn.LSTM``,
``ta.distributed``); ``paths.py`` serves PyTorch's module paths
(``import tinyamp.distributed as dist``, ``from tinyamp.optim.swa_utils import SWALR``).
"""
