"""Tests for tinyamp.data: IDX files, MNIST loading and the DataLoader."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyamp.data import (
    DataLoader,
    IDXError,
    TensorDataset,
    load_mnist,
    read_idx,
    write_idx,
)
from tests.support import REPO

BUNDLED = REPO / "tinyamp" / "data" / "mnist5k"


# ------------------------------------------------------------------- IDX


IDX_ARRAYS = {
    "uint8-3d": np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
    "int8": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
    "int16": np.array([[-32768, 0], [1, 32767]], dtype=np.int16),
    "int32": np.array([-(2**31), -1, 0, 7, 2**31 - 1], dtype=np.int32),
    "float32": np.array([[0.5, -1.25, np.inf], [1e-30, np.nan, 3e38]], dtype=np.float32),
    "float64": np.array([np.pi, -0.0, 1e-300], dtype=np.float64),
    "empty": np.zeros((0, 28, 28), dtype=np.uint8),
}


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("name", sorted(IDX_ARRAYS))
def test_idx_roundtrip(tmp_path, name, suffix):
    array = IDX_ARRAYS[name]
    path = tmp_path / f"{name}-idx{suffix}"
    write_idx(path, array)
    back = read_idx(path)
    assert back.dtype == array.dtype and back.dtype.isnative
    assert back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    assert back.flags.writeable
    assert path.read_bytes()[:2] == (b"\x1f\x8b" if suffix else b"\x00\x00")


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(["u1", "i1", "i2", "i4", "f4", "f8"]),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    big_endian_input=st.booleans(),
    data=st.data(),
)
def test_idx_roundtrip_any_shape(tmp_path_factory, dtype, shape, big_endian_input, data):
    n = int(np.prod(shape))
    raw = data.draw(st.binary(min_size=n * np.dtype(dtype).itemsize,
                              max_size=n * np.dtype(dtype).itemsize))
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if big_endian_input:
        array = array.astype(array.dtype.newbyteorder(">"))
    path = tmp_path_factory.mktemp("idx") / "a.idx"
    write_idx(path, array)
    back = read_idx(path)
    # Compare bytes so NaN payloads count as equal.
    assert back.shape == array.shape
    assert back.tobytes() == array.astype(back.dtype).tobytes()


def test_idx_header_is_the_mnist_layout(tmp_path):
    path = tmp_path / "images"
    write_idx(path, np.zeros((3, 28, 28), dtype=np.uint8))
    raw = path.read_bytes()
    assert int.from_bytes(raw[:4], "big") == 2051  # MNIST's images magic
    assert [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(3)] == [3, 28, 28]
    assert len(raw) == 16 + 3 * 28 * 28
    write_idx(path, np.zeros(5, dtype=np.uint8))
    assert int.from_bytes(path.read_bytes()[:4], "big") == 2049  # labels magic


def test_idx_int32_is_big_endian_on_disk(tmp_path):
    path = tmp_path / "a.idx"
    write_idx(path, np.array([1], dtype=np.int32))
    assert path.read_bytes() == bytes([0, 0, 0x0C, 1, 0, 0, 0, 1, 0, 0, 0, 1])


def test_gzip_is_detected_by_magic_not_by_name(tmp_path):
    array = IDX_ARRAYS["int32"]
    write_idx(tmp_path / "a.gz", array)
    write_idx(tmp_path / "b", array)
    (tmp_path / "a.gz").rename(tmp_path / "gzip-without-suffix")
    (tmp_path / "b").rename(tmp_path / "raw-with-suffix.gz")
    np.testing.assert_array_equal(read_idx(tmp_path / "gzip-without-suffix"), array)
    np.testing.assert_array_equal(read_idx(tmp_path / "raw-with-suffix.gz"), array)


def test_gzip_output_is_deterministic(tmp_path):
    write_idx(tmp_path / "a.gz", IDX_ARRAYS["uint8-3d"])
    write_idx(tmp_path / "b.gz", IDX_ARRAYS["uint8-3d"])
    assert (tmp_path / "a.gz").read_bytes() == (tmp_path / "b.gz").read_bytes()


def test_idx_error_is_a_value_error():
    assert issubclass(IDXError, ValueError)


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_payload(tmp_path, compress):
    path = tmp_path / "short"
    header = bytes([0, 0, 0x0C, 2, 0, 0, 0, 2, 0, 0, 0, 3])  # int32 (2, 3): 24 bytes
    content = header + bytes(20)
    path.write_bytes(gzip.compress(content) if compress else content)
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert "truncated" in message
    assert "expected 24 payload bytes" in message
    assert "found 20" in message


def test_trailing_bytes(tmp_path):
    path = tmp_path / "long"
    path.write_bytes(bytes([0, 0, 0x08, 1, 0, 0, 0, 4]) + bytes(7))
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert "expected 4 payload bytes" in message and "found 7" in message
    assert "3 trailing bytes" in message


def test_truncated_header(tmp_path):
    path = tmp_path / "header"
    path.write_bytes(bytes([0, 0, 0x08, 3, 0, 0, 0, 4]))  # 3 dims, only 1 size
    with pytest.raises(IDXError, match="truncated header") as info:
        read_idx(path)
    assert str(path) in str(info.value)
    assert "16 header bytes, found 8" in str(info.value)


@pytest.mark.parametrize("content", [b"", b"\x00\x00"])
def test_too_short_for_magic(tmp_path, content):
    path = tmp_path / "tiny"
    path.write_bytes(content)
    with pytest.raises(IDXError, match="4-byte magic") as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_wrong_magic(tmp_path):
    path = tmp_path / "not-idx"
    path.write_bytes(b"PK\x03\x04" + bytes(100))  # a zip file, say
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert "not an IDX file" in message
    assert "two zero bytes" in message
    assert "50 4b 03 04" in message


def test_unknown_type_code(tmp_path):
    path = tmp_path / "odd-type"
    path.write_bytes(bytes([0, 0, 0x07, 1, 0, 0, 0, 1, 0]))
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert "0x07" in message and "0x08 (uint8)" in message


@pytest.mark.parametrize("damage", ["garbage", "cut", "crc"])
def test_corrupt_gzip(tmp_path, damage):
    good = gzip.compress(bytes([0, 0, 0x08, 1, 0, 0, 1, 0]) + bytes(range(256)))
    if damage == "garbage":
        content = b"\x1f\x8b" + b"this is not deflate data" * 4
    elif damage == "cut":
        content = good[: len(good) // 2]
    else:  # flip a byte of the CRC-32 in the gzip trailer
        content = good[:-8] + bytes([good[-8] ^ 0xFF]) + good[-7:]
    path = tmp_path / "broken.gz"
    path.write_bytes(content)
    with pytest.raises(IDXError) as info:
        read_idx(path)
    message = str(info.value)
    assert str(path) in message
    assert "not a valid gzip stream" in message


def test_missing_idx_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "nope")


@pytest.mark.parametrize("dtype", [np.int64, np.float16, np.bool_, np.uint16])
def test_write_rejects_dtypes_idx_cannot_hold(tmp_path, dtype):
    path = tmp_path / "a.idx"
    with pytest.raises(IDXError) as info:
        write_idx(path, np.zeros(3, dtype=dtype))
    assert str(np.dtype(dtype)) in str(info.value)
    assert str(path) in str(info.value)
    assert not path.exists()


# --------------------------------------------------------- bundled MNIST


def test_bundled_files_match_provenance():
    provenance = (BUNDLED / "PROVENANCE.md").read_text()
    for name in ("mnist-5k-images-idx3-ubyte.gz", "mnist-5k-labels-idx1-ubyte.gz"):
        digest = hashlib.sha256((BUNDLED / name).read_bytes()).hexdigest()
        assert digest in provenance, name


def test_bundled_split_sizes_and_types():
    x_train, y_train = load_mnist()
    x_test, y_test = load_mnist(split="test")
    assert x_train.shape == (4000, 28, 28) and x_train.dtype == np.uint8
    assert x_test.shape == (1000, 28, 28) and x_test.dtype == np.uint8
    assert y_train.shape == (4000,) and y_train.dtype == np.int64
    assert y_test.shape == (1000,) and y_test.dtype == np.int64
    for y in (y_train, y_test):
        assert y.min() == 0 and y.max() == 9
    assert np.bincount(y_train, minlength=10).tolist() == [400] * 10
    assert np.bincount(y_test, minlength=10).tolist() == [100] * 10
    assert x_train.max() > 200  # real pixels, not a blank placeholder


def test_bundled_split_is_shuffled():
    _, y_train = load_mnist()
    # The files are sorted by label; the split must mix digits early on.
    assert len(set(y_train[:50].tolist())) == 10


def test_bundled_train_and_test_are_disjoint():
    x_train, _ = load_mnist()
    x_test, _ = load_mnist(split="test")
    train_rows = {row.tobytes() for row in x_train}
    test_rows = {row.tobytes() for row in x_test}
    assert len(train_rows) == 4000 and len(test_rows) == 1000
    assert not train_rows & test_rows


def test_bundled_split_together_is_the_whole_subset():
    x_train, y_train = load_mnist()
    x_test, y_test = load_mnist(split="test")
    images = read_idx(BUNDLED / "mnist-5k-images-idx3-ubyte.gz")
    labels = read_idx(BUNDLED / "mnist-5k-labels-idx1-ubyte.gz")
    original = {(row.tobytes(), int(y)) for row, y in zip(images, labels)}
    split = {(row.tobytes(), int(y)) for row, y in zip(np.concatenate([x_train, x_test]),
                                                       np.concatenate([y_train, y_test]))}
    assert split == original


def test_bundled_split_is_reproducible_and_returns_copies():
    x1, y1 = load_mnist()
    x1[:] = 0
    y1[:] = -1
    x2, y2 = load_mnist()
    assert x2.any() and (y2 >= 0).all()
    x3, y3 = load_mnist()
    np.testing.assert_array_equal(x2, x3)
    np.testing.assert_array_equal(y2, y3)


def _split_fingerprint() -> str:
    h = hashlib.sha256()
    for split in ("train", "test"):
        x, y = load_mnist(split=split)
        h.update(x.tobytes())
        h.update(y.tobytes())
    return h.hexdigest()


def test_bundled_split_is_the_same_in_another_process():
    code = (
        "import hashlib\n"
        "from tinyamp.data import load_mnist\n"
        "h = hashlib.sha256()\n"
        "for s in ('train', 'test'):\n"
        "    x, y = load_mnist(split=s)\n"
        "    h.update(x.tobytes()); h.update(y.tobytes())\n"
        "print(h.hexdigest())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TINYAMP_DATA"}
    root = str(REPO)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == _split_fingerprint()


def test_bundled_split_never_moves():
    # Pinned: a change here changes every accuracy anyone has reported on the
    # bundled test set. Only update it deliberately.
    x, y = load_mnist(split="test")
    assert hashlib.sha256(y.tobytes()).hexdigest()[:16] == BUNDLED_TEST_LABELS_SHA
    assert hashlib.sha256(x.tobytes()).hexdigest()[:16] == BUNDLED_TEST_IMAGES_SHA


BUNDLED_TEST_LABELS_SHA = "3de52f154aeab16b"
BUNDLED_TEST_IMAGES_SHA = "c2dbb36a24151e13"


def test_flatten_and_normalize():
    x, _ = load_mnist(split="test")
    flat, _ = load_mnist(split="test", flatten=True)
    assert flat.shape == (1000, 784) and flat.dtype == np.uint8
    np.testing.assert_array_equal(flat, x.reshape(1000, 784))
    norm, _ = load_mnist(split="test", flatten=True, normalize=True)
    assert norm.dtype == np.float32 and norm.shape == (1000, 784)
    assert norm.min() == 0.0 and norm.max() == 1.0
    np.testing.assert_allclose(norm, flat / 255.0, rtol=1e-6)


@pytest.mark.parametrize("split", ["validation", "Train", ""])
def test_bad_split(split):
    with pytest.raises(ValueError, match="split must be 'train' or 'test'"):
        load_mnist(split=split)


def test_empty_env_var_means_bundled(monkeypatch):
    monkeypatch.setenv("TINYAMP_DATA", "")
    assert load_mnist(split="test")[0].shape == (1000, 28, 28)


# ------------------------------------------------------- full MNIST folder


def _fake_mnist(folder: Path, n_train: int = 20, n_test: int = 10, seed: int = 0) -> dict:
    """Write the four standard files (train raw, test gzip) with random content."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n, suffix in (("train", n_train, ""), ("t10k", n_test, ".gz")):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        write_idx(folder / f"{split}-images-idx3-ubyte{suffix}", images)
        write_idx(folder / f"{split}-labels-idx1-ubyte{suffix}", labels)
        arrays["test" if split == "t10k" else split] = (images, labels)
    return arrays


