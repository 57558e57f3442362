"""A pytest plugin that runs the suite in another order, to find tests that depend on the order (issue 30).

    TINYAMP_TEST_ORDER=7 python -m pytest -p tests.support.order_plugin -n 2      # modules and tests shuffled, seed 7
    TINYAMP_TEST_ORDER=reverse python -m pytest -p tests.support.order_plugin    # both reversed

A module's tests stay together (its module-scoped fixtures are made once); the modules' order and the order
inside each module change. Without the variable the order is pytest's.
"""

from __future__ import annotations

import os
import random

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    order = os.environ.get("TINYAMP_TEST_ORDER")
    if not order:
        return
    groups: dict = {}
    for item in items:
        groups.setdefault(item.nodeid.split("::")[0], []).append(item)
    modules = list(groups)
    if order == "reverse":
        modules.reverse()
        for name in modules:
            groups[name].reverse()
    else:
        rng = random.Random(int(order))
        rng.shuffle(modules)
        for name in modules:
            rng.shuffle(groups[name])
    items[:] = [item for name in modules for item in groups[name]]
