"""``ta.cuda.CUDAGraph``, ``ta.cuda.graph`` and ``ta.cuda.graph_pool_handle``: PyTorch's graph API over CuPy's capture.

Each test runs on the CUDA stand-in (which records what it runs and refuses
what CUDA refuses while capturing) and, when there is one, on a GPU. What
only the stand-in can show (that nothing ran during the capture) is checked
there only.
"""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import backend


def _fresh(value) -> bool:
    """True when a float32 array holds the garbage of fresh stand-in memory (all-ones bytes: NaN)."""
    return value.tobytes() == bytes([0xFF]) * value.nbytes


def test_a_captured_block_runs_at_replay_on_the_current_contents_of_its_inputs(cuda_backend) -> None:
    x = ta.tensor([1.0, 2.0, 3.0], device="cuda")
    w = ta.tensor([0.5, 0.5, 0.5], device="cuda")
    two = ta.tensor(2.0, device="cuda")
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g):
        y = x * two + w
        w.array[...] = y.array  # in place, as an optimizer writes
    if backend.standin_active():  # CUDA records the block without running it
        assert _fresh(y.array.get()) and w.tolist() == [0.5, 0.5, 0.5]
    g.replay()
    assert y.tolist() == [2.5, 4.5, 6.5] and w.tolist() == [2.5, 4.5, 6.5]
    x.array[...] = ta.tensor([10.0, 20.0, 30.0], device="cuda").array  # a new batch in the static input
    g.replay()
    assert y.tolist() == [22.5, 44.5, 66.5] and w.tolist() == [22.5, 44.5, 66.5]


def test_each_replay_draws_what_the_same_eager_draws_would(cuda_backend) -> None:
    """A draw in a capture reads the generator's seed and offset, written before each replay (PyTorch's
    graph-safe Philox): K replays draw the K eager draws' numbers, and eager draws continue after them."""
    x = ta.ones(64, device="cuda")
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g):
        y = ta.nn.functional.dropout(x, 0.5)
        z = ta.randn(3, device="cuda")
    state = ta.cuda.get_rng_state()  # the capture drew nothing from the generator
    replayed = []
    for _ in range(4):
        g.replay()
        replayed.append((y.cpu().numpy(), z.cpu().numpy()))
    after_replays = ta.rand(5, device="cuda").cpu().numpy()
    ta.cuda.set_rng_state(state)
    eager = [(ta.nn.functional.dropout(x, 0.5).cpu().numpy(), ta.randn(3, device="cuda").cpu().numpy())
             for _ in range(4)]
    for (ry, rz), (ey, ez) in zip(replayed, eager):
        np.testing.assert_array_equal(ry, ey)
        np.testing.assert_array_equal(rz, ez)
    assert len({m.tobytes() for m, _ in replayed}) == 4  # a new mask at each replay
    np.testing.assert_array_equal(ta.rand(5, device="cuda").cpu().numpy(), after_replays)
    ta.manual_seed(11)  # a reseed after the capture reaches the graph too
    g.replay()
    first = y.cpu().numpy()
    ta.manual_seed(11)
    np.testing.assert_array_equal(ta.nn.functional.dropout(x, 0.5).cpu().numpy(), first)


def test_graph_misuse_raises_pytorchs_errors(cuda_backend) -> None:
    g = ta.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=r"^Called CUDAGraph::replay without a preceding successful capture\.$"):
        g.replay()
    with pytest.raises(RuntimeError, match=r"^Called CUDAGraph::pool\(\) without a preceding successful capture\.$"):
        g.pool()
    with pytest.raises(RuntimeError, match=r"^CUDA graphs must be captured on a non-default stream\. \(However, "
                                           r"after capture, it's ok to replay them on the default stream\.\)$"):
        g.capture_begin()  # the current stream is the default one outside ta.cuda.graph
    with pytest.raises(RuntimeError, match=r"no capture in progress"):
        g.capture_end()
    x = ta.ones(3, device="cuda")
    with ta.cuda.graph(g):
        x.array[...] = 2.0
    with pytest.raises(RuntimeError, match=r"^This CUDAGraph instance already owns a captured graph\. To capture a "
                                           r"new graph, create a new instance\.$"):
        with ta.cuda.graph(g):
            pass
    with pytest.raises(ValueError, match=r"capture_error_mode must be one of \('global', 'thread_local', "
                                         r"'relaxed'\), got 'strict'"):
        with ta.cuda.graph(ta.cuda.CUDAGraph(), capture_error_mode="strict"):
            pass
    with pytest.raises(TypeError, match=r"pool must come from ta\.cuda\.graph_pool_handle\(\)"):
        with ta.cuda.graph(ta.cuda.CUDAGraph(), pool=object()):
            pass
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()


def test_an_error_inside_the_capture_ends_it_and_propagates(cuda_backend) -> None:
    g = ta.cuda.CUDAGraph()
    with pytest.raises(KeyError, match="from the block"):
        with ta.cuda.graph(g):
            assert ta.cuda.is_current_stream_capturing()
            raise KeyError("from the block")
    assert not ta.cuda.is_current_stream_capturing()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    h = ta.cuda.CUDAGraph()  # and the next capture works
    x = ta.zeros(2, device="cuda")
    with ta.cuda.graph(h):
        x.array[...] = 5.0
    h.replay()
    assert x.tolist() == [5.0, 5.0]


