"""The embedding kernels (tinyamp/kernels/cuda/cuda_embedding.py) on the CUDA stand-in: the NumPy path's bits.

The gather is ``weight[idx]`` with NaN rows for out-of-range indices; the
scatter-add is ``numpy.add.at`` into a zeroed float32 array (index order, from
0.0), rounded once to the gradient's dtype, the padding row zeroed, an
out-of-range index reaching no row: what ``kernels/embedding.py`` computes
on NumPy arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import fused_drivers as fd
from tinyamp import backend
from tinyamp.kernels.cuda import cuda_embedding
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def scatter_numpy(gy, idx, rows, padding_idx):
    dim = gy.shape[-1]
    idx = idx.reshape(-1)
    values = gy.reshape(-1, dim).astype(np.float32)
    bad = (idx < 0) | (idx >= rows)
    values = np.where(bad[:, None], np.float32(0), values)
    out = np.zeros((rows, dim), np.float32)
    np.add.at(out, np.where(bad, 0, idx), values)
    if padding_idx is not None:
        out[padding_idx] = 0
    return out.astype(gy.dtype)


@pytest.mark.parametrize("dtype", [fd.F16, fd.BF16, fd.F32], ids=str)
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32], ids=str)
def test_gather_gives_the_rows_and_nan_for_an_index_out_of_range(cp, dtype, index_dtype) -> None:
    weight = np.random.default_rng(0).standard_normal((7, 5)).astype(dtype)
    idx = np.array([[0, 6, 3], [3, 7, -1]], index_dtype)
    got = cuda_embedding.gather(cp.asarray(weight), cp.asarray(idx)).get()
    want = weight[np.clip(idx, 0, 6)]
    want[1, 1:] = np.nan
    fd.assert_same_bits([got], [want], "gather")


@pytest.mark.parametrize("dtype", [fd.F16, fd.BF16, fd.F32], ids=str)
@pytest.mark.parametrize("rows, padding_idx", [(5, None), (70, 2), (200, None)])
def test_scatter_add_gives_numpys_add_at_bits(cp, dtype, rows, padding_idx) -> None:
    rng = np.random.default_rng(1)
    idx = rng.integers(0, rows, (6, 50)).astype(np.int64)
    idx[0, :10] = 1  # one row summed many times: the order shows
    gy = (rng.standard_normal((6, 50, 9)) * 10).astype(dtype)
    got = cuda_embedding.scatter_add(cp.asarray(gy.reshape(-1, 9)), cp.asarray(idx), rows, padding_idx).get()
    fd.assert_same_bits([got], [scatter_numpy(gy, idx, rows, padding_idx)], "scatter_add")


def test_scatter_add_sends_an_index_out_of_range_to_no_row(cp) -> None:
    idx = np.array([1, 9, 1, -3], np.int32)
    gy = np.ones((4, 3), np.float32)
    got = cuda_embedding.scatter_add(cp.asarray(gy), cp.asarray(idx), 4, None).get()
    assert (got[0] == 0).all() and (got[1] == 2).all() and (got[2:] == 0).all()
    fd.assert_same_bits([got], [scatter_numpy(gy, idx, 4, None)], "scatter_add out of range")


def test_one_launch_each_way_and_the_bytes(cp) -> None:
    weight = cp.ones((100, 8), np.float32)
    idx = cp.asarray(np.arange(12, dtype=np.int64) % 5)
    cp.counters.reset()
    y = cuda_embedding.gather(weight, idx)
    cuda_embedding.scatter_add(y, idx, 100, None)
    assert cp.counters.kernels() == {"tinyamp_embedding_i64_f32": 1, "tinyamp_embedding_backward_i64_f32": 1}
    moved = cp.counters.kernel_bytes()
    assert moved["tinyamp_embedding_i64_f32"] == {"read": 12 * 8 + 12 * 8 * 4, "written": 12 * 8 * 4}
    assert moved["tinyamp_embedding_backward_i64_f32"] == {"read": 12 * 8 + 12 * 8 * 4, "written": 100 * 8 * 4}
