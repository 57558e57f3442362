"""Reading and writing IDX files, the format MNIST is distributed in.

An IDX file is a small big-endian header followed by the raw array::

    bytes 0-1   zero
    byte  2     type code (see ``_CODE_TO_DTYPE``)
    byte  3     number of dimensions, n
    4 * n bytes the size of each dimension, big-endian uint32
    payload     prod(sizes) items of the type, big-endian, C order

Files may be gzip-compressed; :func:`read_idx` recognises that from the gzip
magic bytes (``1f 8b``), not from the file name, so a decompressed file that
kept its ``.gz`` name (or the reverse) still reads. Every problem is reported
as an :class:`IDXError` (a ``ValueError``) that names the file, what was
expected and what was found.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from typing import Union

import numpy as np

__all__ = ["IDXError", "read_idx", "write_idx"]

PathLike = Union[str, "os.PathLike[str]"]

# IDX type code -> big-endian NumPy dtype of the payload.
_CODE_TO_DTYPE: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
# Reverse map keyed on (kind, itemsize) so native and big-endian inputs match.
_KIND_TO_CODE: dict[tuple[str, int], int] = {
    (dt.kind, dt.itemsize): code for code, dt in _CODE_TO_DTYPE.items()
}
_GZIP_MAGIC = b"\x1f\x8b"


class IDXError(ValueError):
    """An IDX file is malformed, truncated, or cannot hold the given array."""


def _describe_codes() -> str:
    return ", ".join(
        f"0x{code:02X} ({dt.newbyteorder('=').name})"
        for code, dt in _CODE_TO_DTYPE.items()
    )


def _decompress_if_gzip(raw: bytes, path: str) -> bytes:
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    # BadGzipFile is an OSError; a cut-off stream raises EOFError; damaged
    # deflate data raises zlib.error. All mean the same thing to the user.
    except (OSError, EOFError, zlib.error) as exc:
        raise IDXError(
            f"{path}: starts with the gzip magic bytes 1f 8b but is not a "
            f"valid gzip stream ({exc}); the file is corrupt or incomplete, "
            f"download it again"
        ) from exc


def read_idx(path: PathLike) -> np.ndarray:
    """Read an IDX file (raw or gzip-compressed) into a native-endian array.

    Returns a new, writable array whose shape is the dimensions in the header
    and whose dtype is the native-endian version of the header's type (uint8,
    int8, int16, int32, float32 or float64).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IDXError: corrupt gzip data, a bad magic number, an unknown type code,
            a truncated header or payload, or bytes left over after the payload.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    data = _decompress_if_gzip(raw, path)

    if len(data) < 4:
        raise IDXError(
            f"{path}: too short to be an IDX file: expected a 4-byte magic "
            f"number, found {len(data)} byte(s)"
        )
    if data[0] != 0 or data[1] != 0:
        raise IDXError(
            f"{path}: not an IDX file: expected the magic number to start with "
            f"two zero bytes, found {data[:4].hex(' ')} (magic "
            f"{int.from_bytes(data[:4], 'big')})"
        )
    code, ndim = data[2], data[3]
    if code not in _CODE_TO_DTYPE:
        raise IDXError(
            f"{path}: unknown IDX type code 0x{code:02X} in magic number "
            f"{data[:4].hex(' ')}; expected one of {_describe_codes()}"
        )
    dtype = _CODE_TO_DTYPE[code]

    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise IDXError(
            f"{path}: truncated header: {ndim} dimension(s) need "
            f"{header_len} header bytes, found {len(data)}"
        )
    shape = tuple(
        int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)
    )

    expected = math.prod(shape) * dtype.itemsize
    found = len(data) - header_len
    if found < expected:
        raise IDXError(
            f"{path}: truncated IDX file: expected {expected} payload bytes for "
            f"shape {shape} of {dtype.newbyteorder('=').name}, found {found} "
            f"({expected - found} missing)"
        )
    if found > expected:
        raise IDXError(
            f"{path}: expected {expected} payload bytes for shape {shape} of "
            f"{dtype.newbyteorder('=').name}, found {found} "
            f"({found - expected} trailing bytes); the header and the data "
            f"disagree"
        )

    array = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=header_len)
    # astype to the native byte order always copies, which also makes the
    # result writable (frombuffer over bytes is read-only).
    return array.reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: PathLike, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file; gzip-compressed when ``path`` ends in ``.gz``.

    The array's dtype must be one IDX can hold: uint8, int8, int16, int32,
    float32 or float64 (no silent narrowing of, say, int64 labels). The gzip
    header carries no timestamp, so the same array always gives the same bytes.
    """
    path = os.fspath(path)
    array = np.asarray(array)
    code = _KIND_TO_CODE.get((array.dtype.kind, array.dtype.itemsize))
    if code is None:
        raise IDXError(
            f"{path}: cannot write dtype {array.dtype} to IDX; expected one of "
            f"{_describe_codes()} (convert the array first, e.g. "
            f"labels.astype(np.uint8))"
        )
    if array.ndim > 255:
        raise IDXError(f"{path}: IDX holds at most 255 dimensions, found {array.ndim}")
    if any(n >= 2**32 for n in array.shape):
        raise IDXError(
            f"{path}: IDX dimensions must be below 2**32, found shape {array.shape}"
        )

    header = bytes([0, 0, code, array.ndim]) + b"".join(
        n.to_bytes(4, "big") for n in array.shape
    )
    payload = np.ascontiguousarray(array, dtype=_CODE_TO_DTYPE[code]).tobytes()
    content = header + payload
    if path.endswith(".gz"):
        content = gzip.compress(content, mtime=0)
    with open(path, "wb") as f:
        f.write(content)
