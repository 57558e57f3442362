"""How many devices the stand-in offers, and which one this process owns.

One, id 0, for a single process. Under a launcher that sets torchrun's
``LOCAL_WORLD_SIZE`` (``python -m tinyamp.distributed.run``) it offers one
device per local rank, as a machine with one GPU per rank has, and this
process owns ``cuda:LOCAL_RANK``: its memory pool is that device's, and device
memory may only be allocated while that device is current (a process that
forgot ``set_device`` would otherwise put its work on another rank's GPU).
Read once, when the stand-in is imported.
"""

from __future__ import annotations

import os
import threading


def _count() -> int:
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


DEVICE_COUNT = _count()
OWN_DEVICE = int(os.environ.get("LOCAL_RANK", "0") or 0) if DEVICE_COUNT > 1 else 0
_local = threading.local()


def current_device() -> int:
    """This host thread's current device (``cudaGetDevice``; 0 until set, as in CUDA)."""
    return getattr(_local, "device", 0)


def set_current_device(device: int) -> None:
    _local.device = device
