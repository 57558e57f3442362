"""Every public name tinyamp offered before the layout redesign (issue 27) still resolves.

``public_names.txt`` was recorded at a84f59a (the commit before the redesign) by ``public_names.py``;
a name may be added, never lost. A name removed on purpose is taken out of the file in the same
commit, with the reason in the message.
"""

from __future__ import annotations

import operator
from pathlib import Path

import tinyamp
from tests.core.public_names import public_names

RECORDED = Path(__file__).with_name("public_names.txt").read_text().split()


def _resolves(path: str) -> bool:
    try:
        operator.attrgetter(path.removeprefix("tinyamp."))(tinyamp)
    except AttributeError:
        return False
    return True


def test_every_recorded_public_name_resolves() -> None:
    assert len(RECORDED) > 450, "the recorded list is the whole public surface"
    missing = [name for name in RECORDED if not _resolves(name)]
    assert not missing, f"public names lost: {missing}"


def test_the_recorded_list_is_what_the_namespaces_offered() -> None:
    """Today's namespaces offer at least what was recorded (the recorder still sees every namespace)."""
    lost = sorted(set(RECORDED) - set(public_names()))
    assert not lost, f"no longer offered by their namespace: {lost}"
