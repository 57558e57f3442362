"""The weight-cast cache (tinyamp/amp/casting.py): one conversion per float32 weight and
version, kept across regions, keyed on identity and version; linear lowers its weights
itself from it, other LOWER ops get a Cast node per use over the cached copy.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.amp.casting import WeightCastCache
from tinyamp.kernels.round_through import LowCopy

f16, bf16, f32 = ta.float16, ta.bfloat16, ta.float32


def _leaf(*shape: int, dtype: object = f32, seed: int = 0) -> ta.Tensor:
    rng = np.random.default_rng(seed)
    return ta.tensor(rng.standard_normal(shape) * 0.5, dtype=dtype, requires_grad=True)


def _activation(*shape: int, seed: int = 5) -> ta.Tensor:
    """A float32 activation that needs a gradient but is no leaf (so linear keeps
    the cast weight for it, and it is never a weight-cache candidate itself)."""
    return _leaf(*shape, seed=seed) * 1.0


def _input(*shape: int, seed: int = 5) -> ta.Tensor:
    """A float32 input that needs no gradient (never a weight-cache candidate)."""
    rng = np.random.default_rng(seed)
    return ta.tensor(rng.standard_normal(shape) * 0.5, dtype=f32)


def _cast_count(trace: "ta.amp.Trace", phase: str = "forward") -> int:
    return sum(1 for c in trace.casts if c.phase == phase and c.converted)


def test_weight_is_converted_once_and_linear_lowers_it_itself() -> None:
    x1, x2, w = _activation(4, 6), _activation(2, 6, seed=1), _leaf(5, 6, seed=2)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            y1 = ta.linear(x1, w)
            y2 = ta.linear(x2, w)
            info = ta.amp.autocast_cache_info()
    assert y1.grad_fn.lowered[1] is y2.grad_fn.lowered[1]      # one conversion, one array
    assert y1.grad_fn.lowered[1].dtype == f16
    assert y1.grad_fn.saved_tensors[1] is w                     # no Cast node: the edge goes to w
    assert info["entries"] == 1 and info["hits"] == 1 and info["misses"] == 1
    assert t.cache_hits == 1 and t.cache_misses == 1
    # x's casts are nodes (ops 0 and 2); w's are done by linear (ops 1 and 3), and still reported.
    assert [(c.kind, c.op_index, c.fused) for c in t.casts] == [
        ("autocast", 1, False), ("autocast", 1, True), ("autocast", 3, False), ("cache hit", 3, True)]
    (y1.sum() + y2.sum()).backward()
    assert w.grad.dtype == f32


def test_other_lower_ops_get_a_cast_node_per_use_over_the_cached_copy() -> None:
    x1, x2, w = _activation(4, 6), _activation(2, 6, seed=1), _leaf(6, 5, seed=2)
    with ta.amp.autocast():
        y1 = ta.matmul(x1, w)
        y2 = ta.matmul(x2, w)
    w16_first, w16_again = y1.grad_fn.saved_tensors[1], y2.grad_fn.saved_tensors[1]
    assert w16_first.array is w16_again.array                    # one conversion, one array
    assert w16_first.grad_fn is not w16_again.grad_fn          # a Cast node per use
    assert w16_first._version is w._version                    # the copy changes when the weight does
    (y1.sum() + y2.sum()).backward()
    assert w.grad.dtype == f32


def test_cache_gradient_matches_uncached() -> None:
    def run(cache: bool) -> np.ndarray:
        x1, x2, w = _input(4, 6), _input(2, 6, seed=1), _leaf(5, 6, seed=2)
        with ta.amp.autocast(cache_enabled=cache):
            loss = ta.linear(x1, w).float().sum() + (ta.linear(x2, w).float() ** 2).sum()
        loss.backward()
        return w.grad.numpy()

    # Each use has its own Cast node, so each float16 gradient is upcast and the
    # uses are summed in float32, exactly as without the cache.
    np.testing.assert_array_equal(run(True), run(False))


def test_cache_disabled_casts_every_use() -> None:
    x, w = _input(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.trace() as t:
        with ta.amp.autocast(cache_enabled=False):
            ta.linear(x, w)
            ta.linear(x, w)
            assert ta.amp.autocast_cache_info()["entries"] == 0
    assert _cast_count(t) == 4 and t.cache_hits == 0


def test_only_float32_leaves_that_require_grad_are_cached() -> None:
    x = ta.tensor(np.ones((4, 6)), dtype=f32)          # no grad: an input, not a weight
    h = _leaf(5, 6) * 1.0                              # not a leaf
    with ta.amp.autocast():
        ta.linear(x, h)
        ta.linear(x, h)
        assert ta.amp.autocast_cache_info()["entries"] == 0


def test_inplace_update_invalidates_the_cached_cast() -> None:
    x, w = _activation(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.trace() as t:
        with ta.amp.autocast():
            y1 = ta.linear(x, w)
            with ta.no_grad():
                w.sub_(1.0)                               # an optimizer step inside the region
            y2 = ta.linear(x, w)
    # y1 - y2 = x @ 1^T: the second product used the updated weight (float16 outputs: 1e-2).
    np.testing.assert_allclose(y1.float().detach().numpy() - y2.float().detach().numpy(),
                               np.broadcast_to(x.detach().numpy().sum(1, keepdims=True), (4, 5)),
                               rtol=1e-2, atol=1e-2)
    assert t.cache_hits == 0 and t.cache_misses == 2
    # Converted again (on the CPU into the same array: the old copy's readers see the version move).
    np.testing.assert_array_equal(y2.grad_fn.lowered[1], w.detach().numpy().astype(np.float16))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y1.sum().backward()  # y1's node read the old weight: its backward must not use the new one


def test_cache_outlives_regions_until_the_weight_changes_or_it_is_cleared() -> None:
    x, w = _activation(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.autocast():
        with ta.amp.autocast():
            first = ta.linear(x, w).grad_fn.lowered[1]
        assert ta.amp.autocast_cache_info()["entries"] == 1   # inner exit keeps it
        with ta.amp.autocast(enabled=False):
            with ta.amp.autocast():                            # across a disabled region
                again = ta.linear(x, w).grad_fn.lowered[1]
        assert again is first
    assert ta.amp.autocast_cache_info()["entries"] == 1       # and so does the outermost exit (not PyTorch)
    with ta.amp.autocast():
        assert ta.linear(x, w).grad_fn.lowered[1] is first    # the next step converts nothing
    with ta.no_grad():
        w.mul_(2.0)                                            # an optimizer step: a new version
    with ta.amp.autocast():
        fresh = ta.linear(x, w).grad_fn.lowered[1]
    np.testing.assert_array_equal(fresh, w.detach().numpy().astype(np.float16))  # converted again
    assert ta.amp.autocast_cache_info()["misses"] == 2
    ta.amp.clear_autocast_cache()
    assert ta.amp.autocast_cache_info() == {"entries": 0, "hits": 0, "misses": 0, "bytes": 0}


def test_an_entry_goes_with_its_weight() -> None:
    x, w = _input(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.autocast():
        ta.linear(x, w)
    assert ta.amp.autocast_cache_info()["entries"] == 1
    del w
    assert ta.amp.autocast_cache_info()["entries"] == 0


def test_cache_keeps_dtypes_apart() -> None:
    x, w = _leaf(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.autocast():
        a = ta.linear(x, w)
        with ta.amp.autocast(dtype=bf16):
            b = ta.linear(x, w)
    assert a.dtype == f16 and b.dtype == bf16


def test_cast_cached_under_no_grad_keeps_its_link_to_the_weight() -> None:
    x, w = _leaf(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.autocast():
        with ta.no_grad():
            ta.linear(x, w)                      # the cast is made (and cached) here
        y = ta.linear(x, w)                      # a cache hit, with grad mode on
        assert y.grad_fn is not None
        y.float().sum().backward()
    assert w.grad is not None and w.grad.dtype == f32
    np.testing.assert_allclose(w.grad.numpy(), np.tile(x.detach().numpy().sum(0), (5, 1)), rtol=1e-2)


def test_cache_entry_needs_the_same_tensor_not_just_the_same_id() -> None:
    cache = WeightCastCache()
    w, other = _leaf(2, 2), _leaf(2, 2, seed=1)
    cast = w.detach().half().array
    cache.put(w, f16, cast)
    assert cache.get(w, f16) is cast
    # Pretend `other` got w's id after w was collected: the weak reference tells them apart.
    cache._entries[(id(other), f16)] = [weakref.ref(w), other._version[0], LowCopy(w.array, cast)]
    assert cache.get(other, f16) is None
    with ta.no_grad():
        w.add_(1.0)
    assert cache.get(w, f16) is None             # the version moved


def test_gradient_accumulation_reuses_the_cast_across_backwards() -> None:
    x, w = _leaf(4, 6), _leaf(5, 6, seed=2)
    with ta.amp.autocast():
        for _ in range(2):
            ta.linear(x, w).float().sum().backward()
    expected = 2 * np.tile(x.detach().numpy().sum(0), (5, 1))
    np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-2)


def test_cache_enabled_none_inherits_and_clear_empties() -> None:
    x, w = _input(4, 6), _leaf(5, 6, seed=2)
    assert ta.amp.is_autocast_cache_enabled()
    with ta.amp.autocast(cache_enabled=False):
        with ta.amp.autocast(cache_enabled=None):        # PyTorch's None: inherit
            assert not ta.amp.is_autocast_cache_enabled()
            ta.linear(x, w)
            assert ta.amp.autocast_cache_info()["entries"] == 0
    with ta.amp.autocast():
        with ta.amp.autocast(cache_enabled=None):
            ta.linear(x, w)
            assert ta.amp.autocast_cache_info()["entries"] == 1
            ta.amp.clear_autocast_cache()
            assert ta.amp.autocast_cache_info()["entries"] == 0
            ta.linear(x, w)
        assert ta.amp.autocast_cache_info()["misses"] == 1  # counted since the clear


@pytest.mark.parametrize("dtype", [f16, bf16], ids=["float16", "bfloat16"])
def test_cpu_linear_multiplies_the_cached_widening_with_the_same_bits(dtype: object) -> None:
    """On the CPU the cache keeps each copy's float32 widening for the GEMM, rewritten after every update."""
    ta.amp.clear_autocast_cache()
    results = {}
    for cache_enabled in (True, False):  # without the cache the GEMM widens the copies itself
        ta.manual_seed(0)
        model = ta.nn.Sequential(ta.nn.Linear(6, 5), ta.nn.ReLU(), ta.nn.Linear(5, 3))
        opt = ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = _input(4, 6), ta.tensor(np.array([0, 2, 1, 2]))
        run = []
        for _ in range(3):  # each step's update makes the copies stale: the next forward rewrites them
            opt.zero_grad()
            with ta.amp.autocast(dtype=dtype, cache_enabled=cache_enabled):
                out = model(x)
                loss = ta.nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            run += [out.array.copy(), loss.array.copy()] + [p.grad.array.copy() for p in model.parameters()]
        results[cache_enabled] = run
        if cache_enabled:
            copy = out.grad_fn.widened  # linear's inputs 1 and 2 (weight and bias): their float32 widenings
            assert sorted(copy) == [1, 2] and all(a.dtype == f32 for a in copy.values())
            np.testing.assert_array_equal(copy[1], out.grad_fn.lowered[1].astype(f32))
            info = ta.amp.autocast_cache_info()
            assert info["misses"] == 12 and info["hits"] == 0  # four weights, three steps
            assert info["bytes"] == sum(p.numel() * (2 + 4) for p in model.parameters())  # copy + widening
    for a, b in zip(*results.values()):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    ta.amp.clear_autocast_cache()
