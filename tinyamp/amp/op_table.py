"""``ta.amp.op_table()``: every op, its precision tag and its math, read from the op classes.

There is one source of truth for what autocast does to an op: the ``precision``
attribute of its ``Function`` subclass. This module reads the subclasses of
``Function`` from the registry its ``__init_subclass__`` fills, and keeps those
that implement a public op, i.e. whose ``name`` is a function of the op library
(``ta.<name>``, ``ta.nn.functional.<name>``) or a Tensor method. Helper nodes that only run
inside a backward (``XxxGrad``) and user-defined Functions are left out.

The table is a read-only mapping from op name to :class:`OpInfo`; printing it
gives one line per op grouped by tag, with any global override shown.

The global per-op overrides (``ta.amp.set_op_precision`` and friends) are
here too: they change the tag in force of an op named in this table, and the
table is what checks the names. The overrides themselves are stored in
:mod:`tinyamp.precision`, where the tape reads them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator

from .. import ops
from ..autograd.custom_function import CustomFunction
from ..autograd.function import REGISTRY
from ..ops import TENSOR_METHODS
from ..precision import FP32, LOWER, NEUTRAL, PROMOTE, Precision, as_precision, global_overrides

_TAG_ORDER = {LOWER: 0, FP32: 1, PROMOTE: 2, NEUTRAL: 3}
_TAG_MEANING = {
    LOWER: "cast float inputs to the autocast dtype (float16/bfloat16)",
    FP32: "cast float16/bfloat16 inputs to float32",
    PROMOTE: "cast float inputs to the widest among them (also outside autocast)",
    NEUTRAL: "run in whatever dtype arrives",
}


@dataclass(frozen=True)
class OpInfo:
    """One row: the op's public name, its class tag, the tag in force, and its math."""

    name: str
    tag: Precision          # declared on the class
    effective: Precision    # after global overrides (ta.amp.set_op_precision)
    description: str        # first line of the class docstring
    cls: type

    @property
    def overridden(self) -> bool:
        return self.effective is not self.tag


def _public_names() -> set[str]:
    return set(dir(ops)) | set(TENSOR_METHODS)


def op_classes() -> dict[str, list[type]]:
    """Public op name -> the built-in Function classes that carry it (normally one)."""
    public = _public_names()
    result: dict[str, list[type]] = {}
    for cls in REGISTRY:
        if issubclass(cls, CustomFunction) or not cls.__module__.startswith("tinyamp."):
            continue
        if "precision" not in vars(cls) and not hasattr(cls, "precision"):
            continue
        if any(getattr(base, "name", None) == cls.name for base in cls.__mro__[1:]):
            continue  # a variant of its parent op (autocast's CachedCast is a Cast)
        if cls.name in public:
            result.setdefault(cls.name, []).append(cls)
    return result


class OpTable(Mapping):
    """Op name -> :class:`OpInfo`, ordered by tag then name; ``print`` it for a table."""

    def __init__(self, rows: list[OpInfo]) -> None:
        rows = sorted(rows, key=lambda r: (_TAG_ORDER[r.tag], r.name))
        self._rows = {r.name: r for r in rows}

    def __getitem__(self, name: str) -> OpInfo:
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def by_tag(self, tag: "Precision | str") -> list[str]:
        """Names of the ops whose tag in force is ``tag``."""
        tag = as_precision(tag)
        return [r.name for r in self._rows.values() if r.effective is tag]

    def to_dict(self) -> dict:
        return {r.name: {"tag": r.tag.value, "effective": r.effective.value, "description": r.description}
                for r in self._rows.values()}

    def __str__(self) -> str:
        width = max([len(n) for n in self._rows] + [4])
        lines = [f"{len(self._rows)} ops; the tag is declared on each op class "
                 f"(override with ta.amp.set_op_precision or autocast(..., lower_ops=...))"]
        for tag in _TAG_ORDER:
            rows = [r for r in self._rows.values() if r.tag is tag]
            if not rows:
                continue
            lines.append("")
            lines.append(f"{tag.name}: {_TAG_MEANING[tag]}")
            for r in rows:
                note = f"   [globally overridden: {r.effective.name}]" if r.overridden else ""
                lines.append(f"  {r.name:<{width}}  {r.description}{note}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def op_table() -> OpTable:
    """Every public op with its precision tag, derived from the op classes."""
    overrides = global_overrides()
    rows = []
    for name, classes in op_classes().items():
        cls = classes[0]
        doc = (cls.__doc__ or "").strip().splitlines()
        rows.append(OpInfo(name, cls.precision, overrides.get(name, cls.precision),
                           doc[0].strip() if doc else "", cls))
    return OpTable(rows)


def known_op_names() -> set[str]:
    """The names per-op overrides may use."""
    return set(op_classes())


# --------------------------------------------------------------------------
# Global per-op overrides
# --------------------------------------------------------------------------

def check_op_name(name: Any, where: str) -> str:
    """``name`` if it is an op the table knows; else a ValueError naming ``where`` and close matches."""
    known = known_op_names()
    if not isinstance(name, str) or name not in known:
        close = difflib.get_close_matches(str(name), sorted(known), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"{where}: unknown op name {name!r}{hint} (ta.amp.op_table() lists the ops)")
    return name


def set_op_precision(name: str, tag: "Precision | str") -> None:
    """Override op ``name``'s tag in every autocast region (Paddle's custom white/black lists).

    ``ta.amp.set_op_precision("exp", "lower")`` runs ``exp`` in float16 under
    autocast; :func:`reset_op_precision` undoes it. Outside autocast only the
    class tag counts (PROMOTE ops always promote).
    """
    global_overrides()[check_op_name(name, "set_op_precision")] = as_precision(tag)


def get_op_precision(name: str) -> Precision:
    """The tag op ``name`` has in autocast regions, global overrides included."""
    check_op_name(name, "get_op_precision")
    return global_overrides().get(name, op_classes()[name][0].precision)


def reset_op_precision(name: "str | None" = None) -> None:
    """Drop the global override of ``name`` (all of them when None)."""
    if name is None:
        global_overrides().clear()
    else:
        global_overrides().pop(check_op_name(name, "reset_op_precision"), None)
