"""The package's import structure: layers point downward and nothing imports in a circle.

The layers are read from the table in docs/ARCHITECTURE.md ("Layers"), so the
document and this test cannot disagree. Every module of ``tinyamp/`` is parsed
with :mod:`ast` (nothing is imported), its imports resolved to module names
(relative ones included, ``from . import x`` naming the submodule ``x``), and:

- every module belongs to a layer of the table;
- an import at module level (not inside a function) names a module of its own
  layer or a lower one;
- module-level imports form no circle;
- an import inside a function is one the document allows (optional packages
  imported on first use); a function never imports a tinyamp module.

Below the package face no module has a bare ``import tinyamp`` (it would reach
names through the face at call time, which the layer checks cannot see). What
builds on a lower layer installs itself there from above (``ops/methods.py`` on
Tensor), and a package's ``__init__`` named in the face row may re-export wings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from tests.support import REPO

REPO = REPO
PACKAGE = REPO / "tinyamp"
DOC = REPO / "docs" / "ARCHITECTURE.md"

# Imports inside functions that the document allows: module -> {top-level
# package imported there: why}. Each is an optional dependency, imported on
# first use so that ``import tinyamp`` works (and stays fast) without it.
ALLOWED_IN_FUNCTIONS = {
    "tinyamp.backend": {"cupy": "the one place CuPy is imported, on first use of a GPU"},
    "tinyamp.kernels.cpu.cpu_numba": {"numba": "optional jit extra; about a second to import",
                                  "llvmlite": "numba's IR builder, with numba"},
    "tinyamp.kernels.cpu.fp8_cpu": {"numba": "the fp8 kernels, with the other numba kernels",
                                    "llvmlite": "numba's IR builder, with numba"},
    "tinyamp.study.grad_stats": {"matplotlib": "optional plot extra, only for plotting"},
    "tinyamp.porting.distributed.mpi_backend": {"mpi4py": "optional dist extra; importing it initialises MPI"},
    "tinyamp.porting.distributed.launch_worker": {"mpi4py": "optional dist extra; initialises MPI for the rank"},
    "cupy_standin.nccl": {"mpi4py": "optional dist extra; the NCCL stand-in's collectives travel over MPI"},
}


# ------------------------------------------------------------------ reading
def layer_table() -> list[tuple[int, str, list[str]]]:
    """(number, name, module prefixes) for each row of the Layers table of the document."""
    text = DOC.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            # `amp/__init__.py` names the package module alone (a face), `amp/` the package and all below it
            prefixes = ["tinyamp" if m in ("tinyamp", "tinyamp/__init__.py") else
                        "=tinyamp." + m.removesuffix("/__init__.py").replace("/", ".") if m.endswith("/__init__.py")
                        else "tinyamp." + m.rstrip("/").removesuffix(".py").replace("/", ".")
                        for m in re.findall(r"`([^`]+)`", cells[2])]
            rows.append((int(cells[0]), cells[1], prefixes))
    return rows


def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _imports(tree: ast.Module) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """(module-level imports, imports inside a function) of a parsed module."""
    top, inner = [], []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top).append(child)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return top, inner


def resolve(node: ast.stmt, module: str, modules: dict[str, Path]) -> list[str]:
    """The names of the modules an import statement loads (tinyamp modules and external ones)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        package = module if _is_package(module, modules) else module.rsplit(".", 1)[0]
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    found = []
    for alias in node.names:
        candidate = f"{source}.{alias.name}"
        # ``from package import submodule`` loads the submodule; any other name
        # comes from the package (or module) itself.
        found.append(candidate if candidate in modules else source)
    return sorted(set(found))


def layer_of(module: str, table: list[tuple[int, str, list[str]]]) -> "tuple[int, str] | None":
    best = None
    for number, name, prefixes in table:
        for prefix in prefixes:
            exact = prefix.startswith("=")  # a package's face (its __init__) outranks the package's row
            prefix = prefix.lstrip("=")
            if module == prefix or (not exact and prefix != "tinyamp" and module.startswith(prefix + ".")):
                rank = (len(prefix), exact)
                if best is None or rank > best[0]:
                    best = (rank, number, name)
    return None if best is None else (best[1], best[2])


def import_graph(package: Path) -> tuple[dict[str, set[str]], dict[str, list[tuple[int, str]]]]:
    """(module -> tinyamp modules it imports at module level, module -> [(line, module)] of the
    imports inside its functions)."""
    modules = module_names(package)
    edges: dict[str, set[str]] = {}
    inner: dict[str, list[tuple[int, str]]] = {}
    for module, path in modules.items():
        top, local = _imports(ast.parse(path.read_text(), filename=str(path)))
        edges[module] = {name for node in top for name in resolve(node, module, modules)
                         if name.startswith("tinyamp.")}
        inner[module] = [(node.lineno, name) for node in local for name in resolve(node, module, modules)]
    return edges, inner


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def connect(v: str) -> None:  # Tarjan; the package is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(_circle(sorted(component), edges))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def _circle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A concrete circle through the first module of a strongly connected component."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth-first, so the circle shown is a shortest one
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & members):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return component


