"""The launch and transfer budget of one training step, counted on the CUDA stand-in (issue 10).

The MNIST MLP 784-H-10 with the batch on the device, in steady state (the third
step), through ``benchmarks/bench_launches.py``'s counting code: no
host<->device copy and no synchronisation in any phase; at most 30 launches and
30 allocations for the AMP step with SGD (autocast float16 + GradScaler), 25
launches for the float32 step, 35 for the AMP step with Adam. Counts are
deterministic; times are never asserted.

The last two tests check that the budget can fail: one more launch, or one
host-to-device copy, inside the step.
"""

from __future__ import annotations


import numpy as np
import pytest

import tinyamp as ta
from tinyamp import backend
from cupy_standin import kernels as standin_kernels

import bench_launches  # noqa: E402

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")


def check_budget(case: str, counts: dict) -> None:
    """Fail with the phase-by-phase table when the case is over its budget."""
    problems = bench_launches.over_budget(case, counts)
    assert not problems, "\n".join(problems) + "\n" + bench_launches.table(case, counts)


@pytest.fixture(scope="module")
def counted() -> dict:
    return {case: bench_launches.count_step(spec["amp"], spec["optimizer"])
            for case, spec in bench_launches.CASES.items()}


@pytest.mark.parametrize("case", list(bench_launches.CASES))
def test_the_step_stays_within_its_budget(counted, case) -> None:
    check_budget(case, counted[case])


def test_every_phase_is_free_of_copies_and_syncs(counted) -> None:
    for case, counts in counted.items():
        for phase in bench_launches.PHASES:
            assert {k: counts[phase][k] for k in ("h2d", "d2h", "syncs")} == {"h2d": 0, "d2h": 0, "syncs": 0}, \
                (case, phase, counts[phase])


def test_the_amp_step_runs_the_fused_kernels(counted) -> None:
    """Each fusion the budget relies on is there (by kernel name), and no cached weight is converted."""
    kernels = {phase: {k: n for k, n in counts["kernels"].items() if k != bench_launches.TABLE_WRITES}
               for phase, counts in counted["amp-sgd"].items()}
    assert kernels["forward"].get("tinyamp_ce_forward_f32_f32_f32") == 1
    # Both Linear layers: one cuBLASLt GEMM each, the bias added in its epilogue, no other kernel.
    assert kernels["forward"].get("cublasLtMatmul") == 2 and "gemmEx" not in kernels["forward"]
    assert kernels["forward"].get("tinyamp_relu_f16") == 1
    assert kernels["backward"].get("tinyamp_relu_backward_f16") == 1
    assert kernels["backward"].get("tinyamp_column_sum_f16_round") == 2  # each bias gradient in one launch
    assert "tinyamp_bias_act_convert" not in kernels["forward"]  # no float32 GEMM output to convert
    # The input batch's Cast to float16 and the logits' Cast to float32 (FP32 cross-entropy); the four
    # weight Cast nodes read the copies the optimizer's kernel wrote at the last step.
    assert kernels["forward"].get("tinyamp_convert_f32_f16") == 1
    assert kernels["forward"].get("tinyamp_convert_f16_f32") == 1
    # The logits' gradient back to float16, and dW, db of both layers back to float32 (Cast backward).
    assert kernels["backward"].get("tinyamp_convert_f32_f16") == 1
    assert kernels["backward"].get("tinyamp_convert_f16_f32") == 4
    assert kernels["backward"].get("tinyamp_ce_backward_f32_f32_f32_f32") == 1
    assert kernels["unscale"].get("tinyamp_unscale_f32_f32") == 1
    assert kernels["step"] == {"tinyamp_sgd_group_f32_f32_f16": 1, "tinyamp_advance_steps": 1}
    assert kernels["update"] == {"tinyamp_update_scale": 1}
    adam_step = counted["amp-adam"]["step"]["kernels"]
    assert {k: n for k, n in adam_step.items() if k != bench_launches.TABLE_WRITES} == {
        "tinyamp_adam_group_f32_f32_f16": 1, "tinyamp_adam_prepare_group": 1}


def one_more_launch(phase: str) -> None:
    """What a regression might add: one kernel launch in the step (here a fill, in the backward phase)."""
    if phase == "backward":
        backend.cupy().zeros((4,), dtype=np.float32)


def one_host_copy(phase: str) -> None:
    """What a regression might add: one host-to-device copy in the step (a constant built on the host)."""
    if phase == "step":
        backend.cupy().asarray(np.ones(3, np.float32))


@pytest.mark.parametrize("case", list(bench_launches.CASES))
def test_one_extra_launch_breaks_the_budget(case) -> None:
    spec = bench_launches.CASES[case]
    counts = bench_launches.count_step(spec["amp"], spec["optimizer"], extra=one_more_launch)
    assert counts["backward"]["kernels"]["memset"] >= 1
    with pytest.raises(AssertionError, match=rf"{case}: {bench_launches.REACHED[case] + 1} kernel launches"):
        check_budget(case, counts)


def test_one_host_copy_breaks_the_budget() -> None:
    counts = bench_launches.count_step(True, "sgd", extra=one_host_copy)
    assert counts["step"]["h2d"] == 1
    with pytest.raises(AssertionError, match=r"amp-sgd: 1 h2d > 0"):
        check_budget("amp-sgd", counts)