def test_full_mnist_folder(tmp_path):
    written = _fake_mnist(tmp_path)
    for split, n in (("train", 20), ("test", 10)):
        x, y = load_mnist(tmp_path, split=split)
        assert x.shape == (n, 28, 28) and x.dtype == np.uint8
        assert y.shape == (n,) and y.dtype == np.int64
        np.testing.assert_array_equal(x, written[split][0])
        np.testing.assert_array_equal(y, written[split][1])


@pytest.mark.parametrize("normalize", [False, True])
def test_empty_mnist_files_give_empty_arrays(tmp_path, normalize):
    # Files holding 0 images (a valid IDX header, no payload): every form is empty, never an error.
    _fake_mnist(tmp_path, n_train=0, n_test=0)
    for flatten, shape in ((False, (0, 28, 28)), (True, (0, 784))):
        x, y = load_mnist(tmp_path, split="train", flatten=flatten, normalize=normalize)
        assert x.shape == shape and x.dtype == (np.float32 if normalize else np.uint8)
        assert y.shape == (0,) and y.dtype == np.int64


def test_full_mnist_root_as_string(tmp_path):
    _fake_mnist(tmp_path)
    assert load_mnist(str(tmp_path), split="test")[0].shape == (10, 28, 28)


def test_env_var_is_honoured(tmp_path, monkeypatch):
    written = _fake_mnist(tmp_path)
    monkeypatch.setenv("TINYAMP_DATA", str(tmp_path))
    x, y = load_mnist()
    assert x.shape == (20, 28, 28)
    np.testing.assert_array_equal(y, written["train"][1])


