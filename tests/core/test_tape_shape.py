"""The README's AMP step records a Cast node for every cast its ops' tags ask for (issue 18).

Model ``Linear(784, 1024) -> ReLU -> Linear(1024, 10)``, cross-entropy,
``scaler.scale(loss)``, under ``autocast(float16)``, in a warm step (the third:
the weight-cast cache and every kernel have been used). Linear is LOWER: its
float32 weight and bias each reach it through a Cast node to float16 whose edge
goes to the parameter; cross-entropy is FP32: its float16 logits reach it
through a Cast node to float32. The input batch needs no gradient, so its cast
runs but records nothing (as in PyTorch); an open trace lists it with the
others, and describes the same execution (the same nodes, the same bits).

A pre-norm GPT block (issue 28: LayerNorm, QKV Linear, causal scaled_dot_product_attention,
projection, GELU MLP, residuals) under autocast to float16 and bfloat16 records one node per op
(the fused ops, nothing composed beneath them) with the tags of PyTorch's autocast lists, and
exactly the Cast nodes those tags ask for.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.autograd.graph import reachable_nodes
from tinyamp.ops.cast import Cast


def _readme_step(device: str):
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(784, 1024), ta.nn.ReLU(), ta.nn.Linear(1024, 10)).to(device)
    optimizer = ta.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = ta.amp.GradScaler()
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.standard_normal((32, 784)).astype(np.float32), device=device)
    y = ta.tensor(rng.integers(0, 10, 32), device=device)

    def step():
        optimizer.zero_grad()
        with ta.amp.autocast(dtype=ta.float16):
            loss = ta.nn.functional.cross_entropy(model(x), y)
        scaled = scaler.scale(loss)
        nodes = list(reachable_nodes([scaled]))
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
        return nodes, loss

    return model, step


def _source(node, index):
    """What feeds input ``index`` of ``node``: (parent node or None, the leaf tensor or output index)."""
    return node._edges[index]


def _check_tape(device: str) -> None:
    model, step = _readme_step(device)
    step()
    step()
    nodes, _loss = step()
    counts: dict = {}
    for node in nodes:
        counts[type(node).__name__] = counts.get(type(node).__name__, 0) + 1
    casts = [n for n in nodes if isinstance(n, Cast)]
    assert len(casts) == 5, counts
    params = {id(p): name for name, p in model.named_parameters()}
    linears = [n for n in nodes if type(n).__name__ == "Linear"]
    assert len(linears) == 2
    lowered = set()
    for linear in linears:
        assert linear.input_dtypes == (ta.float16,) * 3
        for index in (1, 2):  # weight and bias: a Cast node to float16 over the float32 parameter
            parent, _ = _source(linear, index)
            assert isinstance(parent, Cast) and parent.dtype == ta.float16
            leaf_parent, leaf = parent._edges[0]
            assert leaf_parent is None and leaf.dtype == ta.float32
            lowered.add(params[id(leaf)])
    assert lowered == {name for name, _ in model.named_parameters()}
    (ce,) = [n for n in nodes if type(n).__name__ == "CrossEntropy"]
    parent, _ = _source(ce, 0)
    assert isinstance(parent, Cast) and parent.dtype == ta.float32 and ce.input_dtypes[0] == ta.float32
    assert type(parent._edges[0][0]).__name__ == "Linear"  # the float16 logits, widened by the node


def test_the_readme_step_has_its_cast_nodes_on_the_cpu() -> None:
    _check_tape("cpu")


def test_the_readme_step_has_its_cast_nodes_on_cuda(cuda_backend: str) -> None:
    _check_tape(cuda_backend)


def test_a_trace_describes_the_execution_that_runs(device: str) -> None:
    _model, step = _readme_step(device)
    step()
    plain_nodes, plain_loss = step()
    _model, step = _readme_step(device)
    step()
    with ta.amp.trace() as report:
        traced_nodes, traced_loss = step()
    assert sorted(type(n).__name__ for n in plain_nodes) == sorted(type(n).__name__ for n in traced_nodes)
    assert plain_loss.item() == traced_loss.item()
    forward = [c for c in report.casts if c.phase == "forward"]
    assert len(forward) == 6 and not any(c.fused for c in forward)  # the input batch's cast and the five nodes
    backward = [c for c in report.casts if c.phase == "backward"]
    assert len(backward) == 5 and not any(c.fused for c in backward)  # each recorded Cast's backward


# --------------------------------------------------------------------------- a GPT block (issue 28, item 3)
# PyTorch's autocast lists for the ops of a pre-norm GPT block (aten/src/ATen/autocast_mode.cpp, CUDA; the
# tags tinyamp gives every device): linear and scaled_dot_product_attention run in the lower precision,
# layer_norm in float32, gelu in its input's dtype (listed nowhere), and the residual add promotes.
PYTORCH_LISTS = {"Linear": "LOWER", "ScaledDotProductAttention": "LOWER", "LayerNorm": "FP32",
                 "Gelu": "NEUTRAL", "Add": "PROMOTE"}


def _gpt_block(device: str):
    ta.manual_seed(0)
    nn, heads, channels = ta.nn, 2, 16

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(channels), nn.LayerNorm(channels)
            self.qkv, self.proj = nn.Linear(channels, 3 * channels), nn.Linear(channels, channels)
            self.fc, self.gelu, self.out = nn.Linear(channels, 4 * channels), nn.GELU(), nn.Linear(4 * channels, channels)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.reshape(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            y = ta.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(self.gelu(self.fc(self.ln2(x))))

    block = Block().to(device)
    x = ta.tensor(np.random.default_rng(0).standard_normal((2, 8, channels)).astype(np.float32), device=device,
                  requires_grad=True)  # the residual stream: float32, and a gradient, as inside a model
    return block, x


def _check_gpt_block_tape(device: str, dtype) -> None:
    block, x = _gpt_block(device)
    for _ in range(3):  # the third step is warm: every kernel and the weight-cast cache used before
        with ta.amp.autocast(device_type=device.split(":")[0], dtype=dtype):
            y = block(x)
        nodes = list(reachable_nodes([y]))
        (y.float() ** 2).mean().backward()
    counts: dict = {}
    for node in nodes:
        counts[type(node).__name__] = counts.get(type(node).__name__, 0) + 1
    # One node per op: each op a module or the forward calls appears once, nothing composed beneath it.
    ops = {k: v for k, v in counts.items() if k != "Cast"}
    assert ops == {"LayerNorm": 2, "Linear": 4, "Split": 1, "Reshape": 4, "Permute": 4,
                   "ScaledDotProductAttention": 1, "Add": 2, "Gelu": 1}, counts
    for name, tag in PYTORCH_LISTS.items():
        kinds = {type(n).precision.name for n in nodes if type(n).__name__ == name}
        assert kinds == {tag}, (name, kinds)
    params = {id(p): name for name, p in block.named_parameters()}
    by_type = {}
    for node in nodes:
        by_type.setdefault(type(node).__name__, []).append(node)

    def source(node, index):
        parent, leaf = node._edges[index]
        return parent, leaf

    lowered = set()
    for linear in by_type["Linear"]:  # LOWER: every input in the autocast dtype, the parameters through Casts
        assert linear.input_dtypes == (dtype,) * 3
        for index in (1, 2):
            parent, _ = source(linear, index)
            assert isinstance(parent, Cast) and parent.dtype == dtype
            leaf_parent, leaf = parent._edges[0]
            assert leaf_parent is None and leaf.dtype == ta.float32
            lowered.add(params[id(leaf)])
    assert lowered == {n for n in params.values() if not n.startswith("ln")}  # the layer norms' stay float32
    for norm in by_type["LayerNorm"]:  # FP32: the float32 residual stream and parameters, no Cast
        assert set(norm.input_dtypes) == {ta.float32}
        assert all(not isinstance(source(norm, i)[0], Cast) for i in range(len(norm.input_dtypes)))
    # qkv and fc read a layer norm's float32 output through a Cast to the autocast dtype ...
    inputs = {type(source(lin, 0)[0]).__name__ for lin in by_type["Linear"]}
    assert inputs == {"Cast", "Reshape", "Gelu"}, inputs
    for linear in by_type["Linear"]:
        parent, _ = source(linear, 0)
        if isinstance(parent, Cast):
            assert parent.dtype == dtype and type(parent._edges[0][0]).__name__ == "LayerNorm"
    # ... attention and GELU take the 16-bit values as they come (no Cast) ...
    (sdpa,) = by_type["ScaledDotProductAttention"]
    assert sdpa.input_dtypes == (dtype,) * 3 and all(type(source(sdpa, i)[0]).__name__ == "Permute" for i in range(3))
    (gelu,) = by_type["Gelu"]
    assert gelu.input_dtypes == (dtype,) and type(source(gelu, 0)[0]).__name__ == "Linear"
    # ... and each residual add widens the 16-bit branch through a Cast to float32 (PROMOTE).
    for add in by_type["Add"]:
        assert add.input_dtypes == (ta.float32, ta.float32)
        parent, _ = source(add, 1)
        assert isinstance(parent, Cast) and parent.dtype == ta.float32 and type(parent._edges[0][0]).__name__ == "Linear"
    assert counts["Cast"] == 4 * 2 + 2 + 2, counts  # 4 weights and biases, 2 layer-norm outputs, 2 branches


@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16], ids=["float16", "bfloat16"])
def test_a_gpt_block_has_one_node_per_op_and_its_cast_nodes(device: str, dtype) -> None:
    _check_gpt_block_tape(device, dtype)