# ------------------------------------------------------------------ checks
def test_the_document_has_the_layer_order_of_the_issue() -> None:
    names = [name for _, name, _ in layer_table()]
    assert names[:6] == ["backend", "precision, kernels", "tensor", "autograd", "ops", "amp, nn, optim"]
    assert names[6] == "data" and names[-1] == "package"
    assert [n for n, _, _ in layer_table()] == list(range(1, len(names) + 1))


def test_every_module_belongs_to_a_layer() -> None:
    table = layer_table()
    unassigned = [m for m in module_names(PACKAGE) if layer_of(m, table) is None]
    assert not unassigned, (f"modules in no layer of docs/ARCHITECTURE.md: {unassigned}; add them to the "
                            f"Layers table")


def test_module_level_imports_point_down() -> None:
    table = layer_table()
    edges, _ = import_graph(PACKAGE)
    upward = []
    for module, targets in sorted(edges.items()):
        here = layer_of(module, table)
        for target in sorted(targets):
            there = layer_of(target, table)
            if here is not None and there is not None and there[0] > here[0]:
                upward.append(f"{module} (layer {here[0]}, {here[1]}) imports {target} "
                              f"(layer {there[0]}, {there[1]})")
    assert not upward, "upward imports (import from a lower layer, or install from above as ops/methods.py does):\n  " \
        + "\n  ".join(upward)


def test_no_import_circles() -> None:
    edges, _ = import_graph(PACKAGE)
    found = cycles(edges)
    assert not found, "import circles:\n  " + "\n  ".join(" -> ".join(c) for c in found)


def test_imports_inside_functions_are_the_documented_optional_ones() -> None:
    _, inner = import_graph(PACKAGE)
    bad = [f"{module}:{line} imports {name}" for module, items in sorted(inner.items())
           for line, name in items if name.split(".")[0] not in ALLOWED_IN_FUNCTIONS.get(module, {})]
    assert not bad, "imports inside functions (move them to the top of the module):\n  " + "\n  ".join(bad)
    documented = DOC.read_text()
    for module, allowed in ALLOWED_IN_FUNCTIONS.items():
        for name in allowed:
            assert f"`{name}`" in documented, f"docs/ARCHITECTURE.md does not say why {module} imports {name} late"


def test_the_amp_mechanism_does_not_import_its_instruments() -> None:
    """``amp/`` (autocast, casting, the scaler, the op table) runs without ``study/`` (report, shadow
    run, statistics): only the package ``tinyamp.amp`` re-exports the instruments' public names."""
    edges, _ = import_graph(PACKAGE)
    mechanism = [m for m in edges if m.startswith("tinyamp.amp.")]
    assert "tinyamp.amp.autocast" in mechanism and "tinyamp.amp.grad_scaler" in mechanism
    bad = [f"{m} imports {t}" for m in sorted(mechanism) for t in sorted(edges[m])
           if t == "tinyamp.amp" or t.startswith("tinyamp.study")]
    assert not bad, "the AMP mechanism imports its instruments:\n  " + "\n  ".join(bad)
    assert "tinyamp.study" in edges["tinyamp.amp"]


def test_cpu_and_cuda_kernels_do_not_import_each_other() -> None:
    """``kernels/cpu/`` and ``kernels/cuda/`` meet only in the reference modules at the top of ``kernels/``."""
    edges, _ = import_graph(PACKAGE)
    sides = {"tinyamp.kernels.cpu": "tinyamp.kernels.cuda", "tinyamp.kernels.cuda": "tinyamp.kernels.cpu"}
    found = {side: [m for m in edges if m.startswith(side + ".")] for side in sides}
    assert "tinyamp.kernels.cpu.cpu_numba" in found["tinyamp.kernels.cpu"]
    assert "tinyamp.kernels.cuda.cuda_launch" in found["tinyamp.kernels.cuda"]
    bad = [f"{m} imports {t}" for side, other in sides.items() for m in found[side] for t in sorted(edges[m])
           if t == other or t.startswith(other + ".")]
    assert not bad, "CPU and CUDA kernels import each other:\n  " + "\n  ".join(bad)


