"""``ta.save`` and ``ta.load``: checkpoints without pickle.

A checkpoint is a zip archive holding

- ``tinyamp.json``: the manifest, the saved object's structure where every value
  is a tagged JSON entry (``{"t": "int", "v": 3}``, ``{"t": "dict", "items": [...]}``)
  and every tensor or NumPy array is a placeholder naming its file, dtype, shape,
  device and ``requires_grad``;
- ``arrays/<n>.npy``: one NumPy ``.npy`` file per array, written and read with
  ``allow_pickle=False``. bfloat16 has no ``.npy`` type, so it is stored as its
  uint16 bit pattern and the manifest records the real dtype.

Loading parses JSON and ``.npy`` headers only, so a checkpoint from an untrusted
source cannot run code (``weights_only`` is accepted for PyTorch compatibility
and is always effectively true). Anything unexpected (not a zip, no manifest, an
unknown tag, a missing or pickled array, a shape that disagrees with the
manifest) raises ``CheckpointError`` naming the file and the problem.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO, Union

import numpy as np

import tinyamp

from . import backend
from . import dtypes as dt
from .tensor import Tensor

FORMAT = "tinyamp-checkpoint"
VERSION = 1
_MANIFEST = "tinyamp.json"
_ARRAY_NAME = re.compile(r"arrays/(\d+)\.npy")

FileLike = Union[str, "os.PathLike[str]", BinaryIO]

# The dtypes a checkpoint may hold, by the name recorded in the manifest.
_DTYPES = {name: np.dtype(name) for name in ("float16", "float32", "float64", "int8", "uint8", "int16",
                                             "int32", "int64", "uint16", "uint32", "uint64", "bool")}
_DTYPES["bfloat16"] = dt.bfloat16


class CheckpointError(RuntimeError):
    """A file that ``ta.load`` refuses: not a tinyamp checkpoint, or a damaged one."""


# ------------------------------------------------------------------- saving
def save(obj: Any, f: FileLike) -> None:
    """Write ``obj`` (nested dicts, lists, tuples of tensors, arrays, numbers, strings, None) to ``f``."""
    writer = _Writer()
    root = writer.encode(obj, "obj")
    manifest = {"format": FORMAT, "version": VERSION, "tinyamp": tinyamp.__version__, "root": root}
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.writestr(_MANIFEST, json.dumps(manifest, allow_nan=False))
        for index, array in enumerate(writer.arrays):
            with archive.open(f"arrays/{index}.npy", "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, array, allow_pickle=False)


class _Writer:
    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.seen: dict[int, int] = {}  # id(tensor) -> array index: shared tensors stay shared

    def encode(self, obj: Any, path: str) -> Any:
        if obj is None:
            return {"t": "none"}
        if isinstance(obj, (bool, np.bool_)):
            return {"t": "bool", "v": bool(obj)}
        if isinstance(obj, (int, np.integer)):
            return {"t": "int", "v": int(obj)}
        if isinstance(obj, (float, np.floating)) and not isinstance(obj, np.ndarray):
            # repr keeps inf/nan and every bit of a double (JSON numbers cannot hold inf).
            return {"t": "float", "v": repr(float(obj))}
        if isinstance(obj, str):
            return {"t": "str", "v": obj}
        if isinstance(obj, Tensor):
            entry = self._array(obj, obj.data, path)
            entry.update(t="tensor", device=str(obj.device), requires_grad=obj.requires_grad,
                         parameter=bool(obj._is_param))
            return entry
        if isinstance(obj, np.ndarray):
            return dict(self._array(obj, obj, path), t="ndarray")
        if isinstance(obj, np.dtype):
            return {"t": "dtype", "v": _dtype_name(obj, path)}
        if isinstance(obj, backend.Device):
            return {"t": "device", "v": str(obj)}
        if isinstance(obj, dict):
            kind = "odict" if isinstance(obj, OrderedDict) else "dict"
            return {"t": kind, "items": [[self.encode(k, f"{path} key {k!r}"), self.encode(v, f"{path}[{k!r}]")]
                                         for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {"t": kind, "items": [self.encode(v, f"{path}[{i}]") for i, v in enumerate(obj)]}
        raise TypeError(f"ta.save: cannot save {type(obj).__name__} at {path}; checkpoints hold tensors, NumPy "
                        f"arrays, numbers, strings, None, dtypes, devices and dicts/lists/tuples of them "
                        f"(save a model's state_dict(), not the model)")

    def _array(self, owner: Any, array: Any, path: str) -> dict:
        name = _dtype_name(array.dtype, path)
        if id(owner) not in self.seen:
            host = backend.to_host(array)
            if host.dtype == dt.bfloat16:
                host = host.view(np.uint16)
            self.seen[id(owner)] = len(self.arrays)
            self.arrays.append(host if host.flags.c_contiguous else host.copy(order="C"))
        return {"file": f"arrays/{self.seen[id(owner)]}.npy", "dtype": name, "shape": list(array.shape)}


def _dtype_name(dtype: np.dtype, path: str) -> str:
    name = dt.dtype_name(dtype)
    if name not in _DTYPES:
        raise TypeError(f"ta.save: dtype {name} at {path} is not supported in checkpoints")
    return name


# ------------------------------------------------------------------ loading
def load(f: FileLike, map_location: Any = None, weights_only: bool = True) -> Any:
    """Read a checkpoint written by :func:`save`.

    ``map_location``: None (each tensor back on its recorded device), a device
    (``"cpu"``, ``"cuda:0"``, a ``ta.device``) for all tensors, or a dict
    ``{"cuda:0": "cpu"}`` mapping recorded devices to new ones.
    """
    name = _describe(f)
    try:
        archive = zipfile.ZipFile(f, "r")
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise CheckpointError(f"ta.load: {name} is not a tinyamp checkpoint (not a zip archive: {exc}); "
                              f"it may be truncated, corrupt, or a file from another program") from None
    with archive:
        reader = _Reader(archive, name, map_location)
        try:
            manifest = json.loads(archive.read(_MANIFEST).decode("utf-8"))
        except KeyError:
            hint = ""
            if any(entry.endswith("data.pkl") for entry in archive.namelist()):
                # PyTorch's zip format: reading it would mean unpickling, which ta.load never does.
                hint = ("; it looks like a PyTorch torch.save file, which tinyamp cannot read: in PyTorch, "
                        "save the state_dict as NumPy arrays (np.savez) and load them with ta.tensor")
            raise CheckpointError(f"ta.load: {name} is a zip archive but not a tinyamp checkpoint "
                                  f"(no {_MANIFEST} manifest){hint}") from None
        except (ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise CheckpointError(f"ta.load: {name}: the manifest {_MANIFEST} is unreadable ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "root" not in manifest:
            raise CheckpointError(f"ta.load: {name}: {_MANIFEST} is not a tinyamp checkpoint manifest")
        if manifest.get("version") != VERSION:
            raise CheckpointError(f"ta.load: {name}: checkpoint format version {manifest.get('version')!r} is "
                                  f"not supported (this tinyamp reads version {VERSION})")
        return reader.decode(manifest["root"], "obj")


def _describe(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return f"'{os.fspath(f)}'"
    return f"'{f.name}'" if isinstance(getattr(f, "name", None), str) else f"<{type(f).__name__}>"


class _Reader:
    def __init__(self, archive: zipfile.ZipFile, name: str, map_location: Any) -> None:
        self.archive, self.name, self.map_location = archive, name, map_location
        self.loaded: dict[str, Any] = {}  # file -> Tensor/array already built (shared tensors)

    def fail(self, path: str, problem: str) -> CheckpointError:
        return CheckpointError(f"ta.load: {self.name}: {problem} (at {path})")

    def decode(self, node: Any, path: str) -> Any:
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise self.fail(path, "malformed manifest entry")
        kind = node["t"]
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            value = node.get("v")
            expected = {"bool": bool, "int": int, "str": str}[kind]
            if type(value) is not expected:
                raise self.fail(path, f"a {kind} entry holds {type(value).__name__}")
            return value
        if kind == "float":
            try:
                return float(node["v"])
            except (KeyError, TypeError, ValueError):
                raise self.fail(path, "a float entry is not a number") from None
        if kind in ("dict", "odict"):
            result = OrderedDict() if kind == "odict" else {}
            for pair in self._items(node, path):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self.fail(path, "a dict item is not a [key, value] pair")
                key = self.decode(pair[0], f"{path} key")
                if isinstance(key, (dict, list, Tensor, np.ndarray)):
                    raise self.fail(path, f"unhashable dict key of type {type(key).__name__}")
                result[key] = self.decode(pair[1], f"{path}[{key!r}]")
            return result
        if kind in ("list", "tuple"):
            items = [self.decode(v, f"{path}[{i}]") for i, v in enumerate(self._items(node, path))]
            return items if kind == "list" else tuple(items)
        if kind == "dtype":
            if node.get("v") not in _DTYPES:
                raise self.fail(path, f"unknown dtype {node.get('v')!r}")
            return _DTYPES[node["v"]]
        if kind == "device":
            return backend.Device(self._device(node.get("v"), path))
        if kind in ("tensor", "ndarray"):
            return self._array_entry(node, kind, path)
        raise self.fail(path, f"unknown entry type {kind!r}")

    def _items(self, node: dict, path: str) -> list:
        items = node.get("items")
        if not isinstance(items, list):
            raise self.fail(path, f"a {node['t']} entry has no item list")
        return items

    def _array_entry(self, node: dict, kind: str, path: str) -> Any:
        file, dtype_name, shape = node.get("file"), node.get("dtype"), node.get("shape")
        if not isinstance(file, str) or not _ARRAY_NAME.fullmatch(file):
            raise self.fail(path, f"bad array file name {file!r}")
        if dtype_name not in _DTYPES:
            raise self.fail(path, f"unknown dtype {dtype_name!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise self.fail(path, f"bad shape {shape!r}")
        if file not in self.loaded:
            array = self._read_array(file, _DTYPES[dtype_name], tuple(shape), path)
            if kind == "ndarray":
                self.loaded[file] = array
            else:
                device = self._target_device(node.get("device"), path)
                requires_grad = node.get("requires_grad") is True
                data = backend.to_device(array, device)
                if node.get("parameter") is True:
                    self.loaded[file] = tinyamp.nn.Parameter(data, requires_grad=requires_grad)
                else:
                    self.loaded[file] = Tensor(data, requires_grad=requires_grad)
        return self.loaded[file]

    def _read_array(self, file: str, dtype: np.dtype, shape: tuple, path: str) -> np.ndarray:
        try:
            with self.archive.open(file) as handle:
                array = np.lib.format.read_array(handle, allow_pickle=False)
        except KeyError:
            raise self.fail(path, f"array file {file} is missing from the archive") from None
        except ValueError as exc:  # includes "Object arrays cannot be loaded when allow_pickle=False"
            raise self.fail(path, f"{file} is not a plain .npy array ({exc}); pickled data is refused") from None
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise self.fail(path, f"{file} is damaged ({exc})") from None
        stored = np.dtype(np.uint16) if dtype == dt.bfloat16 else dtype
        if array.dtype != stored or array.shape != shape:
            raise self.fail(path, f"{file} holds {array.dtype} {list(array.shape)}, the manifest says "
                                  f"{dt.dtype_name(dtype)} {list(shape)}")
        return array.view(dt.bfloat16) if dtype == dt.bfloat16 else array

    def _device(self, spec: Any, path: str) -> str:
        if not isinstance(spec, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", spec):
            raise self.fail(path, f"bad device {spec!r}")
        return spec

    def _target_device(self, recorded: Any, path: str) -> backend.Device:
        recorded = self._device(recorded, path)
        target: Any = recorded
        if isinstance(self.map_location, dict):
            target = self.map_location.get(recorded, recorded)
        elif self.map_location is not None:
            target = self.map_location
        if (str(target).startswith("cuda") and self.map_location is None
                and not tinyamp.cuda.is_available()):
            raise RuntimeError(f"ta.load: {self.name} holds a tensor saved on {recorded} but CUDA is not "
                               f"available; pass map_location='cpu' to load it on the CPU")
        return backend.Device(target)

