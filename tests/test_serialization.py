"""ta.save / ta.load: round trips, map_location, and refusal of damaged or foreign files."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections import OrderedDict

import ml_dtypes
import numpy as np
import pytest

import tinyamp as ta
from tinyamp.serialization import CheckpointError


def _nested() -> dict:
    return {
        "half": ta.tensor([1.5, -2.25, 65504.0], dtype=ta.float16),
        "bf16": ta.tensor([[1.0, 3.140625], [-0.0078125, 1e30]], dtype=ta.bfloat16),
        "f32": ta.tensor([[0.1, 0.2, 0.3]], dtype=ta.float32, requires_grad=True),
        "i64": ta.tensor([1, -2, 2**40], dtype=ta.int64),
        "mask": ta.tensor([True, False]),
        "scalar": ta.tensor(3.0),
        "array": np.arange(6, dtype=np.int32).reshape(2, 3),
        "ordered": OrderedDict([("z", 1), ("a", 2.5), ("m", [None, True, "text"])]),
        "numbers": (7, -0.1, float("inf"), float("-inf")),
        "int_keys": {0: {"step": 10}, 1: {"step": 11}},
        "empty": ta.zeros(0, 3),
    }


def _assert_same(a, b) -> None:
    """Deep equality, checking container types, tensor dtype/shape/bits and flags."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, ta.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.requires_grad == b.requires_grad
        assert b.is_leaf
        np.testing.assert_array_equal(np.asarray(a.data).reshape(-1).view(np.uint8),
                                      np.asarray(b.data).reshape(-1).view(np.uint8))
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


def test_round_trip_nested(tmp_path) -> None:
    obj = _nested()
    path = tmp_path / "ckpt.ta"
    ta.save(obj, path)
    loaded = ta.load(path)
    _assert_same(obj, loaded)
    assert loaded["bf16"].dtype == ta.bfloat16
    assert loaded["f32"].requires_grad and not loaded["i64"].requires_grad


def test_round_trip_file_object_and_str_path(tmp_path) -> None:
    buffer = io.BytesIO()
    ta.save({"w": ta.ones(2, 2)}, buffer)
    buffer.seek(0)
    np.testing.assert_array_equal(ta.load(buffer)["w"].numpy(), np.ones((2, 2), np.float32))
    path = str(tmp_path / "x.ta")
    ta.save([1, 2], path)
    assert ta.load(path) == [1, 2]


def test_float_values_are_exact(tmp_path) -> None:
    values = [0.1, 1 / 3, 5e-324, -1.7976931348623157e308]
    ta.save(values, tmp_path / "f.ta")
    assert ta.load(tmp_path / "f.ta") == values
    ta.save(float("nan"), tmp_path / "nan.ta")
    assert np.isnan(ta.load(tmp_path / "nan.ta"))


