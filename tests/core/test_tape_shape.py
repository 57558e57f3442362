"""The README's AMP step records a Cast node for every cast its ops' tags ask for (issue 18).

Model ``Linear(784, 1024) -> ReLU -> Linear(1024, 10)``, cross-entropy,
``scaler.scale(loss)``, under ``autocast(float16)``, in a warm step (the third:
the weight-cast cache and every kernel have been used). Linear is LOWER: its
float32 weight and bias each reach it through a Cast node to float16 whose edge
goes to the parameter; cross-entropy is FP32: its float16 logits reach it
through a Cast node to float32. The input batch needs no gradient, so its cast
runs but records nothing (as in PyTorch); an open trace lists it with the
others, and describes the same execution (the same nodes, the same bits).
"""

from __future__ import annotations

import numpy as np

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
