"""The fusions that remove autocast's Cast nodes give the same bits as the nodes did.

- ``Linear`` lowers its float32 weight and bias itself (``lowers_weights``) and
  returns their gradients as float32(round16(accumulator));
- ``cross_entropy`` reads 16-bit logits itself (``upcasts_inputs``), returns a
  float32 loss and rounds the logits' gradient once.

Each is compared with the same computation with the fusion switched off (the
Cast-node mechanism it replaces): whole AMP training runs, double backward, and
the array fast path of backward against the traced (op by op) one.
"""

from __future__ import annotations

import numpy as np
import pytest

import fused_drivers as fd
import tinyamp as ta
from tinyamp.kernels import convert as cv
from tinyamp.kernels import cpu_numba
from tinyamp.ops.linalg import Linear
from tinyamp.ops.loss import CrossEntropy


@pytest.fixture
def unfused(monkeypatch):
    """Switch both fusions off: autocast records Cast nodes for the weights and the logits."""
    def off() -> None:
        monkeypatch.setattr(Linear, "lowers_weights", ())
        monkeypatch.setattr(CrossEntropy, "upcasts_inputs", False)
    return off


def train(optimizer: str, dtype, smoothing: float, steps: int = 4, trace: bool = False) -> list:
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(12, 24), ta.nn.ReLU(), ta.nn.Linear(24, 5))
    opt = (ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else ta.optim.AdamW(model.parameters(), lr=1e-2))
    scaler = ta.amp.GradScaler(init_scale=2.0 ** 12, enabled=dtype == ta.float16)
    rng = np.random.default_rng(1)
    snapshots = []
    for _ in range(steps):
        x = ta.tensor(rng.standard_normal((16, 12)).astype(np.float32))
        y = ta.tensor(rng.integers(0, 5, 16))
        opt.zero_grad()
        with ta.amp.trace() if trace else _nothing():
            with ta.amp.autocast(dtype=dtype):
                loss = ta.nn.functional.cross_entropy(model(x), y, label_smoothing=smoothing)
            scaler.scale(loss).backward()
        grads = [p.grad.array.copy() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        snapshots.append([loss.detach().numpy()] + grads + [p.array.copy() for p in model.parameters()])
    return snapshots


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> bool:
        return False


@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16], ids=str)
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_amp_training_is_bit_identical_to_the_cast_nodes(unfused, dtype, optimizer, smoothing) -> None:
    fused = train(optimizer, dtype, smoothing)
    traced = train(optimizer, dtype, smoothing, trace=True)  # backward op by op (the report's path)
    unfused()
    nodes = train(optimizer, dtype, smoothing)
    for step, (a, b, c) in enumerate(zip(fused, traced, nodes)):
        fd.assert_same_bits(a, c, f"step {step}")
        fd.assert_same_bits(b, c, f"traced step {step}")
    assert fused[0][0].dtype == np.float32  # the loss of 16-bit logits under autocast is float32


def double_backward(with_bias: bool) -> list:
    ta.manual_seed(3)
    x = ta.randn(6, 5, requires_grad=True)
    w = ta.randn(4, 5, requires_grad=True)
    b = ta.randn(4, requires_grad=True) if with_bias else None
    y = ta.tensor(np.array([0, 3, 1, 2, 3, 0]))
    with ta.amp.autocast():
        loss = ta.cross_entropy(ta.linear(x, w, b), y, label_smoothing=0.05)
    grads = ta.autograd.grad(loss, [x, w] + ([b] if with_bias else []), create_graph=True)
    penalty = sum((g.float() ** 2).sum() for g in grads)
    penalty.backward()
    return [g.detach().numpy() for g in grads] + [t.grad.numpy() for t in [x, w] + ([b] if with_bias else [])]