def test_root_argument_beats_env_var(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _fake_mnist(tmp_path / "a", n_train=20)
    _fake_mnist(tmp_path / "b", n_train=30)
    monkeypatch.setenv("TINYAMP_DATA", str(tmp_path / "a"))
    assert len(load_mnist(tmp_path / "b")[0]) == 30


def test_missing_folder(tmp_path, monkeypatch):
    folder = tmp_path / "no-such-folder"
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(folder)
    message = str(info.value)
    assert str(folder) in message
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        assert name in message
    assert "TINYAMP_DATA" in message and "full MNIST" in message
    # The same message when the folder comes from the environment.
    monkeypatch.setenv("TINYAMP_DATA", str(folder))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_mnist()


def test_missing_file(tmp_path):
    _fake_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    load_mnist(tmp_path, split="train")  # train is still complete
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(tmp_path, split="test")
    message = str(info.value)
    assert "'t10k-labels-idx1-ubyte' (or 't10k-labels-idx1-ubyte.gz') not found" in message
    assert str(tmp_path) in message
    assert "t10k-images-idx3-ubyte" in message  # names everything the split needs
    assert "TINYAMP_DATA" in message and "full MNIST" in message


def test_count_mismatch(tmp_path):
    _fake_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(19, dtype=np.uint8))
    with pytest.raises(ValueError, match="20 images but .* holds 19 labels"):
        load_mnist(tmp_path)


