"""A torchrun-style script for tests/porting/test_distributed.py's launcher tests (run by tinyamp.distributed.run)."""

from __future__ import annotations

import datetime
import os
import sys
import time

import tinyamp as ta
from tinyamp.distributed import all_reduce, destroy_process_group, get_rank, init_process_group

how = sys.argv[1:2]
init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=2) if how == ["timeout"] else None)
rank = get_rank()
if rank == 1 and how == ["raise"]:
    raise ValueError("rank 1 fails on purpose")
if rank == 1 and how == ["kill"]:
    os.kill(os.getpid(), 9)
if rank == 1 and how == ["exit"]:
    sys.exit(0)  # a clean exit, without the collective rank 0 waits in
if rank == 1 and how == ["timeout"]:
    time.sleep(600)  # stuck far past rank 0's 2-second timeout (the job is ended long before)
if how in (["raise"], ["kill"]):
    time.sleep(0.5)
t = ta.full((1,), float(rank + 1))
for _ in range(2 if rank == 0 and how == ["short"] else 1):  # "short": rank 1's loop runs out first
    all_reduce(t)  # rank 0 waits here for a rank that failed or left: the job must end anyway
env = os.environ
print(f"rank {env['RANK']} local_rank {env['LOCAL_RANK']} world_size {env['WORLD_SIZE']} local_world_size "
      f"{env['LOCAL_WORLD_SIZE']} master {env['MASTER_ADDR']}:{env['MASTER_PORT']} args {sys.argv[1:]} "
      f"sum {t.item()}", flush=True)
destroy_process_group()