@pytest.mark.parametrize("with_bias", [False, True])
def test_double_backward_matches_the_cast_nodes(unfused, with_bias) -> None:
    fused = double_backward(with_bias)
    unfused()
    nodes = double_backward(with_bias)
    w_second = 4 if with_bias else 3  # the weight's second-order gradient
    fd.assert_same_bits([a for i, a in enumerate(fused) if i != w_second],
                        [b for i, b in enumerate(nodes) if i != w_second], "double backward")
    # The one difference: the weight gets two float16 contributions (through the forward
    # product and through dx = g @ W16). With a Cast node they met at that node, were summed
    # in float16 and then widened; now each is widened and they are summed in float32 at the
    # weight (as for two uses of a cached weight). So they differ by the float16 rounding of
    # that sum: at most half a float16 ulp of it.
    new, old = fused[w_second].astype(np.float64), nodes[w_second].astype(np.float64)
    assert np.all(np.abs(new - old) <= 2.0 ** -11 * np.abs(old) + 2.0 ** -25)


def test_fused_casts_are_nodes_no_more_but_the_dtypes_are_the_same() -> None:
    x = ta.randn(8, 6)
    lin = ta.nn.Linear(6, 3)
    with ta.amp.autocast():
        logits = lin(x)
        loss = ta.cross_entropy(logits, ta.tensor(np.zeros(8, np.int64)))
    assert logits.dtype == ta.float16 and loss.dtype == ta.float32
    assert type(loss.grad_fn).__name__ == "CrossEntropy" and loss.grad_fn.upcast
    assert logits.grad_fn.lowered is not None and set(logits.grad_fn.lowered) == {1, 2}
    loss.backward()
    assert lin.weight.grad.dtype == ta.float32 and lin.bias.grad.dtype == ta.float32


# ------------------------------------------------------------------ Linear's CPU backward with 16-bit operands
# kernels/linear_grads.py widens and rounds around the GEMMs in two numba calls; the general path of
# Linear._backward_arrays (taken with numba switched off) must give the same bits in every case.

HAVE_NUMBA = cv._numba_installed() and cv.BACKEND == "numba" and cv.numba_available()


def linear_backward(dtype, lowered: bool, bias: bool, x_grad: bool, w_grad: bool, batch: tuple,
                    contiguous: bool) -> list:
    """A linear layer's gradients for an awkward upstream gradient (inf, subnormals, overflow in dW)."""
    rng = np.random.default_rng(7)
    param = np.float32 if lowered else dtype
    x = ta.tensor((rng.standard_normal(batch + (9,)) * 3).astype(np.float32 if lowered else dtype),
                  requires_grad=x_grad)
    w = ta.tensor((rng.standard_normal((5, 9)) * 2).astype(param), requires_grad=w_grad)
    b = ta.tensor(rng.standard_normal(5).astype(param), requires_grad=True) if bias else None
    g = rng.standard_normal(batch + (5,)) * 100.0
    g.reshape(-1)[:3] = [np.inf, 6.0e-8, 60000.0]  # inf, a float16 subnormal, a dW past float16's max
    g = g.astype(dtype)
    if not contiguous:  # the same values, laid out column-major
        g = np.asfortranarray(g)
    with ta.amp.autocast(enabled=lowered, dtype=dtype):
        y = ta.linear(x, w, b)
    assert y.dtype == dtype
    y.backward(ta.tensor(g))
    return [t.grad.numpy() for t in (x, w, b) if t is not None and t.requires_grad]


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed or not selected")
@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16], ids=str)
@pytest.mark.parametrize("lowered", [True, False], ids=["autocast", "16-bit-params"])
@pytest.mark.parametrize("bias, x_grad, w_grad", [(True, True, True), (False, True, True), (True, False, True),
                                                  (False, True, False), (True, True, False)],
                         ids=["all", "no-bias", "dW-db", "dx-only", "dx-db"])
@pytest.mark.parametrize("batch, contiguous", [((6,), True), ((2, 3), True), ((6,), False), ((3000,), True)],
                         ids=["2d", "3d", "column-major", "tall"])  # tall: db's sum over many rows