def test_labels_out_of_range(tmp_path):
    _fake_mnist(tmp_path)
    labels = np.zeros(20, dtype=np.uint8)
    labels[[3, 7]] = 10
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels)
    with pytest.raises(ValueError) as info:
        load_mnist(tmp_path)
    message = str(info.value)
    assert "mislabelled" in message and "0..9" in message
    assert "train-labels-idx1-ubyte" in message and "2 label(s)" in message


def test_images_not_28_by_28(tmp_path):
    _fake_mnist(tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((20, 32, 32), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"\(N, 28, 28\), found shape \(20, 32, 32\)"):
        load_mnist(tmp_path)


def test_swapped_files(tmp_path):
    _fake_mnist(tmp_path)
    images = tmp_path / "train-images-idx3-ubyte"
    labels = tmp_path / "train-labels-idx1-ubyte"
    images_bytes, labels_bytes = images.read_bytes(), labels.read_bytes()
    images.write_bytes(labels_bytes)
    labels.write_bytes(images_bytes)
    with pytest.raises(ValueError, match="28, 28"):
        load_mnist(tmp_path)


def test_corrupt_file_in_folder_names_it(tmp_path):
    _fake_mnist(tmp_path)
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(IDXError, match="t10k-images-idx3-ubyte.gz"):
        load_mnist(tmp_path, split="test")


# ------------------------------------------------------------- DataLoader


def _toy(n: int = 10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return TensorDataset(x, y)


def test_tensor_dataset():
    ds = _toy()
    assert len(ds) == 10
    row, label = ds[4]
    np.testing.assert_array_equal(row, [12, 13, 14])
    assert label == 4


def test_tensor_dataset_length_mismatch():
    with pytest.raises(ValueError, match=r"found sizes \[10, 9\]"):
        TensorDataset(np.zeros((10, 3)), np.zeros(9))
    with pytest.raises(ValueError, match="at least one"):
        TensorDataset()
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(np.float32(1.0))


def test_loader_batches_in_order():
    loader = DataLoader(_toy(), batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    assert [b[1].shape for b in batches] == [(4,), (4,), (2,)]
    assert all(isinstance(b, tuple) and len(b) == 2 for b in batches)
    assert isinstance(batches[0][0], np.ndarray) and batches[0][0].dtype == np.float32
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), np.arange(10))


def test_loader_drop_last():
    loader = DataLoader(_toy(), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert [b[1].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    exact = DataLoader(_toy(8), batch_size=4, drop_last=True)
    assert len(exact) == 2 and len(list(exact)) == 2
    assert len(DataLoader(_toy(3), batch_size=4, drop_last=True)) == 0
    assert list(DataLoader(_toy(3), batch_size=4, drop_last=True)) == []


@pytest.mark.parametrize("batch_size", [1, 3, 10, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_len_matches_iteration(batch_size, drop_last):
    loader = DataLoader(_toy(10), batch_size=batch_size, shuffle=True, seed=1,
                        drop_last=drop_last)
    assert len(loader) == len(list(loader))


def test_every_sample_once_per_epoch():
    loader = DataLoader(_toy(103), batch_size=16, shuffle=True, seed=7)
    for _ in range(3):
        seen = np.concatenate([y for _, y in loader])
        assert sorted(seen.tolist()) == list(range(103))


def test_rows_stay_together_when_shuffled():
    for x, y in DataLoader(_toy(50), batch_size=8, shuffle=True, seed=3):
        np.testing.assert_array_equal(x[:, 0], y * 3)


def test_seeded_shuffle_is_reproducible_and_differs_per_epoch():
    def epochs(loader, n=3):
        return [np.concatenate([y for _, y in loader]).tolist() for _ in range(n)]

    first = epochs(DataLoader(_toy(50), batch_size=8, shuffle=True, seed=0))
    again = epochs(DataLoader(_toy(50), batch_size=8, shuffle=True, seed=0))
    other = epochs(DataLoader(_toy(50), batch_size=8, shuffle=True, seed=1))
    assert first == again
    assert first != other
    assert first[0] != first[1] != first[2]
    assert first[0] != list(range(50))

    # set_epoch replays one epoch on its own (resuming a run).
    loader = DataLoader(_toy(50), batch_size=8, shuffle=True, seed=0)
    loader.set_epoch(2)
    assert epochs(loader, 1)[0] == first[2]


def test_shuffle_with_generator():
    a = DataLoader(_toy(30), batch_size=5, shuffle=True,
                   generator=np.random.default_rng(5))
    b = DataLoader(_toy(30), batch_size=5, shuffle=True,
                   generator=np.random.default_rng(5))
    ya = [np.concatenate([y for _, y in a]).tolist() for _ in range(2)]
    yb = [np.concatenate([y for _, y in b]).tolist() for _ in range(2)]
    assert ya == yb and ya[0] != ya[1]
    assert sorted(ya[0]) == list(range(30))


def test_unseeded_shuffle_is_a_permutation():
    ys = np.concatenate([y for _, y in DataLoader(_toy(40), batch_size=7, shuffle=True)])
    assert sorted(ys.tolist()) == list(range(40))


def test_unseeded_shuffle_follows_manual_seed():
    ta = _tinyamp()

    def one_epoch():
        loader = DataLoader(_toy(40), batch_size=7, shuffle=True)
        return np.concatenate([y for _, y in loader]).tolist()

    ta.manual_seed(123)
    first = one_epoch()
    ta.manual_seed(123)
    assert one_epoch() == first


def test_shuffle_with_tinyamp_generator():
    ta = _tinyamp()
    orders = []
    for _ in range(2):
        loader = DataLoader(_toy(30), batch_size=4, shuffle=True,
                            generator=ta.Generator().manual_seed(9))
        orders.append([np.concatenate([y for _, y in loader]).tolist() for _ in range(2)])
    assert orders[0] == orders[1] and orders[0][0] != orders[0][1]
    with pytest.raises(TypeError, match="tinyamp.Generator or a numpy.random.Generator"):
        DataLoader(_toy(), shuffle=True, generator=42)


def test_loader_argument_errors():
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(_toy(), batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(_toy(), batch_size=2.5)
    with pytest.raises(ValueError, match="seed or generator"):
        DataLoader(_toy(), shuffle=True, seed=0, generator=np.random.default_rng())


def test_loader_over_a_plain_dataset():
    class Squares:
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return np.full(2, i, dtype=np.float32), i * i

    batches = list(DataLoader(Squares(), batch_size=3))
    assert [b[0].shape for b in batches] == [(3, 2), (3, 2), (1, 2)]
    np.testing.assert_array_equal(batches[1][1], [9, 16, 25])


def test_loader_over_bundled_mnist():
    x, y = load_mnist(normalize=True, flatten=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True, seed=0)
    assert len(loader) == 32
    xb, yb = next(iter(loader))
    assert xb.shape == (128, 784) and xb.dtype == np.float32
    assert yb.shape == (128,) and yb.dtype == np.int64


# ----------------------------------------- DataLoader over tinyamp Tensors


def _tinyamp():
    """The tinyamp package."""
    import tinyamp

    return tinyamp


def test_loader_over_tensors(device):
    ta = _tinyamp()
    x = ta.tensor(np.arange(30, dtype=np.float32).reshape(10, 3), device=device)
    y = ta.tensor(np.arange(10, dtype=np.int64), device=device)
    ds = TensorDataset(x, y)
    assert len(ds) == 10
    loader = DataLoader(ds, batch_size=4, shuffle=True, seed=0)
    seen = []
    for xb, yb in loader:
        assert isinstance(xb, ta.Tensor) and isinstance(yb, ta.Tensor)
        assert xb.device == x.device and yb.device == y.device
        assert xb.dtype == x.dtype and yb.dtype == y.dtype
        assert not xb.requires_grad
        xh, yh = xb.numpy(), yb.numpy()
        np.testing.assert_array_equal(xh[:, 0], yh * 3)
        seen.extend(yh.tolist())
    assert sorted(seen) == list(range(10))
    # The same seed gives the same order for Tensors as for NumPy arrays.
    numpy_loader = DataLoader(TensorDataset(np.arange(10)), batch_size=4, shuffle=True, seed=0)
    assert seen == np.concatenate([b[0] for b in numpy_loader]).tolist()


def test_loader_over_tensors_without_tensor_dataset():
    ta = _tinyamp()

    class Rows:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return ta.tensor(np.full(3, i, dtype=np.float32)), i

    xb, yb = next(iter(DataLoader(Rows(), batch_size=5)))
    assert isinstance(xb, ta.Tensor) and xb.shape == (5, 3)
    np.testing.assert_array_equal(xb.numpy()[:, 0], yb)


# ------------------------------------------------------------- issue 30: Python numbers as torch.tensor makes them
@pytest.mark.parametrize("batch, dtype, values", [
    # PyTorch 2.13.0's default_collate: torch.tensor(batch), or float64 when the first value is a float.
    ([2**63 - 1, 1], "int64", [2**63 - 1, 1]),
    ([-(2**63), 1], "int64", [-(2**63), 1]),
    ([1, True], "int64", [1, 1]),
    ([True, 2], "int64", [1, 2]),
    ([True, False], "bool", [True, False]),
    ([1, 2.5], "float32", [1.0, 2.5]),
    ([True, 1.5], "float32", [1.0, 1.5]),
    ([1.5, True], "float64", [1.5, 1.0]),
    ([1.5, 2**70], "float64", [1.5, 2.0**70]),
])
def test_default_collate_of_python_numbers_is_pytorchs(batch: list, dtype: str, values: list) -> None:
    from tinyamp.utils.data import default_collate

    out = default_collate(batch)
    assert str(out.dtype) == dtype and out.tolist() == values


@pytest.mark.parametrize("batch", [[2**63, 1], [-(2**63) - 1, 1], [1, 2**64]])
def test_default_collate_refuses_an_int_outside_int64(batch: list) -> None:
    # PyTorch 2.13.0: ValueError "Overflow when unpacking long long" (tinyamp made a float64 batch of it).
    from tinyamp.utils.data import default_collate

    with pytest.raises(ValueError, match=r"default_collate: the int -?\d+ does not fit in the int64 tensor"):
        default_collate(batch)
