"""``cupy.ElementwiseKernel`` and ``cupy.RawKernel`` of the stand-in: the CUDA source compiled with g++.

Each kernel is checked with CuPy's calling conventions (argument count, the
dtype of every typed parameter, one dtype per type placeholder, ``size=``
only when every array is raw, the C type of each RawKernel scalar), and the
*same kernel source* is compiled as C++ for the CPU (once per distinct source,
cached by content in a directory under the system's temporary directory) and
run on the arrays' pool memory, through the same addresses a GPU would use:

- an ElementwiseKernel body runs in a loop over the elements, with CuPy's
  declarations: ``const T &x`` for inputs, ``T &x`` for outputs, a pointer for
  a ``raw`` array (``const`` for inputs, so a kernel that writes a raw input
  does not compile here either), the typedef of every placeholder;
- a RawKernel runs its grid one thread after another, with
  ``blockIdx``/``threadIdx``; a block at a time, so ``__shared__`` memory is
  a ``static``. In a kernel that calls ``__syncthreads`` a block's threads are
  fibers (``ucontext``): each runs up to the barrier, then the next; a thread
  that returns while others wait at a barrier is an error (CUDA leaves it
  undefined).

float16 is GCC's ``_Float16`` (conversions round to nearest even, arithmetic in
float, as CuPy's ``float16``); bfloat16 is a struct rounding to nearest even,
as CuPy's. Arithmetic is x86-64 SSE float/double, compiled with
``-ffp-contract=off`` as kernels compiled with ``--fmad=false`` are. The PTX
float16 conversions (``asm("cvt.f32.f16 ...")``, ``asm("cvt.rn.f16.f32 ...")``
and ``asm("cvt.rn.f16.f64 ...")``) are recognised in a RawKernel source and
(in an ElementwiseKernel's preamble or body too) replaced by the same C++
conversions; any other inline assembly is refused.
``atomicAdd`` on an int, ``__threadfence`` and ``__ldcg`` run as plain code
(threads run one after another). CUDA's vector types (``uint2``, ``uint4``,
``float4``) carry their alignment and every source is compiled with
``-fsanitize=alignment``: a load or store of one at an address a GPU would
fault on raises ``cudaErrorMisalignedAddress`` naming the type, the address
and the line, as the launch ends. What this cannot check:
NVRTC itself and CuPy's code generation (tests/kernels/test_nvrtc_kernels.py compiles
every kernel tinyamp builds with NVRTC, as CuPy writes it), races between
threads and the device's libm (``pow``).

Every call counts one launch under the kernel's name (see ``_counters``), with the
bytes of its array arguments: an ElementwiseKernel reads its inputs and writes its
outputs, a RawKernel reads its ``const`` pointers and writes the others, unless the
caller declared what the launch moves (``counters.declare``); while a
stream captures, it is recorded with its addresses and scalar arguments frozen
(see ``_capture``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from typing import Any

import ml_dtypes
import numpy as np

from . import runtime
from ._array import ndarray, read_bytes, run

CXX = shutil.which("g++")
CXX_FLAGS = ("-O0", "-std=c++17", "-fPIC", "-ffp-contract=off", "-fsanitize=alignment", "-fsanitize-recover=alignment")
CACHE = os.path.join(tempfile.gettempdir(), f"tinyamp-cuda-standin-{os.getuid()}")

PRELUDE = r"""
#include <math.h>
#include <cmath>
#include <cstring>
#include <cstddef>
using std::isfinite; using std::isnan; using std::isinf; using std::sqrt; using std::pow;
#define __global__
#define __device__
#define __forceinline__ inline
struct standin_dim3 { unsigned int x, y, z; };
// CUDA's vector types, with their alignment: on a GPU a load or store of one at an address that is not a multiple
// of it faults ("misaligned address"). Kernels are compiled with -fsanitize=alignment, whose check calls the
// handler below (no sanitizer runtime is linked): the first misaligned access of a launch is kept and reported.
struct alignas(16) uint4 { unsigned int x, y, z, w; };
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct standin_type_mismatch {  // GCC's and Clang's __ubsan TypeMismatchData (v1)
    struct { const char* file; unsigned line, column; } where;
    const struct { unsigned short kind, info; char name[1]; }* type;
    unsigned char log_alignment, check_kind;
};
static unsigned long long standin_bad_address;
static const standin_type_mismatch* standin_bad_access;
extern "C" void __ubsan_handle_type_mismatch_v1(const standin_type_mismatch* data, unsigned long long address) {
    if (standin_bad_access == nullptr) { standin_bad_access = data; standin_bad_address = address; }
}
extern "C" void __ubsan_handle_type_mismatch_v1_abort(const standin_type_mismatch* data, unsigned long long address) {
    __ubsan_handle_type_mismatch_v1(data, address);
}
// The first misaligned access since the last call (address 0: none): its line, the alignment and the type's name.
extern "C" unsigned long long standin_misaligned(unsigned* line, unsigned* alignment, const char** type) {
    const unsigned long long address = standin_bad_address;
    if (standin_bad_access != nullptr) {
        *line = standin_bad_access->where.line;
        *alignment = 1u << standin_bad_access->log_alignment;
        *type = standin_bad_access->type->name;
    }
    standin_bad_access = nullptr;
    standin_bad_address = 0;
    return address;
}
static inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static standin_dim3 blockIdx, blockDim, threadIdx, gridDim;
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
typedef _Float16 float16;
static inline float standin_half_bits_to_float(unsigned short h) { float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short standin_float_to_half_bits(float f) {
    float16 x = (float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h;
}
static inline unsigned short standin_double_to_half_bits(double d) {  // GCC rounds double -> _Float16 once
    float16 x = (float16)d; unsigned short h; std::memcpy(&h, &x, 2); return h;
}
// Threads run one after another here: a fence has nothing to order, an atomic is a plain update and an L2
// load is a load. Blocks run one after another too, so a block's __shared__ memory can be a static.
#define __threadfence()
static inline int atomicAdd(int* address, int value) { int old = *address; *address += value; return old; }
template <class T> static inline T __ldcg(const T* address) { return *address; }
#define __shared__ static
// __syncthreads: in a kernel that calls it, a block's threads are fibers (ucontext) run one after another up to
// the barrier (see RawKernel._source); a thread that returns while others wait there is an error.
#include <ucontext.h>
static ucontext_t standin_scheduler, *standin_fibers;
static int *standin_fiber_state, standin_fiber;  // state: 0 runnable, 1 at the barrier, 2 returned
static void __syncthreads() {
    standin_fiber_state[standin_fiber] = 1;
    swapcontext(&standin_fibers[standin_fiber], &standin_scheduler);
}
"""

# A kernel calling __syncthreads: each block's threads as fibers, resumed in turn until all have returned.
_FIBERS = r"""
#include <cstdlib>
#include <functional>
#include <vector>
static std::function<void()> standin_body;
static void standin_fiber_entry() { standin_body(); standin_fiber_state[standin_fiber] = 2; }
static int standin_run_block(unsigned dx, unsigned dy, unsigned dz) {
    const unsigned count = dx * dy * dz;
    const size_t stack = 256 * 1024;  // untouched pages of it cost nothing
    static char* stacks = nullptr;
    static unsigned stacks_for = 0;
    static std::vector<ucontext_t> fibers;
    static std::vector<int> state;
    if (stacks_for < count) {
        std::free(stacks);
        stacks = static_cast<char*>(std::malloc(count * stack));
        stacks_for = count;
    }
    fibers.resize(count);
    state.assign(count, 0);
    standin_fibers = fibers.data();
    standin_fiber_state = state.data();
    for (unsigned t = 0; t < count; ++t) {
        getcontext(&fibers[t]);
        fibers[t].uc_stack.ss_sp = stacks + t * stack;
        fibers[t].uc_stack.ss_size = stack;
        fibers[t].uc_link = &standin_scheduler;
        makecontext(&fibers[t], standin_fiber_entry, 0);
    }
    for (;;) {
        unsigned waiting = 0, returned = 0;
        for (unsigned t = 0; t < count; ++t) {
            if (state[t] == 2) { ++returned; continue; }
            state[t] = 0;
            standin_fiber = (int)t;
            threadIdx = {t % dx, (t / dx) % dy, t / (dx * dy)};
            swapcontext(&standin_scheduler, &fibers[t]);
            if (state[t] == 1) ++waiting; else ++returned;
        }
        if (waiting == 0) return 0;
        if (returned != 0) return 1;  // a barrier that not every thread of the block reaches
    }
}
"""

# CuPy's bfloat16 type for ElementwiseKernel code: float32's upper half, rounded to nearest even.
BFLOAT16 = r"""
struct bfloat16 {
    unsigned short bits;
    bfloat16() : bits(0) {}
    bfloat16(float f) {
        unsigned int u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) { bits = (unsigned short)((u >> 16) | 0x0040u); return; }
        u += 0x7fffu + ((u >> 16) & 1u);
        bits = (unsigned short)(u >> 16);
    }
    operator float() const { return __uint_as_float(((unsigned int)bits) << 16); }
};
"""

# The PTX conversions CUDA code uses for float16 bits, as C++ statements.
_PTX_CONVERSIONS = [
    (re.compile(r'asm\s*\(\s*"cvt\.rn\.f16\.f64\s+%0\s*,\s*%1\s*;"\s*:\s*"=h"\s*\(\s*(\w+)\s*\)\s*:'
                r'\s*"d"\s*\(\s*(\w+)\s*\)\s*\)\s*;'), r"\1 = standin_double_to_half_bits(\2);"),
    (re.compile(r'asm\s*\(\s*"cvt\.f32\.f16\s+%0\s*,\s*%1\s*;"\s*:\s*"=f"\s*\(\s*(\w+)\s*\)\s*:'
                r'\s*"h"\s*\(\s*(\w+)\s*\)\s*\)\s*;'), r"\1 = standin_half_bits_to_float(\2);"),
    (re.compile(r'asm\s*\(\s*"cvt\.rn\.f16\.f32\s+%0\s*,\s*%1\s*;"\s*:\s*"=h"\s*\(\s*(\w+)\s*\)\s*:'
                r'\s*"f"\s*\(\s*(\w+)\s*\)\s*\)\s*;'), r"\1 = standin_float_to_half_bits(\2);"),
]

_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.float16): "float16",
          np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.bool_): "bool", np.dtype(np.int32): "int",
          np.dtype(np.int64): "long long", np.dtype(np.uint64): "unsigned long long",
          np.dtype(np.int8): "signed char", np.dtype(np.uint8): "unsigned char"}
_CTYPES_SCALAR = {"float": ctypes.c_float, "double": ctypes.c_double, "bool": ctypes.c_bool,
                  "int": ctypes.c_int, "long long": ctypes.c_longlong, "signed char": ctypes.c_byte,
                  "unsigned char": ctypes.c_ubyte, "unsigned long long": ctypes.c_ulonglong}
_NUMPY_OF_C = {"float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64,
               "unsigned long long": np.uint64, "unsigned short": np.uint16, "bool": np.bool_,
               "unsigned char": np.uint8, "signed char": np.int8}
# A RawKernel sees 16-bit floats as their bits: CuPy passes a float16/bfloat16 array's pointer as is.
_STORAGE_16 = (np.dtype(np.uint16), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


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
    params = []
    for item in _signature_items(source, name):
        item = " ".join(item.replace("const ", "").replace("__restrict__", "").split())
        ctype, pname = item.rsplit(" ", 1)
        if pname.startswith("*"):
            ctype, pname = ctype + "*", pname[1:]
        params.append((ctype.replace(" *", "*"), pname))
    return params


def _signature_items(source: str, name: str) -> list[str]:
    match = re.search(r'extern\s+"C"\s+__global__\s+void\s+' + re.escape(name) + r"\s*\(([^)]*)\)", source)
    if match is None:
        raise LookupError(f"no kernel {name} in the source")
    return match.group(1).split(",")


def read_only_pointers(source: str, name: str) -> list[bool]:
    """For each parameter of kernel ``name``: whether it is a pointer to ``const`` data (read, never written)."""
    return [bool(re.match(r"\s*const\b", item)) and "*" in item for item in _signature_items(source, name)]


def host_source(cuda_source: str, name: str) -> str:
    """The CUDA source with its PTX float16 conversions as C++; other inline assembly is refused."""
    for pattern, replacement in _PTX_CONVERSIONS:
        cuda_source = pattern.sub(replacement, cuda_source)
    leftover = re.search(r"\basm\s*(volatile\s*)?\(", cuda_source)
    if leftover is not None:
        line = cuda_source[:leftover.start()].count("\n") + 1
        raise ValueError(f"{name}: inline PTX on line {line} that the CUDA stand-in cannot run "
                         "(it knows cvt.f32.f16 and cvt.rn.f16.f32)")
    return cuda_source


def compile_library(source: str) -> ctypes.CDLL:
    """Compile C++ to a shared library (cached by content) and load it."""
    if CXX is None:
        raise RuntimeError("the CUDA stand-in runs kernels through g++, which is not installed")
    os.makedirs(CACHE, exist_ok=True)
    digest = hashlib.sha256(" ".join(CXX_FLAGS + ("",)).encode() + source.encode()).hexdigest()[:24]
    lib = os.path.join(CACHE, f"k{digest}.so")
    if not os.path.exists(lib):
        src = os.path.join(CACHE, f"k{digest}.cpp")
        with open(src, "w") as f:
            f.write(source)
        tmp = f"{lib}.{os.getpid()}.tmp"
        # Compiled, then linked without the sanitizer's runtime (the source defines the handler it calls).
        subprocess.run([CXX, *CXX_FLAGS, "-c", "-o", f"{tmp}.o", src], check=True, capture_output=True, text=True)
        subprocess.run([CXX, "-shared", "-Wl,-Bsymbolic", "-o", tmp, f"{tmp}.o"], check=True, capture_output=True,
                       text=True)
        os.remove(f"{tmp}.o")
        os.replace(tmp, lib)
    return ctypes.CDLL(lib)


def misaligned_access(lib: ctypes.CDLL, name: str, first_line: int = 0) -> None:
    """Raise CUDA's misaligned-address error if the launch that just ran ``lib`` made a misaligned access
    (``first_line``: the generated source's line where the kernel's own source starts)."""
    line, alignment, type_name = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_char_p()
    lib.standin_misaligned.restype = ctypes.c_ulonglong
    address = lib.standin_misaligned(ctypes.byref(line), ctypes.byref(alignment), ctypes.byref(type_name))
    if address:
        where = f" on line {line.value - first_line} of its source" if line.value > first_line else ""
        raise runtime.CUDARuntimeError(runtime.cudaErrorMisalignedAddress,
                                       f"{name}: {type_name.value.decode()} at 0x{address:x}, which needs "
                                       f"{alignment.value}-byte alignment{where}")


_libraries: dict[str, ctypes.CDLL] = {}
_compile_lock = threading.Lock()  # one compile of a source at a time (its temporary file is per process)
# One RawKernel runs at a time, as on CUDA's default stream; its host code also keeps blockIdx/threadIdx
# in globals that two threads would overwrite for each other.
_run_lock = threading.Lock()


def _library(source: str) -> ctypes.CDLL:
    lib = _libraries.get(source)
    if lib is None:
        with _compile_lock:
            lib = _libraries.get(source)
            if lib is None:
                lib = _libraries[source] = compile_library(source)
    return lib


def _run_serially(lib: ctypes.CDLL, frozen: list, name: str) -> None:
    with _run_lock:
        failed = lib.standin_run(*frozen)
        misaligned_access(lib, name, PRELUDE.count("\n"))
    if failed:
        raise RuntimeError(f"{name}: a thread returned while others of its block waited at __syncthreads "
                           "(every thread of a block must reach each barrier)")


def _dtype_name(t: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if t == "bfloat16" else np.dtype(t)


def _not_an_array(value: Any, kernel: str, pname: str) -> TypeError:
    if isinstance(value, np.ndarray):
        return TypeError(f"Unsupported type {type(value)} ({kernel}: {pname} is a host array; "
                         "copy it with cupy.asarray first)")
    return TypeError(f"{kernel}: {pname} needs a cupy.ndarray, got {type(value).__name__}")


class ElementwiseKernel:
    """``cupy.ElementwiseKernel(in_params, out_params, operation, name, options=...)``, run on the host."""

    execute = True  # False: check each call and count it, run nothing (no compiler needed)

    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel",
                 reduce_dims: bool = True, preamble: str = "", no_return: bool = False,
                 return_tuple: bool = False, options: tuple = (), **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"unexpected ElementwiseKernel arguments {sorted(kwargs)}")
        self.ins, self.outs = parse_params(in_params), parse_params(out_params)
        names = [p[2] for p in self.ins + self.outs]
        if len(set(names)) != len(names) or any(n in ("i", "n") or n.startswith("_") for n in names):
            raise ValueError(f"{name}: duplicate or reserved parameter names {names}")
        self.operation, self.name, self.preamble, self.options = operation, name, preamble, tuple(options)
        self._host_preamble, self._host_operation = host_source(preamble, name), host_source(operation, name)
        self.calls: list[tuple] = []

    def __call__(self, *args: Any, size: int = -1, block_size: int = 128, stream: Any = None) -> None:
        params = self.ins + self.outs
        if len(args) != len(params):  # tinyamp always passes the outputs
            raise TypeError(f"Wrong number of arguments for {self.name!r}: {len(params)} expected, "
                            f"{len(args)} given (the CUDA stand-in needs the outputs passed too)")
        types_: dict[str, np.dtype] = {}
        out_names = {p[2] for p in self.outs}
        for (raw, t, pname), a in zip(params, args):
            if type(a) is not ndarray and (raw or len(t) == 1 or pname in out_names or isinstance(a, np.ndarray)):
                raise _not_an_array(a, self.name, pname)
        n_in = len(self.ins)  # CuPy types the outputs first, then the inputs (_decide_params_type)
        for (raw, t, pname), a in list(zip(params, args))[n_in:] + list(zip(params, args))[:n_in]:
            if type(a) is not ndarray:
                continue
            want = types_.setdefault(t, a.dtype) if len(t) == 1 else _dtype_name(t)
            if a.dtype != want:
                raise TypeError(f"Type is mismatched. {pname} {a.dtype} {want} ({self.name})")
        nonraw = [a for (raw, _, _), a in zip(params, args) if type(a) is ndarray and not raw]
        if size != -1 and nonraw:
            raise ValueError("Specified 'size' can be used only if all of the ndarray are 'raw'.")
        if size == -1 and not nonraw:
            raise ValueError("Loop size is undecided.")
        if any(a.shape != nonraw[0].shape for a in nonraw):
            raise ValueError(f"{self.name}: the CUDA stand-in does not broadcast kernel arguments: "
                             f"{[a.shape for a in nonraw]}")
        count = size if size != -1 else nonraw[0].size
        self.calls.append(tuple(a.dtype if type(a) is ndarray else type(a) for a in args))
        devices = [a for a in args if type(a) is ndarray]
        n_in = len(self.ins)
        moved = (read_bytes(tuple(a for a in args[:n_in] if type(a) is ndarray)),
                 read_bytes(tuple(a for a in args[n_in:] if type(a) is ndarray)))
        if not self.execute:
            run(self.name, lambda: None, *devices, moved=moved)
            return
        lib = _library(self._source(params, args, types_))
        # Frozen at the call, as a launch's arguments are: the addresses and the scalars.
        frozen: list = [ctypes.c_longlong(count)]
        for (raw, t, pname), a in zip(params, args):
            if type(a) is ndarray:
                if raw and not a._a.flags.c_contiguous:
                    raise ValueError(f"{self.name}: raw {pname} must be contiguous in the CUDA stand-in")
                frozen.append(a._a)
            else:
                ctype = _CTYPE[_dtype_name(t)]
                frozen.append(_CTYPES_SCALAR[ctype](_dtype_name(t).type(a).item()))
        run(self.name, lambda: _run_elementwise(lib, frozen, len(self.ins), self.name), *devices, moved=moved)

    def _source(self, params: list, args: tuple, types_: dict) -> str:
        sig, decls = ["long long standin_size"], []
        for index, ((raw, t, pname), a) in enumerate(zip(params, args)):
            ctype = t if len(t) == 1 else _CTYPE[_dtype_name(t)]
            is_in = index < len(self.ins)
            if type(a) is ndarray:
                sig.append(f"{ctype}* _raw_{pname}")
                if raw:
                    decls.append(f"{'const ' if is_in else ''}{ctype}* const {pname} = _raw_{pname};")
                else:
                    decls.append(f"{'const ' if is_in else ''}{ctype} &{pname} = _raw_{pname}[i];")
            else:
                sig.append(f"const {ctype} {pname}")
        typedefs = "".join(f"typedef {_CTYPE[d]} {k};\n" for k, d in sorted(types_.items()))
        return (PRELUDE + BFLOAT16 + typedefs + self._host_preamble
                + f'\nextern "C" void standin_run({", ".join(sig)}) {{\n'
                + "  for (long long i = 0; i < standin_size; ++i) {\n    "
                + "\n    ".join(decls) + "\n    {\n" + self._host_operation + "\n    }\n  }\n}\n")


def _run_elementwise(lib: ctypes.CDLL, frozen: list, n_in: int, name: str) -> None:
    """One ElementwiseKernel launch: a strided array goes through a contiguous copy (the kernel indexes densely).

    Only outputs are copied back: an input may be a read-only (broadcast) view.
    """
    call_args, copies = [], []
    for index, value in enumerate(frozen):
        if type(value) is np.ndarray:
            buf = value if value.flags.c_contiguous else np.ascontiguousarray(value)
            if buf is not value and index >= n_in:
                copies.append((value, buf))
            call_args.append(ctypes.c_void_p(buf.ctypes.data))
        else:
            call_args.append(value)
    lib.standin_run(*call_args)
    misaligned_access(lib, name)
    for view, buf in copies:
        view[...] = buf


class RawKernel:
    """``cupy.RawKernel(code, name, options=...)``, run on the host one thread at a time."""

    execute = True

    def __init__(self, code: str, name: str, options: tuple = (), backend: str = "nvrtc", **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"unexpected RawKernel arguments {sorted(kwargs)}")
        self.code, self.name, self.options = code, name, tuple(options)
        self.params = parse_signature(code, name)
        self.read_only = read_only_pointers(code, name)
        self._host_code = host_source(code, name)
        self.calls: list[tuple] = []

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: {len(self.params)} arguments expected, {len(args)} given")
        call_args = []
        for (ctype, pname), a in zip(self.params, args):
            if ctype.endswith("*"):
                want = np.dtype(_NUMPY_OF_C[ctype[:-1]])
                if type(a) is not ndarray:
                    raise _not_an_array(a, self.name, pname)
                same = a.dtype == want or (want in _STORAGE_16 and a.dtype in _STORAGE_16)
                if not same or not a._a.flags.c_contiguous:
                    raise TypeError(f"{self.name}: {pname} wants a contiguous {want} array, got {a.dtype} "
                                    f"shape {a.shape} (c_contiguous={a._a.flags.c_contiguous})")
                call_args.append(ctypes.c_void_p(a.data.ptr))
            else:
                # CuPy passes a Python int as long long and a float as double: demand the exact type.
                if type(a) is not _NUMPY_OF_C[ctype]:
                    raise TypeError(f"{self.name}: {pname} is {ctype}; pass numpy.{_NUMPY_OF_C[ctype].__name__}, "
                                    f"got {type(a).__name__}")
                call_args.append(_CTYPES_SCALAR[ctype](a.item()))
        self.calls.append((tuple(grid), tuple(block)))
        devices = [a for a in args if type(a) is ndarray]
        moved = (read_bytes(tuple(a for a, const in zip(args, self.read_only) if const)),
                 read_bytes(tuple(a for a, const in zip(args, self.read_only) if type(a) is ndarray and not const)))
        if not self.execute:
            run(self.name, lambda: None, *devices, moved=moved)
            return
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        block3 = tuple(block) + (1,) * (3 - len(block))
        lib = _library(self._source())
        # The pointers and scalars are frozen; what the kernel reads through them (pointer tables included)
        # is read when it runs.
        frozen = [ctypes.c_uint(v) for v in grid3 + block3] + call_args
        run(self.name, lambda: _run_serially(lib, frozen, self.name), *devices, moved=moved)

    def _source(self) -> str:
        sig = ", ".join(f"{t} {p}" for t, p in self.params)
        names = ", ".join(p for _, p in self.params)
        head = (f'extern "C" int standin_run(unsigned gx, unsigned gy, unsigned gz, unsigned dx, unsigned dy, '
                f'unsigned dz, {sig}) {{\n  gridDim = {{gx, gy, gz}}; blockDim = {{dx, dy, dz}};\n'
                "  for (unsigned bz = 0; bz < gz; ++bz) for (unsigned by = 0; by < gy; ++by)"
                " for (unsigned bx = 0; bx < gx; ++bx) {\n    blockIdx = {bx, by, bz};\n")
        if re.search(r"\b__syncthreads\s*\(", self._host_code):
            return (PRELUDE + self._host_code + _FIBERS + head
                    + f"    standin_body = [&] {{ {self.name}({names}); }};\n"
                    "    if (standin_run_block(dx, dy, dz)) return 1;\n  }\n  return 0;\n}\n")
        return (PRELUDE + self._host_code + head
                + "    for (unsigned tz = 0; tz < dz; ++tz) for (unsigned ty = 0; ty < dy; ++ty)"
                  " for (unsigned tx = 0; tx < dx; ++tx) {\n"
                  f"      threadIdx = {{tx, ty, tz}};\n      {self.name}({names});\n    }}\n  }}\n  return 0;\n}}\n")
