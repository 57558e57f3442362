"""The public names of tinyamp: what its public namespaces offer (PyTorch's ``torch``, ``torch.nn``,
``torch.amp``, ... and tinyamp's own documented ones), as dotted paths.

A package namespace (``ta.nn``) offers every non-underscore attribute it re-exports; a plain module
(``ta.utils.checkpoint``) offers the names it defines itself (and its ``__all__``), not what it imports
for its own use. Attributes that are tinyamp's internal modules (``ta.ops.reduce``) are left out: where
code lives is the layout, which may change; what a namespace offers may not.
``python tests/core/public_names.py > tests/core/public_names.txt`` records them; the test
(test_public_names.py) checks that every recorded name still resolves.
"""

from __future__ import annotations

import ast
import inspect
import operator
import types

import tinyamp

NAMESPACES = ["tinyamp", "tinyamp.nn", "tinyamp.nn.functional", "tinyamp.nn.init", "tinyamp.nn.utils",
              "tinyamp.nn.parallel", "tinyamp.nn.modules", "tinyamp.optim", "tinyamp.optim.lr_scheduler",
              "tinyamp.optim.swa_utils", "tinyamp.amp", "tinyamp.cuda", "tinyamp.cuda.amp", "tinyamp.accelerator",
              "tinyamp.distributed", "tinyamp.utils", "tinyamp.utils.data", "tinyamp.utils.checkpoint",
              "tinyamp.backends", "tinyamp.backends.cuda", "tinyamp.backends.cudnn", "tinyamp.autograd",
              "tinyamp.data", "tinyamp.memory", "tinyamp.backend", "tinyamp.random"]

FACES = {"tinyamp.nn.functional"}  # plain modules that are PyTorch's faces: all they hold is offered


def _defined(module: types.ModuleType) -> set[str]:
    """The names a plain module binds itself at top level (defs, classes, assignments) and its ``__all__``."""
    tree = ast.parse(inspect.getsource(module))
    names = set(getattr(module, "__all__", ()))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def public_names() -> list[str]:
    names = []
    for path in NAMESPACES:
        obj = operator.attrgetter(path.removeprefix("tinyamp.")) (tinyamp) if path != "tinyamp" else tinyamp
        plain = isinstance(obj, types.ModuleType) and not hasattr(obj, "__path__") and path not in FACES
        offered = _defined(obj) if plain else set(dir(obj))
        for name in sorted(offered):
            value = getattr(obj, name, None)
            if name.startswith("_") or (isinstance(value, types.ModuleType) and f"{path}.{name}" not in NAMESPACES):
                continue
            if not plain and (isinstance(value, (type, types.FunctionType))
                              and not value.__module__.startswith("tinyamp")) or name == "annotations":
                continue  # a package's own imports (typing, numpy functions), not tinyamp's API
            names.append(f"{path}.{name}")
    return sorted(names)


if __name__ == "__main__":
    print("\n".join(public_names()))
