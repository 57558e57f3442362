"""autocast: validation, the region stack, threads, casts on the tape, the weight-cast
cache, custom_fwd/custom_bwd and per-op overrides (tinyamp/amp/autocast.py).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.ops.cast import Cast
from tinyamp.precision import current_autocast

f16, bf16, f32 = ta.float16, ta.bfloat16, ta.float32

HANG_S = 300  # a bound on a wait that only a hang reaches (never a timing the test depends on)


def _leaf(*shape: int, dtype: object = f32, seed: int = 0) -> ta.Tensor:
    rng = np.random.default_rng(seed)
    return ta.tensor(rng.standard_normal(shape) * 0.5, dtype=dtype, requires_grad=True)


def _input(*shape: int, seed: int = 5) -> ta.Tensor:
    """A float32 input that needs no gradient (never a weight-cache candidate)."""
    rng = np.random.default_rng(seed)
    return ta.tensor(rng.standard_normal(shape) * 0.5, dtype=f32)


@pytest.fixture(autouse=True)
def _no_global_overrides():
    ta.amp.reset_op_precision()
    yield
    ta.amp.reset_op_precision()


# --------------------------------------------------------------- validation
@pytest.mark.parametrize("dtype", [ta.float64, ta.float32, ta.int64, "int32", np.int8])
def test_unsupported_dtype_is_a_clear_error(dtype: object) -> None:
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        ta.amp.autocast(dtype=dtype)


def test_unknown_dtype_name_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unknown dtype"):
        ta.amp.autocast(dtype="float8")


def test_device_type_validation() -> None:
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        ta.amp.autocast(device_type=0)
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'xpu'"):
        ta.amp.autocast(device_type="xpu")
    with pytest.raises(TypeError, match="enabled must be a bool"):
        ta.amp.autocast(enabled="yes")
    for device_type in (None, "cpu"):
        with ta.amp.autocast(device_type=device_type):
            assert ta.amp.is_autocast_enabled()


@pytest.mark.skipif(ta.cuda.is_available(), reason="checks the no-GPU fallback")
def test_cuda_region_without_gpu_warns_and_is_off() -> None:
    with pytest.warns(UserWarning, match="CUDA is not available"):
        region = ta.amp.autocast("cuda")
    with region:
        assert not ta.amp.is_autocast_enabled()
        assert (_leaf(2, 3) @ _leaf(3, 2)).dtype == f32


def test_cpu_region_leaves_other_devices_off() -> None:
    with ta.amp.autocast("cpu"):
        assert ta.amp.is_autocast_enabled("cpu")
        assert ta.amp.is_autocast_enabled()
        assert not ta.amp.is_autocast_enabled("cuda")
    with ta.amp.autocast():  # None: every device
        assert ta.amp.is_autocast_enabled("cuda") and ta.amp.is_autocast_enabled("cpu")


def test_device_specific_regions_leave_the_other_device_alone(cuda_backend) -> None:
    cpu_a, cpu_b = _leaf(4, 3), _leaf(3, 5, seed=1)
    gpu_a, gpu_b = cpu_a.detach().to("cuda"), cpu_b.detach().to("cuda")
    with ta.amp.autocast("cuda"):
        assert (gpu_a @ gpu_b).dtype == f16
        assert (cpu_a @ cpu_b).dtype == f32
    with ta.amp.autocast("cpu"):
        assert (gpu_a @ gpu_b).dtype == f32
        assert (cpu_a @ cpu_b).dtype == f16


# ------------------------------------------------------------- state, stack
def test_enabled_and_dtype_follow_the_region() -> None:
    assert not ta.amp.is_autocast_enabled()
    assert ta.amp.get_autocast_dtype() == f16
    with ta.amp.autocast(dtype=ta.bfloat16):
        assert ta.amp.is_autocast_enabled()
        assert ta.amp.get_autocast_dtype() == bf16
        with ta.amp.autocast(dtype="float16"):
            assert ta.amp.get_autocast_dtype() == f16
        assert ta.amp.get_autocast_dtype() == bf16
    assert not ta.amp.is_autocast_enabled()


def test_default_dtype_is_float16() -> None:
    a, b = _leaf(4, 3), _leaf(3, 5, seed=1)
    with ta.amp.autocast():
        assert (a @ b).dtype == f16


def test_inner_disabled_region_runs_in_received_dtypes_and_is_undone() -> None:
    a, b = _leaf(4, 3), _leaf(3, 5, seed=1)
    with ta.amp.autocast():
        h = a @ b
        assert h.dtype == f16
        with ta.amp.autocast(enabled=False):
            assert not ta.amp.is_autocast_enabled()
            assert (a @ b).dtype == f32                # float32 arrives, float32 runs
            assert (h @ h.T).dtype == f16              # float16 arrives, float16 runs (no cast)
            assert ta.exp(h).dtype == f16              # FP32 op not upcast either
            assert ta.exp(h.float()).dtype == f32
        assert ta.amp.is_autocast_enabled()
        assert (a @ b).dtype == f16
        assert ta.exp(h).dtype == f32


def test_inner_dtype_change_is_undone() -> None:
    a, b = _leaf(4, 3), _leaf(3, 5, seed=1)
    with ta.amp.autocast():
        with ta.amp.autocast(dtype=bf16):
            assert (a @ b).dtype == bf16
        assert (a @ b).dtype == f16


def test_region_is_restored_after_an_exception() -> None:
    with pytest.raises(KeyError):
        with ta.amp.autocast():
            with ta.amp.autocast(enabled=False):
                raise KeyError("boom")
    assert not ta.amp.is_autocast_enabled()
    assert ta.amp.autocast_cache_info()["entries"] == 0


def test_decorator_form() -> None:
    a, b = _leaf(4, 3), _leaf(3, 5, seed=1)

    @ta.amp.autocast(dtype=bf16)
    def forward(x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        assert ta.amp.is_autocast_enabled()
        return x @ y

    @ta.amp.autocast(enabled=False)
    def plain(x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        return x @ y

    assert forward(a, b).dtype == bf16
    assert not ta.amp.is_autocast_enabled()
    with ta.amp.autocast():
        assert plain(a, b).dtype == f32
        assert (a @ b).dtype == f16
    assert forward.__name__ == "forward"


def test_decorated_function_gives_each_thread_its_own_region() -> None:
    # Two threads inside one decorated function at once; the first to enter leaves
    # first, while the other is still inside. Each call must own its region: a
    # shared one would hand the second thread's exit the first thread's state.
    a, b = _leaf(4, 3), _leaf(3, 5, seed=1)
    # The waits only guard against a hang: generous, so a loaded machine never breaks them (issue 30's hunt).
    both_inside, first_left = threading.Barrier(2, timeout=HANG_S), threading.Event()
    seen: dict = {}

    @ta.amp.autocast(dtype=bf16)
    def forward(name: str) -> None:
        seen[name, "entered"] = (ta.amp.is_autocast_enabled(), (a @ b).dtype)
        both_inside.wait()
        if name == "second":
            assert first_left.wait(HANG_S)  # stay inside after the first thread has returned
            seen[name, "after the other left"] = (ta.amp.is_autocast_enabled(), (a @ b).dtype)

    def run(name: str) -> None:
        try:
            forward(name)
            seen[name, "returned"] = (ta.amp.is_autocast_enabled(), (a @ b).dtype)
        except BaseException as exc:  # reported below: an assert in a thread would be lost
            seen[name, "error"] = repr(exc)
        finally:
            if name == "first":
                first_left.set()

    threads = [threading.Thread(target=run, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_S)
        assert not thread.is_alive()
    assert seen == {("first", "entered"): (True, bf16), ("second", "entered"): (True, bf16),
                    ("first", "returned"): (False, f32), ("second", "after the other left"): (True, bf16),
                    ("second", "returned"): (False, f32)}
    assert not ta.amp.is_autocast_enabled()


def test_same_instance_can_be_entered_twice() -> None:
    region = ta.amp.autocast()
    with region:
        with region:
            assert ta.amp.is_autocast_enabled()
        assert ta.amp.is_autocast_enabled()
    assert not ta.amp.is_autocast_enabled()


def test_a_new_thread_starts_with_autocast_off() -> None:
    seen = {}

    def worker() -> None:
        seen["enabled_at_start"] = ta.amp.is_autocast_enabled()
        a, b = _leaf(4, 3), _leaf(3, 5, seed=1)
        seen["dtype_at_start"] = (a @ b).dtype
        with ta.amp.autocast(dtype=bf16):
            inside.set()
            seen["main checked in time"] = main_checked.wait(HANG_S)
            seen["dtype_inside"] = (a @ b).dtype

    inside, main_checked = threading.Event(), threading.Event()
    with ta.amp.autocast():
        thread = threading.Thread(target=worker)
        thread.start()
        assert inside.wait(HANG_S)
        # The worker's bfloat16 region does not leak into this thread.
        assert ta.amp.get_autocast_dtype() == f16
        main_checked.set()
        thread.join(HANG_S)
        assert not thread.is_alive()
    assert seen == {"enabled_at_start": False, "dtype_at_start": f32, "main checked in time": True,
                    "dtype_inside": bf16}


# ------------------------------------------------------------ casts on tape
def test_lower_op_saves_low_precision_inputs() -> None:
    x, w = _leaf(8, 6), _leaf(6, 5, seed=1)
    with ta.amp.autocast():
        y = ta.matmul(x, w)
    saved = y.grad_fn.saved_tensors
    assert [t.dtype for t in saved] == [f16, f16]
    assert all(isinstance(t.grad_fn, Cast) for t in saved)  # the casts are on the tape
    # linear's float32 weight is cast by a node as well, served by the weight-cast cache.
    with ta.amp.autocast():
        y = ta.linear(x, w.detach().T.contiguous().requires_grad_())
    kept = y.grad_fn.saved_items()
    assert [a.dtype for a, _ in kept] == [f16, f16]
    assert all(isinstance(t.grad_fn, Cast) and t.dtype == f16 for _, t in kept)


def test_float32_leaves_receive_float32_gradients() -> None:
    x, w, b = _leaf(8, 6), _leaf(5, 6, seed=1), _leaf(5, seed=2)
    with ta.amp.autocast():
        loss = ta.relu(ta.linear(x, w, b)).exp().mean()
    assert loss.dtype == f32
    loss.backward()
    for leaf in (x, w, b):
        assert leaf.grad.dtype == f32 and leaf.grad.shape == leaf.shape


def test_low_precision_leaves_keep_their_dtype_under_fp32_ops() -> None:
    h = _leaf(3, 4, dtype=f16)
    with ta.amp.autocast():
        y = ta.exp(h).sum()
    assert y.dtype == f32
    y.backward()
    assert h.grad.dtype == f16


@pytest.mark.parametrize("dtype", [f16, bf16])
def test_gradients_identical_inside_and_outside_the_region(dtype: object) -> None:
    def run(backward_inside: bool) -> list:
        x, w, b = _leaf(8, 6), _leaf(5, 6, seed=1), _leaf(5, seed=2)
        with ta.amp.autocast(dtype=dtype):
            loss = ta.log_softmax(ta.linear(x, w, b), 1).mean() * 3.0
            if backward_inside:
                loss.backward()
        if not backward_inside:
            loss.backward()
        return [t.grad.numpy() for t in (x, w, b)]

    for inside, outside in zip(run(True), run(False)):
        assert inside.dtype == outside.dtype == np.float32
        np.testing.assert_array_equal(inside, outside)


def test_nothing_inside_an_op_is_cast_again() -> None:
    x, w, b = _leaf(8, 6), _leaf(5, 6, seed=1), _leaf(5, seed=2)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            y = ta.linear(x, w, b)
            loss = ta.cross_entropy(y, ta.tensor([0, 1, 2, 3, 4, 0, 1, 2]))
        loss.backward()
    forward_casts = [c for c in t.casts if c.phase == "forward"]
    # linear: x, W, b down; cross_entropy: its float16 input up. Nothing else.
    assert [(c.op, c.source, c.target) for c in forward_casts] == [
        ("linear", "float32", "float16")] * 3 + [("cross_entropy", "float16", "float32")]
    backward_casts = [c for c in t.casts if c.phase == "backward"]
    assert sorted((c.source, c.target) for c in backward_casts) == sorted(
        [("float32", "float16")] + [("float16", "float32")] * 3)
    assert all(c.kind == "backward" for c in backward_casts)


def test_backward_runs_with_autocast_off() -> None:
    seen = []
    x = _leaf(3, 4)
    with ta.amp.autocast():
        y = ta.exp(x)
        y.register_hook(lambda g: seen.append(ta.amp.is_autocast_enabled()))
        y.sum().backward()
    assert seen == [False]


# ----------------------------------------------------------------- overrides
def test_region_overrides_by_name() -> None:
    x = _leaf(3, 4)
    with ta.amp.autocast(lower_ops={"exp"}, fp32_ops=["matmul"]):
        assert ta.exp(x).dtype == f16
        assert (x @ x.T).dtype == f32
        with ta.amp.autocast(overrides={"exp": "fp32", "log": ta.amp.LOWER}):
            assert ta.exp(x).dtype == f32
            assert ta.log(x.abs() + 1).dtype == f16
            assert (x @ x.T).dtype == f32              # inherited from the outer region
        assert ta.exp(x).dtype == f16
    with ta.amp.autocast():
        assert ta.exp(x).dtype == f32


def test_override_names_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown op name 'expp'.*'exp'"):
        ta.amp.autocast(lower_ops={"expp"})
    with pytest.raises(ValueError, match="two tags"):
        ta.amp.autocast(lower_ops={"exp"}, fp32_ops={"exp"})
    with pytest.raises(TypeError, match="set of op names"):
        ta.amp.autocast(lower_ops="exp")
    with pytest.raises(ValueError, match="unknown precision tag"):
        ta.amp.autocast(overrides={"exp": "white"})
    with pytest.raises(ValueError, match="unknown op name"):
        ta.amp.set_op_precision("not_an_op", "lower")


def test_global_override_applies_in_every_region_until_reset() -> None:
    x = _leaf(3, 4)
    ta.amp.set_op_precision("exp", "lower")
    assert ta.amp.get_op_precision("exp") is ta.amp.LOWER
    assert ta.amp.op_table()["exp"].effective is ta.amp.LOWER
    assert ta.amp.op_table()["exp"].tag is ta.amp.FP32
    assert ta.exp(x).dtype == f32                      # outside autocast: nothing
    with ta.amp.autocast():
        assert ta.exp(x).dtype == f16
        with ta.amp.autocast(fp32_ops={"exp"}):        # a region beats the global table
            assert ta.exp(x).dtype == f32
    ta.amp.reset_op_precision("exp")
    with ta.amp.autocast():
        assert ta.exp(x).dtype == f32


def test_memoised_decisions_follow_overrides_set_later() -> None:
    # The tape memoises each op's decision and skips NEUTRAL ops while no override is in force: an
    # override made after those calls must still take effect, and stop when reset.
    x = _leaf(3, 4)
    with ta.amp.autocast():
        assert ta.exp(x).dtype == f32 and ta.relu(x).dtype == f32
    ta.amp.set_op_precision("exp", "lower")
    ta.amp.set_op_precision("relu", "lower")
    with ta.amp.autocast():
        assert ta.exp(x).dtype == f16 and ta.relu(x).dtype == f16
    ta.amp.reset_op_precision()
    with ta.amp.autocast():
        assert ta.exp(x).dtype == f32 and ta.relu(x).dtype == f32
        with ta.amp.autocast(lower_ops={"relu"}):
            assert ta.relu(x).dtype == f16


def test_regions_without_overrides_share_one_state() -> None:
    # A training loop enters a region per step: without overrides each installs the same (never
    # written) state; a region with overrides, another dtype or the cache off gets its own.
    def state_in(**kwargs: object) -> object:
        with ta.amp.autocast(**kwargs):
            return current_autocast()

    first, again = state_in(), state_in()
    assert first is again and first.overrides == {}
    for other in (state_in(dtype=bf16), state_in(cache_enabled=False), state_in(fp32_ops={"matmul"})):
        assert other is not first
    assert state_in(fp32_ops={"matmul"}).overrides == {"matmul": ta.amp.FP32}
    assert state_in(cache_enabled=False).cache is None and first.cache is not None


def test_overridden_promote_op_still_gets_equal_dtypes() -> None:
    a, b = _leaf(3), _leaf(3, dtype=f16, seed=1)
    with ta.amp.autocast(lower_ops={"add"}):
        assert (a + b).dtype == f16
    with ta.amp.autocast(neutral_ops={"mul"}):
        y = a * b                                      # NEUTRAL would mix: still promoted
        assert y.dtype == f32
    y.sum().backward()
    assert b.grad.dtype == f16


def test_op_table_is_derived_from_the_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    table = ta.amp.op_table()
    for name, tag in [("matmul", "LOWER"), ("linear", "LOWER"), ("exp", "FP32"), ("sum", "FP32"),
                      ("softmax", "FP32"), ("add", "PROMOTE"), ("cat", "PROMOTE"), ("relu", "NEUTRAL"),
                      ("reshape", "NEUTRAL"), ("cast", "NEUTRAL")]:
        assert table[name].tag.name == tag, name
    text = str(table)
    assert "LOWER:" in text and "matmul" in text and "y = exp(x); dx = gy * y" in text
    exp_class = table["exp"].cls
    monkeypatch.setattr(exp_class, "precision", ta.amp.LOWER)
    assert ta.amp.op_table()["exp"].tag is ta.amp.LOWER
    with ta.amp.autocast():
        assert ta.exp(_leaf(2)).dtype == f16             # the same attribute drives autocast


def test_op_table_leaves_out_user_functions_and_helpers() -> None:
    names = set(ta.amp.op_table())
    assert "scaledproduct" not in names and "recordingmatmul" not in names
    assert all(not n.endswith("grad") and not n.endswith("backward") for n in names)
    assert set(ta.amp.op_table().by_tag("lower")) >= {"matmul", "linear", "bmm"}


def test_op_table_names_are_unique() -> None:
    from tinyamp.amp.op_table import op_classes

    shared = {name: classes for name, classes in op_classes().items()
              if len({c.precision for c in classes}) > 1}
    assert shared == {}


# ------------------------------------------------------------ second order
@pytest.mark.parametrize("dtype", [f16, bf16])
def test_gradient_penalty_through_casts_matches_float32(dtype: object) -> None:
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal((16, 8))
    w1_np, w2_np = rng.standard_normal((12, 8)) * 0.3, rng.standard_normal((1, 12)) * 0.3

    def run(amp: bool) -> tuple:
        x = ta.tensor(x_np, dtype=f32, requires_grad=True)
        w1 = ta.tensor(w1_np, dtype=f32, requires_grad=True)
        w2 = ta.tensor(w2_np, dtype=f32, requires_grad=True)
        with ta.amp.autocast(dtype=dtype, enabled=amp):
            out = ta.linear(ta.tanh(ta.linear(x, w1)), w2).sum()
            (gx,) = ta.autograd.grad(out, x, create_graph=True)
            penalty = ((gx.float() ** 2).sum(1).sqrt() - 1.0).pow(2).mean()
            loss = out.float() * 0.01 + penalty
        loss.backward()
        return loss.item(), w1.grad.numpy(), w2.grad.numpy(), gx.dtype

    loss32, g1_32, g2_32, _ = run(False)
    loss16, g1_16, g2_16, gx_dtype = run(True)
    assert gx_dtype == f32                      # the input's gradient comes back in its dtype
    assert g1_16.dtype == g2_16.dtype == np.float32
    # A few roundings to float16 (eps 2**-11) or bfloat16 (eps 2**-8) on the way
    # through two GEMMs and a tanh per pass; about 5 eps of room.
    tol = 5e-3 if dtype == f16 else 3e-2
    np.testing.assert_allclose(loss16, loss32, rtol=tol)
    np.testing.assert_allclose(g1_16, g1_32, rtol=tol, atol=tol * np.abs(g1_32).max())
    np.testing.assert_allclose(g2_16, g2_32, rtol=tol, atol=tol * np.abs(g2_32).max())
