"""Update swamping (tinyamp/study/swamping.py through ``optimizer.track_swamping()``).

Exact counts on constructed updates around float16's half ulp at 1.0, with and
without float32 master weights; the same plumbing for every optimizer; nothing
measured unless asked.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.study import swamping

# SGD with lr 1 from weights 1.0 applies u = -g. Float16's spacing is 2^-10 just above 1.0
# and 2^-11 just below it; float32's is 2^-23 above.
UPDATES = np.array([
    2.0**-12,        # 0: below half an ulp: float16 loses it, float32 keeps it
    -2.0**-12,       # 1: exactly half the spacing below 1.0: ties to even, back to 1.0: lost
    2.0**-11,        # 2: exactly half an ulp above: ties to even (1.0): lost
    3 * 2.0**-12,    # 3: above half an ulp: rounds to 1 + 2^-10: kept
    2.0**-7,         # 4: kept
    0.0,             # 5: no update at all
    2.0**-24,        # 6: half of float32's ulp: even float32 loses it (not an update it keeps)
    2.0**-13,        # 7: lost in float16
    -2.0**-5,        # 8: kept
    -3 * 2.0**-13,   # 9: more than half the spacing below 1.0: kept
])
VANISH_FP16 = [0, 1, 2, 7]
KEPT_FP32 = [0, 1, 2, 3, 4, 7, 8, 9]


def _step(master: bool, low_dtype: "ta.dtype | None" = None, steps: int = 1) -> tuple:
    p = ta.nn.Parameter(ta.ones(10, dtype=low_dtype or ta.float32))
    optimizer = ta.optim.SGD([p], lr=1.0, master_weights=master)
    optimizer.track_swamping(names={"w": p})
    for _ in range(steps):
        p.grad = ta.tensor(-UPDATES, dtype=p.dtype)  # every value is exact in float16
        optimizer.step()
    return p, optimizer


def test_float32_weights_exact_counts() -> None:
    p, optimizer = _step(master=False)
    row = optimizer.swamping()["w"]
    assert (row.weights, row.elements, row.kept_fp32, row.vanished_fp16, row.held_by_master) == \
        ("float32", 10, 8, 4, None)
    assert (row.survived_fraction, row.vanished_fraction) == (0.8, 0.4)
    changed = np.flatnonzero(p.array != 1.0)
    assert list(changed) == KEPT_FP32


def test_float16_weights_really_lose_what_the_report_says_and_masters_keep_it() -> None:
    p16, plain = _step(master=False, low_dtype=ta.float16)
    # Without a master the vanished updates are gone from the weights themselves ...
    assert sorted(set(range(10)) - set(np.flatnonzero(p16.array != 1.0))) == sorted(VANISH_FP16 + [5, 6])
    row = plain.swamping()["w"]
    assert (row.weights, row.moved, row.kept_fp32, row.vanished_fp16) == ("float16", 4, None, None)

    # ... with float32 master weights none vanish where float32 keeps them: the master holds them.
    pm, with_master = _step(master=True, low_dtype=ta.float16)
    row = with_master.swamping()["w"]
    assert (row.weights, row.kept_fp32, row.vanished_fp16, row.held_by_master, row.moved) == \
        ("float32 master", 8, 4, 4, 4)
    master = with_master.state[pm]["master_param"].array
    assert list(np.flatnonzero(master != 1.0)) == KEPT_FP32
    np.testing.assert_array_equal(pm.array, p16.array)     # the float16 copy shows what float16 shows


def test_held_updates_add_up_in_the_master_and_move_the_copy() -> None:
    # Steps of 2^-12 at 1.0: float16 alone never moves; the master adds them up, and the
    # copy moves once the sum passes half an ulp (2^-11, which itself ties back to 1.0).
    p16, _ = _step(master=False, low_dtype=ta.float16, steps=4)
    assert p16.array[0] == 1.0
    p2, _ = _step(master=True, low_dtype=ta.float16, steps=2)
    assert p2.array[0] == 1.0                             # 2 * 2^-12 = half an ulp: held in the master
    p3, _ = _step(master=True, low_dtype=ta.float16, steps=3)
    assert p3.array[0] == np.float16(1 + 2.0**-10)        # 3 * 2^-12: the float16 copy moves


OPTIMIZERS = {
    "SGD": lambda ps: ta.optim.SGD(ps, lr=1e-3, momentum=0.9),
    "Adam": lambda ps: ta.optim.Adam(ps, lr=1e-4),
    "AdamW": lambda ps: ta.optim.AdamW(ps, lr=1e-4),
    "RMSprop": lambda ps: ta.optim.RMSprop(ps, lr=1e-4),
    "Adagrad": lambda ps: ta.optim.Adagrad(ps, lr=1e-3),
    "Adadelta": lambda ps: ta.optim.Adadelta(ps, lr=1e-2),
    "NAdam": lambda ps: ta.optim.NAdam(ps, lr=1e-4),
    "RAdam": lambda ps: ta.optim.RAdam(ps, lr=1e-4),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_optimizer_counts_its_own_update(name: str) -> None:
    rng = np.random.default_rng(1)
    # Weights from 2^-12 to 2^4: the same small steps survive on the small weights and vanish on the large.
    weights = 2.0 ** rng.uniform(-12, 4, 400) * rng.choice([-1.0, 1.0], 400)
    p = ta.nn.Parameter(ta.tensor(weights, dtype=ta.float32))
    optimizer = OPTIMIZERS[name]([p])
    optimizer.track_swamping()
    for _ in range(2):
        before = p.array.copy()
        p.grad = ta.tensor(rng.standard_normal(400) * 0.1, dtype=ta.float32)
        optimizer.step()
    row = optimizer.swamping().rows[0]
    u = p.array.astype(np.float64) - before.astype(np.float64)
    w16 = before.astype(np.float16)
    lost = (u != 0) & ((w16.astype(np.float64) + u).astype(np.float16) == w16)
    assert row.name == "group0.0" and row.kept_fp32 == np.count_nonzero(u) > 0
    assert row.vanished_fp16 == np.count_nonzero(lost)
    assert 0 < row.vanished_fp16 < row.kept_fp32


def test_nothing_is_measured_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("measured without track_swamping()")

    monkeypatch.setattr(swamping, "measure", refuse)
    p = ta.nn.Parameter(ta.ones(3))
    optimizer = ta.optim.SGD([p], lr=0.1)
    p.grad = ta.ones(3)
    optimizer.step()
    assert optimizer.swamping() is None
    optimizer.track_swamping()
    optimizer.track_swamping(False)
    optimizer.step()
    assert optimizer.swamping() is None


def test_a_skipped_amp_step_updates_nothing() -> None:
    p = ta.nn.Parameter(ta.ones(4))
    optimizer = ta.optim.SGD([p], lr=0.1)
    optimizer.track_swamping()
    p.grad = ta.ones(4)
    optimizer.step(found_inf=ta.tensor(1.0))
    row = optimizer.swamping().rows[0]
    assert (row.kept_fp32, row.vanished_fp16, row.moved) == (0, 0, 0)


def test_report_print_to_dict_and_errors() -> None:
    _, optimizer = _step(master=False)
    report = optimizer.swamping()
    text = str(report)
    assert ["w", "10", "float32", "10", "80.00%", "40.00%", "-"] in [line.split() for line in text.splitlines()]
    assert "all: 8 of 10 elements updated in float32, 4 of them (40.00% of all) would vanish in float16" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["parameters"][0]["vanished_fraction"] == 0.4 and data["totals"]["kept_fp32"] == 8
    with pytest.raises(KeyError, match="no parameter named 'v'"):
        report["v"]
    with pytest.raises(ValueError, match=r"SGD.track_swamping: dtype must be float16 or bfloat16, got float32"):
        optimizer.track_swamping(dtype=ta.float32)
    optimizer.track_swamping(dtype=ta.bfloat16)   # bfloat16 keeps 8 bits: more of these vanish
    optimizer.param_groups[0]["params"][0].grad = ta.tensor(-UPDATES, dtype=ta.float32)
    optimizer.step()
    assert optimizer.swamping().low_dtype == "bfloat16"