def test_the_checks_see_what_they_check() -> None:
    """The parser finds the edges the package is known to have (so an empty result means something)."""
    edges, inner = import_graph(PACKAGE)
    assert "tinyamp.precision" in edges["tinyamp.autograd.function"]
    assert "tinyamp.ops.broadcast" in edges["tinyamp.ops"]               # from . import broadcast
    assert "tinyamp.dtypes" in edges["tinyamp.precision"]                 # from . import dtypes as dt
    assert "tinyamp.kernels.cpu.cpu_numba" in edges["tinyamp.kernels.gemm"]          # from .cpu import cpu_numba
    assert any(name == "cupy" for _, name in inner["tinyamp.backend"])
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_test_support_lives_outside_the_framework() -> None:
    """The CUDA stand-in is its own top-level package: nothing of it inside ``tinyamp/``, it imports no
    tinyamp module, and the framework loads it only by name in ``backend.py`` (the provider supplies its
    libraries and counters as attributes, so no other module asks which provider is active)."""
    assert not [p for p in PACKAGE.rglob("*") if "standin" in p.name], "test support inside tinyamp/"
    standin = REPO / "cupy_standin"
    bad = []
    for path in sorted(standin.rglob("*.py")):
        top, inner = _imports(ast.parse(path.read_text(), filename=str(path)))
        bad += [f"{path.name}:{node.lineno}" for node in top + inner
                if any((n or "").split(".")[0] == "tinyamp" for n in
                       ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]))]
    assert not bad, f"the stand-in imports tinyamp: {bad}"
    asking = [str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")
              if p.name != "backend.py" and "standin_active(" in p.read_text()]
    assert not asking, f"production modules that branch on the provider: {asking}"
    names = [str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")
             if any(isinstance(n, ast.Constant) and n.value == "cupy_standin"
                    for n in ast.walk(ast.parse(p.read_text())))]
    assert names == ["tinyamp/backend.py"], names


def test_no_module_below_the_face_imports_the_package() -> None:
    """Below ``tinyamp/__init__.py`` every module imports what it uses from where it lives: no bare
    ``import tinyamp`` (which hid upward reaches at call time from the layer checks above)."""
    bare = []
    for module, path in module_names(PACKAGE).items():
        if module == "tinyamp":
            continue
        top, inner = _imports(ast.parse(path.read_text(), filename=str(path)))
        bare += [f"{module}:{node.lineno}" for node in top + inner if isinstance(node, ast.Import)
                 and any(alias.name == "tinyamp" or alias.name.startswith("tinyamp.") for alias in node.names)]
    assert not bare, "modules that import the package face: " + ", ".join(bare)


def test_ops_and_optimizers_reach_kernels_only_through_the_dispatch_at_the_top() -> None:
    """Every device and dtype choice is made in ``kernels/<kernel>.py``: no op or optimizer module imports
    ``kernels/cpu/`` or ``kernels/cuda/`` (it calls one dispatching function at the top of ``kernels/``)."""
    edges, _ = import_graph(PACKAGE)
    users = [m for m in edges if m.startswith(("tinyamp.ops.", "tinyamp.optim."))]
    assert "tinyamp.ops.linalg" in users and "tinyamp.optim.sgd" in users
    assert "tinyamp.kernels.gemm" in edges["tinyamp.ops.linalg"]
    below = ("tinyamp.kernels.cpu", "tinyamp.kernels.cuda")
    bad = [f"{m} imports {t}" for m in sorted(users) for t in sorted(edges[m])
           if t in below or t.startswith(tuple(b + "." for b in below))]
    assert not bad, "op or optimizer modules that choose a device themselves:\n  " + "\n  ".join(bad)


def test_the_optimizers_do_not_import_the_study_instruments() -> None:
    """``optim/`` sits below the study instruments: swamping attaches itself through the step hooks."""
    edges, _ = import_graph(PACKAGE)
    optim = [m for m in edges if m == "tinyamp.optim" or m.startswith("tinyamp.optim.")]
    assert "tinyamp.optim.optimizer" in optim
    bad = [f"{m} imports {t}" for m in sorted(optim) for t in sorted(edges[m])
           if t.startswith(("tinyamp.amp.study", "tinyamp.study"))]
    assert not bad, "optimizers import the study instruments:\n  " + "\n  ".join(bad)


def test_every_import_of_the_package_names_a_module_that_exists() -> None:
    """A relative import that points where a module used to be fails here, not only at ``import tinyamp``
    in a clean checkout (another tree on the path could serve the old module and hide it)."""
    modules = module_names(PACKAGE)
    missing = []
    for module, path in modules.items():
        package = module if _is_package(module, modules) else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
                source = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                if source and source.split(".")[0] == "tinyamp" and source not in modules:
                    missing.append(f"{module}:{node.lineno} imports {source}")
    assert not missing, "imports of modules that do not exist:\n  " + "\n  ".join(missing)
