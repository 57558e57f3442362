"""``cupy.cuda.Device``, streams and events of the stand-in (``cupy.cuda.device`` is this module).

Work "on the device" runs at once on the host, so a stream is always done and
an event is complete as soon as it is recorded. Stream capture
(``begin_capture``, ``end_capture``, ``is_capturing``) is attached to
``Stream`` by ``_capture.py``. What still counts is waiting:
``Device.synchronize``, ``Stream.synchronize`` and ``Event.synchronize`` each
count one synchronisation, as each makes a real host wait for the GPU.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from . import runtime
from ._counters import counters

_local = threading.local()
_CUBLAS_HANDLE_BASE = 0x7B1A5000  # an opaque, recognisable handle value per device


class Device:
    """``cupy.cuda.Device(id=None)``: ``id``, a context manager making it current, ``synchronize()``."""

    def __init__(self, device: Any = None) -> None:
        self.id = runtime.getDevice() if device is None else int(device)
        self._previous: list[int] = []

    def __enter__(self) -> "Device":
        self._previous.append(runtime.getDevice())
        runtime.setDevice(self.id)  # CUDARuntimeError for an id that does not exist, as in CuPy
        return self

    def __exit__(self, *exc: Any) -> None:
        runtime.setDevice(self._previous.pop())

    def use(self) -> None:
        runtime.setDevice(self.id)

    def synchronize(self) -> None:
        counters.add("syncs", "Device.synchronize")

    @property
    def compute_capability(self) -> str:
        major, minor = runtime.COMPUTE_CAPABILITY
        return f"{major}{minor}"

    @property
    def cublas_handle(self) -> int:
        return _CUBLAS_HANDLE_BASE + self.id

    @property
    def mem_info(self) -> tuple[int, int]:
        return runtime.memGetInfo()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("cuda_standin.Device", self.id))

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


def get_device_id() -> int:
    return runtime.getDevice()


def get_cublas_handle() -> int:
    """The cuBLAS handle of the current device (one per device here; one per thread and device in CuPy)."""
    return Device().cublas_handle


class Stream:
    """``cupy.cuda.Stream``: a context manager making it current; always ``done``."""

    null: "Stream"

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                 priority: "int | None" = None) -> None:
        self.is_null, self.non_blocking = null, non_blocking
        self.ptr = 0 if null else id(self)

    def __enter__(self) -> "Stream":
        _stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _stack().pop()

    def use(self) -> "Stream":
        _stack()[-1] = self  # the thread's current stream until the next use() or an enclosing exit
        return self

    @property
    def done(self) -> bool:
        """A query, not a wait: the stand-in's work is always finished."""
        counters.notify("queries", "Stream.done")
        return True

    def synchronize(self) -> None:
        counters.add("syncs", "Stream.synchronize")

    def record(self, event: "Event | None" = None) -> "Event":
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: "Event") -> None:
        return None

    def __repr__(self) -> str:
        return "<Stream null>" if self.is_null else f"<Stream 0x{self.ptr:x}>"


Stream.null = Stream(null=True)


def _stack() -> list:
    stack = getattr(_local, "streams", None)
    if stack is None:
        stack = _local.streams = [Stream.null]
    return stack


def get_current_stream() -> Stream:
    return _stack()[-1]


class Event:
    """``cupy.cuda.Event``: ``record`` stamps the host clock; ``get_elapsed_time`` reads two stamps in ms."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self.disable_timing = disable_timing
        self._time: "float | None" = None

    def record(self, stream: "Stream | None" = None) -> None:
        self._time = time.perf_counter()

    @property
    def done(self) -> bool:
        counters.notify("queries", "Event.done")
        return True

    def synchronize(self) -> None:
        counters.add("syncs", "Event.synchronize")


def get_elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds between two recorded events (``cupy.cuda.get_elapsed_time``)."""
    if start._time is None or end._time is None:
        raise RuntimeError("get_elapsed_time: both events must be recorded first")
    if start.disable_timing or end.disable_timing:
        raise RuntimeError("get_elapsed_time: an event was created with disable_timing=True")
    return (end._time - start._time) * 1e3
