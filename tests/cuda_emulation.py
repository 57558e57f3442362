"""A CPU stand-in for the parts of CuPy that tinyamp/kernels/cuda_*.py use, built on g++.

``FakeCupy`` offers ``ElementwiseKernel`` and ``RawKernel`` with CuPy's calling
conventions and checks (argument count, the dtype of every typed parameter,
one dtype per type placeholder, ``size=`` only when every array is raw, the
C type of each RawKernel scalar), and runs the *same kernel source* compiled
as C++ for the CPU on NumPy arrays:

- an ElementwiseKernel body runs in a loop over the elements, with CuPy's
  declarations: ``const T &x`` for inputs, ``T &x`` for outputs, a pointer for
  a ``raw`` array (``const`` for inputs, so a kernel that writes a raw input
  does not compile here either), the typedef of every placeholder;
- a RawKernel runs its grid one thread after another (enough for kernels
  whose threads do not talk to each other), with ``blockIdx``/``threadIdx``.

float16 is GCC's ``_Float16`` (conversions round to nearest even, as CuPy's
``float16``); bfloat16 is a struct over the kernels' own bfloat16 conversion.
Arithmetic is x86-64 SSE float/double, compiled with ``-ffp-contract=off`` as
the kernels are with ``--fmad=false``. What this cannot check: NVRTC itself,
CuPy's code generation, PTX inline assembly (the float16 conversions of the
RawKernel are swapped for C++ casts) and the device's libm (``pow``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import types
from typing import Any

import ml_dtypes
import numpy as np

from tinyamp.kernels import cuda_launch, cuda_loss, cuda_optim

CXX = shutil.which("g++")
CACHE = os.path.join(tempfile.gettempdir(), f"tinyamp-cuda-emulation-{os.getuid()}")

PRELUDE = r"""
#include <math.h>
#include <cmath>
#include <cstring>
#include <cstddef>
using std::isfinite; using std::isnan; using std::sqrt; using std::pow;
#define __global__
#define __device__
#define __forceinline__ inline
struct tinyamp_dim3 { unsigned int x, y, z; };
static tinyamp_dim3 blockIdx, blockDim, threadIdx, gridDim;
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
typedef _Float16 float16;
// Threads run one after another here, so a fence is nothing and an atomic is a plain update.
#define __threadfence()
static inline int atomicAdd(int* address, int value) { int old = *address; *address += value; return old; }
"""

F16_CPU = r"""
static inline float tinyamp_f16_to_f32(unsigned short h) { float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short tinyamp_f32_to_f16(float f) {
    float16 x = (float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h;
}
static inline unsigned short tinyamp_f64_to_f16(double d) {  // GCC rounds double -> _Float16 once
    float16 x = (float16)d; unsigned short h; std::memcpy(&h, &x, 2); return h;
}
"""

BF16_STRUCT = r"""
struct bfloat16 {
    unsigned short bits;
    bfloat16() : bits(0) {}
    bfloat16(float f) : bits(tinyamp_f32_to_bf16(f)) {}
    operator float() const { return tinyamp_bf16_to_f32(bits); }
};
"""

_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.float16): "float16",
          np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.bool_): "bool", np.dtype(np.int32): "int",
          np.dtype(np.int64): "long long", np.dtype(np.uint64): "unsigned long long"}
_CTYPES_SCALAR = {"float": ctypes.c_float, "double": ctypes.c_double, "bool": ctypes.c_bool,
                  "int": ctypes.c_int, "long long": ctypes.c_longlong}
_STORAGE_OF_16_BIT = (np.dtype(np.uint16), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_NUMPY_OF_C = {"float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64,
               "unsigned long long": np.uint64, "unsigned short": np.uint16, "bool": np.bool_}


def parse_params(text: str) -> list[tuple[bool, str, str]]:
    """CuPy's parameter grammar: ``[raw] type name, ...`` -> [(raw, type, name)]."""
    out = []
    for item in text.split(","):
        words = item.split()
        if len(words) not in (2, 3) or (len(words) == 3 and words[0] != "raw"):
            raise SyntaxError(f"bad parameter {item!r}")
        out.append((len(words) == 3, words[-2], words[-1]))
    return out


def parse_signature(source: str, name: str) -> list[tuple[str, str]]:
    """[(C type, name)] of ``extern "C" __global__ void name(...)`` in a RawKernel source."""
    match = re.search(r'extern\s+"C"\s+__global__\s+void\s+' + re.escape(name) + r"\s*\(([^)]*)\)", source)
    if match is None:
        raise LookupError(f"no kernel {name} in the source")
    params = []
    for item in match.group(1).split(","):
        item = " ".join(item.replace("const ", "").split())
        ctype, pname = item.rsplit(" ", 1)
        if pname.startswith("*"):
            ctype, pname = ctype + "*", pname[1:]
        params.append((ctype.replace(" *", "*"), pname))
    return params


def compile_library(source: str) -> ctypes.CDLL:
    """Compile C++ to a shared library (cached by content) and load it."""
    if CXX is None:
        raise RuntimeError("no C++ compiler (g++) for the CUDA kernel emulation")
    os.makedirs(CACHE, exist_ok=True)
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    lib = os.path.join(CACHE, f"k{digest}.so")
    if not os.path.exists(lib):
        src = os.path.join(CACHE, f"k{digest}.cpp")
        with open(src, "w") as f:
            f.write(source)
        tmp = f"{lib}.{os.getpid()}.tmp"
        subprocess.run([CXX, "-O0", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-o", tmp, src],
                       check=True, capture_output=True, text=True)
        os.replace(tmp, lib)
    return ctypes.CDLL(lib)


def _dtype_name(t: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if t == "bfloat16" else np.dtype(t)


class ElementwiseKernel:
    """``cupy.ElementwiseKernel`` run on the CPU."""

    execute = True  # False: check the call, run nothing (no compiler needed)

    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel",
                 options: tuple = (), **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"unexpected ElementwiseKernel arguments {sorted(kwargs)}")
        self.ins, self.outs = parse_params(in_params), parse_params(out_params)
        names = [p[2] for p in self.ins + self.outs]
        if len(set(names)) != len(names) or any(n in ("i", "n") or n.startswith("_") for n in names):
            raise ValueError(f"{name}: duplicate or reserved parameter names {names}")
        self.operation, self.name, self.options = operation, name, tuple(options)
        self.calls: list[tuple] = []

    def __call__(self, *args: Any, size: int = -1) -> None:
        params = self.ins + self.outs
        if len(args) != len(params):  # tinyamp always passes the outputs
            raise TypeError(f"Wrong number of arguments for {self.name!r}: {len(params)} expected, "
                            f"{len(args)} given")
        types_: dict[str, np.dtype] = {}
        nonraw = [a for (raw, _, _), a in zip(params, args) if isinstance(a, np.ndarray) and not raw]
        for (raw, t, pname), a in zip(params, args):
            if not isinstance(a, np.ndarray):
                if (raw or len(t) == 1) or (pname in [p[2] for p in self.outs]):
                    raise TypeError(f"{self.name}: {pname} needs an array, got {type(a).__name__}")
                continue
            want = types_.setdefault(t, a.dtype) if len(t) == 1 else _dtype_name(t)
            if a.dtype != want:
                raise TypeError(f"Type is mismatched. {pname} {a.dtype} {want} ({self.name})")
        if size != -1 and nonraw:
            raise ValueError("Specified 'size' can be used only if all of the ndarray are 'raw'.")
        if size == -1 and not nonraw:
            raise ValueError("Loop size is undecided.")
        if any(a.shape != nonraw[0].shape for a in nonraw):
            raise ValueError(f"{self.name}: the emulation does not broadcast: {[a.shape for a in nonraw]}")
        count = size if size != -1 else nonraw[0].size
        self.calls.append(tuple(a.dtype if isinstance(a, np.ndarray) else type(a) for a in args))
        if not self.execute:
            return
        lib = compile_library(self._source(params, args, types_))
        call_args, copies = [ctypes.c_longlong(count)], []
        for (raw, t, pname), a in zip(params, args):
            if isinstance(a, np.ndarray):
                if raw and not a.flags.c_contiguous:
                    raise ValueError(f"{self.name}: raw {pname} must be contiguous here")
                buf = a if a.flags.c_contiguous else np.ascontiguousarray(a)
                if buf is not a:
                    copies.append((a, buf))
                call_args.append(ctypes.c_void_p(buf.ctypes.data))
            else:
                ctype = _CTYPE[_dtype_name(t)]
                call_args.append(_CTYPES_SCALAR[ctype](_dtype_name(t).type(a).item()))
        lib.tinyamp_run(*call_args)
        for a, buf in copies:
            a[...] = buf

    def _source(self, params: list, args: tuple, types_: dict) -> str:
        sig, decls = ["long long tinyamp_size"], []
        for index, ((raw, t, pname), a) in enumerate(zip(params, args)):
            ctype = t if len(t) == 1 else _CTYPE[_dtype_name(t)]
            is_in = index < len(self.ins)
            if isinstance(a, np.ndarray):
                sig.append(f"{ctype}* _raw_{pname}")
                if raw:
                    decls.append(f"{'const ' if is_in else ''}{ctype}* const {pname} = _raw_{pname};")
                else:
                    decls.append(f"{'const ' if is_in else ''}{ctype} &{pname} = _raw_{pname}[i];")
            else:
                sig.append(f"const {ctype} {pname}")
        typedefs = "".join(f"typedef {_CTYPE[d]} {k};\n" for k, d in sorted(types_.items()))
        return (PRELUDE + cuda_launch.BF16_CONVERSIONS + BF16_STRUCT + typedefs
                + f'extern "C" void tinyamp_run({", ".join(sig)}) {{\n'
                + "  for (long long i = 0; i < tinyamp_size; ++i) {\n    "
                + "\n    ".join(decls) + "\n    {\n" + self.operation + "\n    }\n  }\n}\n")


class RawKernel:
    """``cupy.RawKernel`` run on the CPU, one thread at a time."""

    execute = True

    def __init__(self, code: str, name: str, options: tuple = (), **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"unexpected RawKernel arguments {sorted(kwargs)}")
        if cuda_launch.F16_CONVERSIONS not in code:
            raise ValueError(f"{name}: expected the float16 conversions to swap for C++ ones")
        self.code, self.name, self.options = code, name, tuple(options)
        self.params = parse_signature(code, name)
        self.calls: list[tuple] = []

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: {len(self.params)} arguments expected, {len(args)} given")
        call_args = []
        for (ctype, pname), a in zip(self.params, args):
            if ctype.endswith("*"):
                if isinstance(a, np.generic):  # NumPy makes 0-d results scalars where CuPy keeps arrays
                    a = np.asarray(a)
                want = np.dtype(_NUMPY_OF_C[ctype[:-1]])
                # 16-bit floats are passed as their storage (CuPy passes any array's pointer).
                storage = want in _STORAGE_OF_16_BIT and isinstance(a, np.ndarray) and a.dtype in _STORAGE_OF_16_BIT
                if (not isinstance(a, np.ndarray) or (a.dtype != want and not storage)
                        or not a.flags.c_contiguous):
                    raise TypeError(f"{self.name}: {pname} wants a contiguous {want} array, got {a!r:.60}")
                call_args.append(ctypes.c_void_p(a.ctypes.data))
            else:
                # CuPy passes a Python int as long long and a float as double: demand the exact type.
                if type(a) is not _NUMPY_OF_C[ctype]:
                    raise TypeError(f"{self.name}: {pname} is {ctype}; pass numpy.{_NUMPY_OF_C[ctype].__name__}, "
                                    f"got {type(a).__name__}")
                call_args.append(_CTYPES_SCALAR[ctype](a.item()))
        self.calls.append((tuple(grid), tuple(block)))
        if not self.execute:
            return
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        block3 = tuple(block) + (1,) * (3 - len(block))
        lib = compile_library(self._source())
        lib.tinyamp_run(*(ctypes.c_uint(v) for v in grid3 + block3), *call_args)

    def _source(self) -> str:
        sig = ", ".join(f"{t} {p}" for t, p in self.params)
        names = ", ".join(p for _, p in self.params)
        loops = ("  for (unsigned bz = 0; bz < gz; ++bz) for (unsigned by = 0; by < gy; ++by)"
                 " for (unsigned bx = 0; bx < gx; ++bx)\n"
                 "  for (unsigned tz = 0; tz < dz; ++tz) for (unsigned ty = 0; ty < dy; ++ty)"
                 " for (unsigned tx = 0; tx < dx; ++tx) {\n"
                 "    blockIdx = {bx, by, bz}; threadIdx = {tx, ty, tz};\n"
                 f"    {self.name}({names});\n  }}\n")
        return (PRELUDE + self.code.replace(cuda_launch.F16_CONVERSIONS, F16_CPU)
                + f'extern "C" void tinyamp_run(unsigned gx, unsigned gy, unsigned gz, unsigned dx, unsigned dy, '
                  f'unsigned dz, {sig}) {{\n  gridDim = {{gx, gy, gz}}; blockDim = {{dx, dy, dz}};\n'
                + loops + "}\n")


class FakeDevice:
    """Stands for ``cupy.cuda.Device``: an id and a no-op context manager."""

    id = 0

    def __enter__(self) -> "FakeDevice":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def fake_cupy() -> types.SimpleNamespace:
    """The module object ``cuda_launch`` gets from ``backend.cupy()`` under emulation."""
    return types.SimpleNamespace(ElementwiseKernel=ElementwiseKernel, RawKernel=RawKernel,
                                 asarray=lambda a: np.ascontiguousarray(np.asarray(a)),
                                 empty=np.empty, ones=np.ones, zeros=np.zeros)


def install(monkeypatch: Any, execute: bool = True) -> types.SimpleNamespace:
    """Route ``tinyamp.kernels.cuda_launch`` to the emulation (NumPy arrays count as device arrays).

    ``execute=False`` only checks each launch (arguments against the parameter
    lists, dtypes, sizes) and leaves the arrays alone.
    """
    fake = fake_cupy()
    monkeypatch.setattr(ElementwiseKernel, "execute", execute)
    monkeypatch.setattr(RawKernel, "execute", execute)
    monkeypatch.setattr(cuda_launch, "_cp", lambda: fake)
    monkeypatch.setattr(cuda_launch, "on_gpu", lambda a: isinstance(a, np.ndarray))
    monkeypatch.setattr(cuda_launch, "_pointer", lambda a: a.ctypes.data)
    monkeypatch.setattr(cuda_launch, "_device", lambda a: FakeDevice())
    monkeypatch.setattr(cuda_launch, "_upload_into", lambda array, host: array.__setitem__(..., host))
    # Fresh caches, restored afterwards: emulated kernels must never reach a real GPU run.
    for name in ("_kernels", "_chunk_tables", "_pointer_tables", "launches"):
        monkeypatch.setattr(cuda_launch, name, {})
    monkeypatch.setattr(cuda_optim, "_coefs", {})
    monkeypatch.setattr(cuda_launch, "_zero_flags", {})
    monkeypatch.setattr(cuda_loss, "_tickets", {})
    monkeypatch.setattr(cuda_loss, "_placeholders", {})
    return fake


def device_math() -> tuple:
    """(exp, log) of float32 arrays computed by the C library the emulated kernels call (``expf``/``logf``).

    NumPy's vectorised float32 ``exp``/``log`` round differently in the last
    bit for some inputs; a NumPy path given these computes what an emulated
    kernel computes, so the two can be compared bit for bit.
    """
    lib = compile_library(PRELUDE + r"""
extern "C" void tinyamp_expf(const float* a, float* o, long long n) { for (long long i = 0; i < n; ++i) o[i] = expf(a[i]); }
extern "C" void tinyamp_logf(const float* a, float* o, long long n) { for (long long i = 0; i < n; ++i) o[i] = logf(a[i]); }
""")

    def vectorised(function: Any) -> Any:
        def apply(a: np.ndarray) -> np.ndarray:
            a = np.ascontiguousarray(a, dtype=np.float32)
            out = np.empty_like(a)
            function(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_longlong(a.size))
            return out
        return apply

    return vectorised(lib.tinyamp_expf), vectorised(lib.tinyamp_logf)
