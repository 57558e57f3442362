"""Shared test fixtures: the device parameter, the CUDA backends and Hypothesis profiles.

Every device-parametrised test runs three times:

- ``cpu``: NumPy;
- ``standin``: the strict CUDA stand-in (``cupy_standin``) is made the
  CUDA backend for the test and the test gets ``"cuda"``, so its CUDA branch
  runs on any machine (CuPy's strictness, cuBLAS's argument checks, the fused
  kernels compiled with g++, counted launches and syncs);
- ``cuda``: a real GPU, marked ``gpu`` and skipped when there is none.

Tests that only make sense on CUDA take the ``cuda_backend`` fixture (the
last two of these) instead of ``device``.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

import tinyamp as ta
import cupy_standin as cuda_standin
from tinyamp import backend

settings.register_profile("ci", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HAS_GPU = ta.cuda.is_available() and not backend.standin_active()

GPU = pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU")])
STANDIN = pytest.param("standin", id="standin")
DEVICES = [pytest.param("cpu", id="cpu"), STANDIN, GPU]
CUDA_BACKENDS = [STANDIN, GPU]


def _run_on(kind: str) -> Iterator[str]:
    """Yield the device string for ``kind``, with the stand-in as CUDA backend for ``standin``."""
    if kind != "standin":
        yield kind
        return
    # Each test starts from an empty pool cache, so the addresses it sees do not depend on earlier tests.
    cuda_standin.get_default_memory_pool().free_all_blocks()
    with backend.use_cuda_standin():
        yield "cuda"


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _run_on(request.param)


@pytest.fixture
def standin_backend() -> Iterator[str]:
    """"cuda" on the stand-in alone (for counts only it keeps: launches, bytes)."""
    yield from _run_on("standin")


@pytest.fixture(params=CUDA_BACKENDS)
def cuda_backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """"cuda", on the stand-in or on a real GPU; the test may ask ``backend.standin_active()`` which."""
    yield from _run_on(request.param)


@pytest.fixture(autouse=True)
def _no_device_error_left_pending() -> Iterator[None]:
    """A device error a test flagged and never read would be raised by a later test's host read: fail its own."""
    yield
    try:
        backend.raise_device_errors()
    except Exception as error:  # noqa: BLE001 - any flagged error is the test's
        pytest.fail(f"the test left a device error pending (raised at the next host read): {error!r}")


@pytest.fixture(autouse=True)
def _seed() -> None:
    ta.manual_seed(0)
    ta.amp.clear_autocast_cache()  # the weight-cast cache outlives regions: each test starts empty
