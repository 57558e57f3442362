"""The size of the AMP core a student reads: lines per file, with and without prose.

The core is what one AMP training step runs through from the Tensor to the GEMM:
the Tensor, the tape (``Function.__call__``, the engine, grad mode), the precision
rule, autocast and its casts, the Cast op, the loss scaler, the op table, the GEMM,
the float conversions and the loss-scale kernels. ``CORE`` is read from the table
"The AMP core" of docs/ARCHITECTURE.md, so the document and the count name the same
files; everything else (ops, layers, optimizers, the CUDA and fast CPU kernels, the
instruments of ``study/``, the porting wing) is read on demand.

Prints a table (file, total lines as ``wc -l`` counts them, code lines: neither
blank nor a comment nor part of a docstring) and the lines of ``Function.__call__``
with the helpers it calls, and writes it as JSON (``--json``, default
``benchmarks/core_size.json``).

    python benchmarks/core_size.py [--json PATH] [--root DIR]
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine, table, write_json  # noqa: E402

DOC = ROOT / "docs" / "ARCHITECTURE.md"
BUDGET = 2000  # code lines (issue 27)


def core_files(doc: Path = DOC) -> tuple[str, ...]:
    """The files docs/ARCHITECTURE.md's "The AMP core" table names, in its order."""
    section = doc.read_text().split("**The AMP core**", 1)[1].split("\n\n##", 1)[0]
    return tuple(line.split("`")[1] for line in section.splitlines() if line.startswith("| `"))


CORE = core_files()

# Function.__call__ and what it calls in autograd/function.py, in the order a reader follows them.
CALL_PATH = ("Function.__call__", "Function._apply_precision", "Function._cast_inputs",
             "Function._record_and_trace", "Function._record", "_as_tensors", "_mixed_dtypes")


def _docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers covered by module, class and function docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def count(text: str) -> dict[str, int]:
    """Total lines and code lines (not blank, not only a comment, not in a docstring)."""
    prose = _docstring_lines(ast.parse(text))
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        code.update(line for line in range(tok.start[0], tok.end[0] + 1) if line not in prose)
    return {"lines": text.count("\n"), "code": len(code)}


def call_path_lines(text: str) -> dict[str, int]:
    """Lines of each function of CALL_PATH found in ``text`` (definition to last line)."""
    found = {}
    tree = ast.parse(text)
    for node in tree.body:
        scopes = [("", node)] if not isinstance(node, ast.ClassDef) else \
            [(node.name + ".", child) for child in node.body]
        for prefix, child in scopes:
            if isinstance(child, ast.FunctionDef) and prefix + child.name in CALL_PATH:
                found[prefix + child.name] = child.end_lineno - child.lineno + 1
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "core_size.json"))
    ap.add_argument("--root", default=str(ROOT), help="the checkout to measure")
    args = ap.parse_args()
    root = Path(args.root)
    rows, files = [], {}
    for name in CORE:
        files[name] = count((root / name).read_text())
        rows.append([name, str(files[name]["lines"]), str(files[name]["code"])])
    total = {"lines": sum(f["lines"] for f in files.values()), "code": sum(f["code"] for f in files.values())}
    rows.append(["total", str(total["lines"]), str(total["code"])])
    print(table(rows, ["file", "lines", "code lines"]))
    print(f"\nAMP core: {total['code']} code lines (budget {BUDGET})")
    path = call_path_lines((root / "tinyamp/autograd/function.py").read_text())
    print("\nFunction.__call__ and its helpers: " + ", ".join(f"{k} {v}" for k, v in path.items())
          + f"; {sum(path.values())} lines")
    write_json(args.json, {"machine": machine(), "files": files, "total": total,
                           "call_path": path, "call_path_lines": sum(path.values())})


if __name__ == "__main__":
    main()
