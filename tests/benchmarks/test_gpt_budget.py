"""The GPT AMP step's launch and byte budgets on the CUDA stand-in (issue 28), through benchmarks/bench_gpt_launches.py.

``common.gpt_training`` at the issue's stand-in size (4 blocks, C=128, T=64,
batch 4, float16 autocast + GradScaler + AdamW), counted in steady state: no
host<->device copy or synchronisation in any phase, at most
``LAUNCH_BUDGET`` launches and ``BLOCK_LAUNCH_BUDGET`` per block (the step at
4 blocks against the step at 2), at most ``BYTES_BUDGET`` times the floor, and
no more kernel launches (pointer-table writes aside) than today (``REACHED``).
Each fused kernel the step runs is checked by name; with any of them replaced
by its composed path (the dispatch's ``FUSED_ON_GPU`` off) the budget fails.
"""

from __future__ import annotations


import pytest

import tinyamp as ta
from tinyamp.kernels import attention, embedding, gelu, layer_norm
from cupy_standin import kernels as standin_kernels

import bench_gpt_launches as gpt  # benchmarks/ is on pytest's pythonpath (pyproject.toml)
import bench_launches
import common

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")


@pytest.fixture(scope="module")
def counted() -> tuple[dict, float]:
    counts = gpt.count_step()
    fewer = gpt.count_step(blocks=2)
    return counts, gpt.block_launches(counts, fewer, gpt.GPT["blocks"], 2)


def test_the_gpt_step_stays_within_its_budgets(counted) -> None:
    counts, per_block = counted
    problems = gpt.over_budget(counts, per_block)
    assert not problems, "\n".join(problems) + "\n" + bench_launches.table("gpt", counts)
    assert (gpt.LAUNCH_BUDGET, gpt.BLOCK_LAUNCH_BUDGET, gpt.BYTES_BUDGET) == (250, 50, 1.3)


def test_every_phase_is_free_of_copies_and_syncs(counted) -> None:
    counts, _ = counted
    for phase in gpt.PHASES:
        assert {k: counts[phase][k] for k in ("h2d", "d2h", "syncs")} == {"h2d": 0, "d2h": 0, "syncs": 0}, phase


def test_the_step_runs_the_fused_kernels(counted) -> None:
    """Per block: two LayerNorms, attention and GELU, one launch each way (attention's backward two); the
    final LayerNorm; both embeddings; and none of the composed paths' elementwise kernels."""
    counts, _ = counted
    forward, backward = counts["forward"]["kernels"], counts["backward"]["kernels"]
    blocks = gpt.GPT["blocks"]
    assert forward["tinyamp_layer_norm_f32_f32_f32"] == backward["tinyamp_layer_norm_backward_f32_f32_f32"] \
        == 2 * blocks + 1
    assert forward["tinyamp_attention_f16_32_32"] == backward["tinyamp_attention_dq_f16_f16_32_32"] \
        == backward["tinyamp_attention_dkv_f16_f16_32_32"] == blocks
    assert forward["tinyamp_gelu_none_f16"] == backward["tinyamp_gelu_backward_none_f16_f16"] == blocks
    assert forward["tinyamp_embedding_i64_f32"] == backward["tinyamp_embedding_backward_i64_f32"] == 2
    assert forward["cublasLtMatmul"] == 4 * blocks + 1  # every Linear: its bias in the GEMM's epilogue
    for composed in ("exp", "divide", "scatter_add", "mean", "var", "sqrt", "tril"):
        assert composed not in forward and composed not in backward, composed
    # The embeddings' device index check (kernels/embedding.checked_indices: compare, argmax, two copyto into the
    # flag, where) is the forward's only where, take and copy: attention's outputs are laid out heads-last, so
    # merging the heads (and its gradient) copies nothing.
    assert (forward["where"], forward["take"], forward["copy"]) == (2, 4, 4)
    assert not {"where", "take", "copy"} & set(backward)


def test_the_floor_counts_every_parameter_of_the_model() -> None:
    """The floor's optimizer row reads each parameter's weight, gradient, m and v (16 bytes): the parameter
    count it uses is the model's."""
    g = common.gpt_training(ta, device="cpu", **gpt.GPT)
    params = sum(p.numel() for p in g.model.parameters())
    rows = {what: (read, written) for what, read, written in gpt.floor_rows(**gpt.GPT)}
    step = next(r for what, r in rows.items() if what.startswith("step: adamw"))
    assert step[0] == 16 * params and rows["unscale_: every gradient"] == (4 * params, 4 * params)


@pytest.mark.parametrize("module", [gelu, layer_norm, attention, embedding], ids=lambda m: m.__name__.split(".")[-1])
def test_a_fused_kernel_replaced_by_its_composed_path_breaks_the_budget(module, monkeypatch) -> None:
    monkeypatch.setattr(module, "FUSED_ON_GPU", False)
    counts = gpt.count_step()
    problems = gpt.over_budget(counts, per_block=0.0)
    assert problems and any("launches" in p for p in problems), problems