@pytest.mark.parametrize("read, what", [
    (lambda t: t.sum().item(), r"Tensor\.item\(\)"),
    (lambda t: float(t.sum()), r"Tensor\.item\(\)"),
    (lambda t: t.numpy(), r"Tensor\.numpy\(\)"),
    (lambda t: print(t), r"repr\(tensor\)"),
    (lambda t: ta.cuda.synchronize(), r"ta\.cuda\.synchronize\(\)"),
    (lambda t: t + ta.from_numpy(np.ones(3, np.float32)).to("cuda"), r"a copy of a CPU array to cuda:0"),
])
def test_a_host_read_or_upload_inside_a_capture_is_refused_with_the_line_that_asked(cuda_backend, read, what) -> None:
    t = ta.ones(3, device="cuda")
    with pytest.raises(RuntimeError) as info:
        with ta.cuda.graph(ta.cuda.CUDAGraph()):
            read(t)
    message = str(info.value)
    assert re.search(what + r".* inside a CUDA graph capture, at .*test_cuda_graphs\.py:\d+ \(<lambda>\)", message), \
        message
    assert "captured work runs only when the graph is replayed" in message or "CUDA cannot copy host memory" in message


def test_graphs_can_share_a_pool_and_their_memory_is_counted(cuda_backend) -> None:
    gc.collect()  # the pools of earlier tests' graphs go now, not in the middle of this one
    pool = ta.cuda.graph_pool_handle()
    x, two = ta.ones(1000, device="cuda"), ta.tensor(2.0, device="cuda")
    before = ta.cuda.memory_allocated()
    first, second = ta.cuda.CUDAGraph(), ta.cuda.CUDAGraph()
    with ta.cuda.graph(first, pool=pool):
        y = x * two
    with ta.cuda.graph(second, pool=first.pool()):
        z = y + x
    assert first.pool() is second.pool() is pool
    assert ta.cuda.memory_allocated() == before + 2 * 4096  # y and z, each rounded to 512-byte units
    assert pool.used_bytes() == 2 * 4096 and ta.cuda.max_memory_allocated() >= before + 2 * 4096
    first.replay()
    second.replay()  # in capture order, as graphs sharing a pool must be
    assert z[:2].tolist() == [3.0, 3.0]


def test_a_graphs_pool_is_counted_while_the_graph_lives_and_not_after(cuda_backend) -> None:
    gc.collect()
    x, two = ta.ones(1000, device="cuda"), ta.tensor(2.0, device="cuda")
    reserved = ta.cuda.memory_reserved()
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g):
        y = x * two
    del y
    assert ta.cuda.memory_reserved() == reserved + 4096  # the graph's pool keeps y's block for the replays
    del g
    gc.collect()
    assert ta.cuda.memory_reserved() == reserved  # the pool went with its graph and is not counted


def test_memory_a_graph_uses_is_never_handed_to_arrays_outside_it(cuda_backend) -> None:
    x, three = ta.arange(256, dtype=ta.float32, device="cuda"), ta.tensor(3.0, device="cuda")
    out = ta.zeros(256, device="cuda")
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g):
        for _ in range(3):  # temporaries, freed during the capture: their blocks stay the graph's
            temporary = x * three
            out.array[...] = temporary.array + out.array
    del temporary
    eager = [ta.full((256,), float(i), device="cuda") for i in range(8)]  # same sizes as the temporaries
    g.replay()
    assert [t[0].item() for t in eager] == [float(i) for i in range(8)]  # untouched by the replay
    np.testing.assert_array_equal(out.numpy(), np.arange(256) * 9.0)


def test_a_capture_whose_pool_must_grow_needs_relaxed_mode(cuda_backend) -> None:
    """CuPy's pool grows with cudaMalloc, an unsafe call in global mode; tinyamp defaults to relaxed."""
    x, two = ta.ones(64, device="cuda"), ta.tensor(2.0, device="cuda")
    with pytest.raises(RuntimeError, match=r"cudaErrorStreamCapture|operation not permitted when stream is capturing"):
        with ta.cuda.graph(ta.cuda.CUDAGraph(), capture_error_mode="global"):
            x * two
    pool = ta.cuda.graph_pool_handle()
    with ta.cuda.graph(ta.cuda.CUDAGraph(), pool=pool):  # relaxed: the pool grows
        x * two
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g, pool=pool, capture_error_mode="global"):  # the freed block is reused: no growth
        y = x * two
    g.replay()
    assert y[:2].tolist() == [2.0, 2.0]


def test_python_numbers_in_a_capture_become_device_constants_the_graph_holds(cuda_backend) -> None:
    from tinyamp.autograd import scalars

    x = ta.tensor([1.0, 2.0], device="cuda")
    x * 3.0  # 3.0 becomes a cached device constant outside the capture
    g = ta.cuda.CUDAGraph()
    with ta.cuda.graph(g):
        y = x * 3.0 + 0.25  # 3.0 from the cache; 0.25 new: filled by a kernel, no host copy
    scalars._DEVICE_SCALARS.clear()  # the cache lets go of its constants; the graph still reads them
    for _ in range(20):  # and the pool hands their memory to other arrays (on a GPU, and the stand-in)
        ta.full((), 99.0, device="cuda") * ta.ones((), device="cuda")
    g.replay()
    assert y.tolist() == [3.25, 6.25]
