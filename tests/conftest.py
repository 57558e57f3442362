"""Shared test fixtures: the device parameter and Hypothesis profiles.

Every device-parametrised test runs on ``cpu``; the ``cuda`` entries carry the
``gpu`` marker and are skipped when no GPU is present.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import tinyamp as ta

settings.register_profile("ci", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HAS_GPU = ta.cuda.is_available()

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu,
                                           pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU")]),
]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _seed() -> None:
    ta.manual_seed(0)