def test_linear_16bit_backward_fast_path_gives_the_general_paths_bits(monkeypatch, dtype, lowered, bias, x_grad,
                                                                      w_grad, batch, contiguous) -> None:
    calls = []
    real = cpu_numba.KERNELS["round16_triple"]
    monkeypatch.setitem(cpu_numba.KERNELS, "round16_triple", lambda *args: calls.append(1) or real(*args))
    fast = linear_backward(dtype, lowered, bias, x_grad, w_grad, batch, contiguous)
    # The fast path takes C-contiguous gradients (a 3-D one is folded into rows, a copy) and leaves the
    # column-major 2-D one to the general path.
    assert len(calls) == (0 if not contiguous else 1)
    monkeypatch.setattr(cv, "BACKEND", "numpy-bits")  # numba off: the general path, NumPy conversions
    general = linear_backward(dtype, lowered, bias, x_grad, w_grad, batch, contiguous)
    assert len(calls) == (0 if not contiguous else 1)
    fd.assert_same_bits(fast, general, "linear backward")
    param = np.float32 if lowered else dtype
    assert [a.dtype for a in fast] == [param] * (x_grad + w_grad + bias)
    assert any(np.isinf(a).any() for a in fast) and all(np.isfinite(a).any() for a in fast)


# ------------------------------------------------------------------ Linear's CPU forward under autocast
# ops/linalg.py multiplies the cached float32 widenings itself and calls the epilogue's numba pass without
# the checks gemm and bias_act_convert repeat; with numba switched off the general path (gemm with the
# widened operands, the NumPy epilogue) must give the same bits.

def linear_forward(dtype, batch: tuple, input_dtype) -> list:
    """Three autocast steps of a linear layer on awkward values (ties, subnormals, overflow to inf)."""
    rng = np.random.default_rng(11)
    w = ta.tensor((rng.standard_normal((5, 9)) * 3).astype(np.float32), requires_grad=True)
    b = ta.tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)
    b.array[:3] = [7.0e4, 3.0e-7, 1.0 + 2.0 ** -11]  # past float16's max, a float16 subnormal, a tie
    outs = []
    for step in range(3):  # the first step fills the weight-cast cache, the later ones read it
        x = (rng.standard_normal(batch + (9,)) * 10.0 ** (step - 1)).astype(np.float32)
        x.reshape(-1)[:2] = [1.0e4, 1.0e-8]
        with ta.amp.autocast(dtype=dtype):
            outs.append(ta.linear(ta.tensor(x.astype(input_dtype or dtype)), w, b).detach().numpy())
    return outs


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed or not selected")
@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16], ids=str)
@pytest.mark.parametrize("batch", [(6,), (2, 3), ()], ids=["2d", "3d", "1d"])
@pytest.mark.parametrize("input_dtype", [np.float32, None], ids=["lowered-input", "16-bit-input"])
def test_linear_16bit_forward_fast_path_gives_the_general_paths_bits(monkeypatch, dtype, batch,
                                                                     input_dtype) -> None:
    from tinyamp.ops import linalg
    calls = []
    real = linalg.bias_convert_checked
    monkeypatch.setattr(linalg, "bias_convert_checked", lambda *args: calls.append(1) or real(*args))
    fast = linear_forward(dtype, batch, input_dtype)
    assert len(calls) >= 2  # the cached steps took the fast path
    monkeypatch.setattr(cv, "BACKEND", "numpy-bits")  # numba off: gemm and the NumPy epilogue
    calls.clear()
    general = linear_forward(dtype, batch, input_dtype)
    assert not calls
    fd.assert_same_bits(fast, general, "linear forward")
    assert all(a.dtype == dtype for a in fast) and all(np.isfinite(a).any() for a in fast)
    assert any(np.isinf(a).any() for a in fast) == (dtype == ta.float16)  # 7e4 overflows float16 only
