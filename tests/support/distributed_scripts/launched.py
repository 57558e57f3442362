"""A torchrun-style script for tests/porting/test_distributed.py's launcher tests (run by tinyamp.distributed.run)."""

from __future__ import annotations

import os
import sys
import time

import tinyamp as ta
from tinyamp.distributed import all_reduce, destroy_process_group, get_rank, init_process_group

init_process_group(backend="gloo")
rank = get_rank()
if rank == 1 and sys.argv[1:] == ["raise"]:
    raise ValueError("rank 1 fails on purpose")
if rank == 1 and sys.argv[1:] == ["kill"]:
    os.kill(os.getpid(), 9)
if sys.argv[1:] in (["raise"], ["kill"]):
    time.sleep(0.5)
t = ta.full((1,), float(rank + 1))
all_reduce(t)  # rank 0 waits here for a rank that failed: the job must end anyway
env = os.environ
print(f"rank {env['RANK']} local_rank {env['LOCAL_RANK']} world_size {env['WORLD_SIZE']} local_world_size "
      f"{env['LOCAL_WORLD_SIZE']} master {env['MASTER_ADDR']}:{env['MASTER_PORT']} args {sys.argv[1:]} "
      f"sum {t.item()}", flush=True)
destroy_process_group()
