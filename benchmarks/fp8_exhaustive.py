"""Every float32 bit pattern (all 2^32) through tinyamp's fp8 encoder, against clip + ml_dtypes and torch.

``python benchmarks/fp8_exhaustive.py`` prints a table and writes ``--json``
(default ``benchmarks/fp8_exhaustive.json``). Too slow for the test suite (a
few minutes), which checks the binades where the rule changes exhaustively
and samples the others (tests/kernels/test_fp8_casts.py); this settles the
rest once per machine. Per format (E4M3, E5M2) and rule:

- saturating (tinyamp's default): ``np.clip(x, -max, max)`` then ml_dtypes' ``astype``
  (Transformer Engine's rule);
- non-saturating: plain ml_dtypes ``astype``;
- torch (if installed; it is not a tinyamp dependency): torch's E4M3 cast
  (which saturates) against the saturating rule on every pattern, torch's E5M2
  (which does not) against the non-saturating rule on every non-NaN pattern
  (the NaN payloads differ; both give a NaN).

Mismatches are counted, not sampled; the time per element of each path is
reported beside them (wall time, the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.common import machine, table, write_json  # noqa: E402
from tinyamp.kernels import fp8  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 1 << 24


def _torch() -> "object | None":
    try:
        import torch
    except ImportError:
        return None
    return torch


def check(f: fp8.Fp8Format, chunks: int) -> list[dict]:
    torch = _torch()
    tdtype = None if torch is None else {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[f.name]
    counts = {k: 0 for k in ("saturating", "non-saturating", "torch")}
    seconds = {k: 0.0 for k in ("tinyamp encode", "clip + ml_dtypes", "ml_dtypes", "torch")}
    checked = {"torch": 0}
    bits = np.empty(CHUNK, np.uint32)
    for c in range(chunks):
        np.add(np.arange(CHUNK, dtype=np.uint32), np.uint32(c * CHUNK), out=bits)
        x = bits.view(np.float32)
        with np.errstate(all="ignore"):
            t0 = time.perf_counter()
            sat = fp8.encode(x, f.dtype)
            t1 = time.perf_counter()
            loose = fp8.encode(x, f.dtype, saturate=False)
            t2 = time.perf_counter()
            want_sat = np.clip(x, -f.max, f.max).astype(f.dtype).view(np.uint8)
            t3 = time.perf_counter()
            want_loose = x.astype(f.dtype).view(np.uint8)
            t4 = time.perf_counter()
        seconds["tinyamp encode"] += (t1 - t0 + t2 - t1) / 2
        seconds["clip + ml_dtypes"] += t3 - t2
        seconds["ml_dtypes"] += t4 - t3
        counts["saturating"] += int(np.count_nonzero(sat != want_sat))
        counts["non-saturating"] += int(np.count_nonzero(loose != want_loose))
        if torch is not None:
            t5 = time.perf_counter()
            got = torch.from_numpy(x).to(tdtype).view(torch.uint8).numpy()
            seconds["torch"] += time.perf_counter() - t5
            if f.name == "e4m3":
                counts["torch"] += int(np.count_nonzero(got != sat))
                checked["torch"] += x.size
            else:
                keep = ~np.isnan(x)
                counts["torch"] += int(np.count_nonzero(got[keep] != loose[keep]))
                checked["torch"] += int(np.count_nonzero(keep))
    n = chunks * CHUNK
    rows = [{"format": f.name, "rule": "saturating (clip + ml_dtypes)", "inputs": n, "mismatches": counts["saturating"]},
            {"format": f.name, "rule": "non-saturating (ml_dtypes)", "inputs": n,
             "mismatches": counts["non-saturating"]}]
    if torch is not None:
        rule = "torch (saturates)" if f.name == "e4m3" else "torch (no saturation; NaN inputs left out)"
        rows.append({"format": f.name, "rule": rule, "inputs": checked["torch"], "mismatches": counts["torch"],
                     "torch": torch.__version__})
    for row in rows:
        row["ns_per_element"] = {k: v / n * 1e9 for k, v in seconds.items() if v}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=(1 << 32) // CHUNK,
                        help=f"chunks of {CHUNK} patterns from 0 up (default: all 2^32)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "fp8_exhaustive.json"))
    args = parser.parse_args()
    start = time.perf_counter()
    rows = [row for f in (fp8.E4M3, fp8.E5M2) for row in check(f, args.chunks)]
    payload = {"machine": machine(), "load_average": os.getloadavg(), "rows": rows,
               "seconds": time.perf_counter() - start}
    print(table([[r["format"], r["rule"], f"{r['inputs']:,}", str(r["mismatches"])] for r in rows],
                ["format", "against", "inputs", "mismatches"]))
    t = rows[0]["ns_per_element"]
    print("wall ns/element (E4M3): " + ", ".join(f"{k} {v:.2f}" for k, v in t.items()))
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
