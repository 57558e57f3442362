"""Every repository file the documentation names exists.

Read: README.md, every docs/*.md and benchmarks/RESULTS.md. A name counts as a
file path when it is written as one:

- in backticks, without spaces, starting with a top-level folder of the
  repository (`examples/mnist_mlp.py`, `tinyamp/amp/`): it must exist from the
  repository root;
- in backticks, with a ``/`` or a file suffix (`amp/casting.py`,
  `cpu/cpu_path.py`, `convert.py`), as ARCHITECTURE.md names files inside the
  package: some file or folder of the repository must end with it;
- a Markdown link target (`[x](docs/gpu.md)`), relative to the document;
- in a fenced code block, a word starting with a top-level folder
  (`python examples/mnist_mlp.py --amp`).

Names that are not files (`ta.nn.Linear`, `x.half()`, `--out DIR`, `plots/`,
globs, placeholders, URLs) do not look like this and are not checked. A file
that no longer exists (history in RESULTS.md, another project's files) is
named in plain text, not in backticks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
        "benchmarks/RESULTS.md"]
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in {".git", ".venv"}
             and not p.name.startswith((".pytest", ".hypothesis")) and p.name != "__pycache__")
SUFFIXES = (".py", ".md", ".sh", ".json", ".npz", ".png", ".toml", ".txt", ".gz", ".cfg", ".ini", ".yml")
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}


def _repo_paths() -> set[str]:
    """Every file and folder of the repository, relative to the root, folders with a trailing '/'."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        rel = os.path.relpath(folder, ROOT)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        found.update(prefix + d + "/" for d in dirs)
        found.update(prefix + f for f in files)
    return found


PATHS = _repo_paths()


def _looks_like_a_path(token: str) -> bool:
    if not token or any(c in token for c in " *?<>{}$|=:()[],'\"") or token.startswith(("-", "~", "http")):
        return False
    return "/" in token.strip("/") or token.endswith(SUFFIXES) or any(token.startswith(t + "/") for t in TOP)


def named_paths(text: str, doc: str) -> list[tuple[str, str]]:
    """(how it is named, where it must be found) for every file path ``text`` names."""
    names: list[tuple[str, str]] = []
    fences = re.split(r"^```.*$", text, flags=re.M)
    prose, code = fences[0::2], fences[1::2]
    for block in code:
        for word in re.findall(r"[\w./-]+", block):
            if any(word.startswith(t + "/") for t in TOP) and _looks_like_a_path(word):
                names.append((word, "root"))
    for part in prose:
        for token in re.findall(r"`([^`\n]+)`", part):
            if _looks_like_a_path(token):
                anchored = any(token.startswith(t + "/") for t in TOP)
                names.append((token, "root" if anchored else "suffix"))
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", part):
            if not target.startswith(("http:", "https:", "mailto:")):
                names.append((os.path.normpath(os.path.join(os.path.dirname(doc), target)).replace(os.sep, "/"),
                              "root"))
    return names


def missing_paths(text: str, doc: str) -> list[str]:
    """The names in ``text`` that are not a file or folder of the repository."""
    missing = []
    for name, where in named_paths(text, doc):
        bare = name.rstrip("/")
        if where == "root":
            ok = bare in PATHS or bare + "/" in PATHS
        else:
            ok = any(p.rstrip("/") == bare or p.rstrip("/").endswith("/" + bare) for p in PATHS)
        if not ok:
            missing.append(name)
    return sorted(set(missing))


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_the_document_names_exists(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert named_paths(text, doc), f"{doc}: no file paths found: the reader of this test is broken"
    assert missing_paths(text, doc) == [], f"{doc} names files that do not exist"


def test_the_reader_finds_paths_and_only_paths() -> None:
    text = ("See `tests/cuda_emulation.py`, `amp/casting.py`, `nowhere/x.py` and `ta.nn.Linear`, `--out DIR`, "
            "`x.half()`, `plots/`, [arch](ARCHITECTURE.md).\n```bash\npython examples/missing.py --out plots/\n```\n")
    names = [n for n, _ in named_paths(text, "docs/page.md")]
    assert names == ["examples/missing.py", "tests/cuda_emulation.py", "amp/casting.py", "nowhere/x.py",
                     "docs/ARCHITECTURE.md"]
    assert missing_paths(text, "docs/page.md") == ["examples/missing.py", "nowhere/x.py", "tests/cuda_emulation.py"]
