"""PyTorch's module paths for the porting wing: ``import tinyamp.distributed as dist`` ports
``import torch.distributed as dist``.

Each path in ``PATHS`` is the same module object as its home in this wing (listed in
``sys.modules`` under both names), so state set through one name (``ta.backends.cudnn.benchmark``)
is seen through the other, and ``python -m tinyamp.distributed.run`` starts the launcher.
Imported last by the package face, when every module of the wing is loaded.
"""

from __future__ import annotations

import sys

PATHS = {
    "tinyamp.distributed": "tinyamp.porting.distributed",
    "tinyamp.nn.parallel": "tinyamp.porting.parallel",
    "tinyamp.nn.modules": "tinyamp.porting.modules",
    "tinyamp.optim.swa_utils": "tinyamp.porting.swa_utils",
    "tinyamp.utils": "tinyamp.porting.utils",
    "tinyamp.backends": "tinyamp.porting.backends",
    "tinyamp.cuda.amp": "tinyamp.porting.cuda_amp",
}


def serve() -> None:
    """List each loaded module of the wing under PyTorch's path too (its submodules included)."""
    for path, home in PATHS.items():
        for name, module in list(sys.modules.items()):
            if name == home or name.startswith(home + "."):
                sys.modules.setdefault(path + name[len(home):], module)


serve()