def test_state_dict_round_trip_restores_parameters_and_buffers(tmp_path) -> None:
    model = ta.nn.Sequential(ta.nn.Linear(3, 4), ta.nn.BatchNorm1d(4))
    ta.save(model.state_dict(), tmp_path / "model.ta")
    other = ta.nn.Sequential(ta.nn.Linear(3, 4), ta.nn.BatchNorm1d(4))
    other.load_state_dict(ta.load(tmp_path / "model.ta"))
    for (name, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
        assert a.dtype == b.dtype


def test_parameter_comes_back_as_parameter(tmp_path) -> None:
    param = ta.nn.Parameter(ta.randn(3))
    ta.save({"p": param}, tmp_path / "p.ta")
    loaded = ta.load(tmp_path / "p.ta")["p"]
    assert isinstance(loaded, ta.nn.Parameter) and loaded.requires_grad


def test_shared_tensor_stays_shared(tmp_path) -> None:
    shared = ta.randn(4)
    ta.save({"a": shared, "b": shared, "c": ta.randn(4)}, tmp_path / "s.ta")
    loaded = ta.load(tmp_path / "s.ta")
    assert loaded["a"] is loaded["b"] and loaded["a"] is not loaded["c"]
    with zipfile.ZipFile(tmp_path / "s.ta") as archive:
        assert sorted(n for n in archive.namelist() if n.endswith(".npy")) == ["arrays/0.npy", "arrays/1.npy"]


def test_map_location_cpu_forms(tmp_path) -> None:
    ta.save({"w": ta.ones(2)}, tmp_path / "m.ta")
    for location in ("cpu", ta.device("cpu"), {"cuda:0": "cpu"}):
        assert ta.load(tmp_path / "m.ta", map_location=location)["w"].device == ta.device("cpu")


def test_cuda_checkpoint_without_cuda_needs_map_location(tmp_path) -> None:
    # Craft a manifest that records a CUDA tensor, as a GPU machine would write it.
    ta.save({"w": ta.ones(2)}, tmp_path / "cpu.ta")
    _rewrite_manifest(tmp_path / "cpu.ta", tmp_path / "gpu.ta",
                      lambda m: m["root"]["items"][0][1].update(device="cuda:0"))
    if ta.cuda.is_available():
        assert ta.load(tmp_path / "gpu.ta")["w"].is_cuda
    else:
        with pytest.raises(RuntimeError, match="map_location='cpu'"):
            ta.load(tmp_path / "gpu.ta")
    loaded = ta.load(tmp_path / "gpu.ta", map_location={"cuda:0": "cpu"})
    assert loaded["w"].device == ta.device("cpu")


def test_map_location_to_and_from_cuda(tmp_path, cuda_backend) -> None:
    ta.save({"w": ta.tensor([1.0, 2.0], dtype=ta.bfloat16)}, tmp_path / "c.ta")
    on_gpu = ta.load(tmp_path / "c.ta", map_location="cuda")["w"]
    assert on_gpu.is_cuda and on_gpu.dtype == ta.bfloat16
    ta.save({"w": on_gpu}, tmp_path / "g.ta")
    back = ta.load(tmp_path / "g.ta", map_location="cpu")["w"]
    assert not back.is_cuda
    np.testing.assert_array_equal(back.float().numpy(), [1.0, 2.0])


def test_unsupported_object_is_refused_at_save(tmp_path) -> None:
    with pytest.raises(TypeError, match=r"cannot save Linear at obj\['model'\]"):
        ta.save({"model": ta.nn.Linear(2, 2)}, tmp_path / "bad.ta")


# ---------------------------------------------------------------- refusals
def _rewrite_manifest(src, dst, edit) -> None:
    with zipfile.ZipFile(src) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(members["tinyamp.json"])
    edit(manifest)
    members["tinyamp.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(dst, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_truncated_file_is_refused(tmp_path) -> None:
    path = tmp_path / "t.ta"
    ta.save({"w": ta.randn(64, 64)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"t\.ta' is not a tinyamp checkpoint \(not a zip archive"):
        ta.load(path)


def test_corrupt_array_bytes_are_refused(tmp_path) -> None:
    path = tmp_path / "c.ta"
    ta.save({"w": ta.randn(64, 64)}, path)
    data = bytearray(path.read_bytes())
    start = data.index(b"\x93NUMPY") + 200  # inside the array payload, past the .npy header
    data[start:start + 16] = bytes(16)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"c\.ta.*arrays/0\.npy is damaged"):
        ta.load(path)


def test_pickle_file_is_refused(tmp_path) -> None:
    path = tmp_path / "foreign.pt"
    path.write_bytes(pickle.dumps({"w": np.ones(3)}))
    with pytest.raises(CheckpointError, match=r"foreign\.pt' is not a tinyamp checkpoint"):
        ta.load(path)


def test_text_file_is_refused(tmp_path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, I am not a checkpoint\n" * 20)
    with pytest.raises(CheckpointError, match=r"notes\.txt' is not a tinyamp checkpoint"):
        ta.load(path)


def test_foreign_zip_is_refused(tmp_path) -> None:
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data.pkl", pickle.dumps([1, 2]))
    with pytest.raises(CheckpointError, match="no tinyamp.json manifest"):
        ta.load(path)


def test_pickle_in_place_of_npy_is_refused_without_unpickling(tmp_path, monkeypatch) -> None:
    ta.save({"w": ta.ones(3)}, tmp_path / "ok.ta")
    with zipfile.ZipFile(tmp_path / "ok.ta") as archive:
        manifest = archive.read("tinyamp.json")
    object_npy = io.BytesIO()
    np.save(object_npy, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    for name, payload in (("raw", pickle.dumps(np.ones(3))), ("object_npy", object_npy.getvalue())):
        path = tmp_path / f"{name}.ta"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("tinyamp.json", manifest)
            archive.writestr("arrays/0.npy", payload)
        unpickled = []
        monkeypatch.setattr(pickle, "loads", lambda *a, **k: unpickled.append(a))
        monkeypatch.setattr(pickle, "load", lambda *a, **k: unpickled.append(a))
        with pytest.raises(CheckpointError, match=r"arrays/0\.npy is not a plain \.npy array"):
            ta.load(path)
        assert unpickled == []


def test_load_never_calls_pickle(tmp_path, monkeypatch) -> None:
    ta.save(_nested(), tmp_path / "n.ta")

    def forbidden(*args, **kwargs):
        raise AssertionError("pickle used while loading")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    _assert_same(_nested(), ta.load(tmp_path / "n.ta"))


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(format="something-else"), "not a tinyamp checkpoint manifest"),
    (lambda m: m.update(version=99), "format version 99 is not supported"),
    (lambda m: m["root"]["items"][0][1].update(t="code"), "unknown entry type 'code'"),
    (lambda m: m["root"]["items"][0][1].update(file="../../etc/passwd"), "bad array file name"),
    (lambda m: m["root"]["items"][0][1].update(file="arrays/7.npy"), "arrays/7.npy is missing"),
    (lambda m: m["root"]["items"][0][1].update(dtype="object"), "unknown dtype 'object'"),
    (lambda m: m["root"]["items"][0][1].update(shape=[4]), r"holds float32 \[3\], the manifest says float32 \[4\]"),
    (lambda m: m["root"]["items"][0][1].update(dtype="float64"), "the manifest says float64"),
    (lambda m: m["root"]["items"][0][1].update(device="tpu:0"), "bad device 'tpu:0'"),
    (lambda m: m["root"].update(items="oops"), "has no item list"),
])
def test_bad_manifest_is_refused(tmp_path, edit, message) -> None:
    ta.save({"w": ta.ones(3)}, tmp_path / "ok.ta")
    _rewrite_manifest(tmp_path / "ok.ta", tmp_path / "bad.ta", edit)
    with pytest.raises(CheckpointError, match=message):
        ta.load(tmp_path / "bad.ta")


def test_bfloat16_is_stored_as_its_bits(tmp_path) -> None:
    values = np.array([1.0, -3.0e38, 2.0**-130], dtype=ml_dtypes.bfloat16)
    ta.save({"b": ta.tensor(values)}, tmp_path / "b.ta")
    with zipfile.ZipFile(tmp_path / "b.ta") as archive:
        stored = np.load(io.BytesIO(archive.read("arrays/0.npy")), allow_pickle=False)
    assert stored.dtype == np.uint16
    np.testing.assert_array_equal(stored, values.view(np.uint16))
    np.testing.assert_array_equal(ta.load(tmp_path / "b.ta")["b"].data.view(np.uint16), values.view(np.uint16))
