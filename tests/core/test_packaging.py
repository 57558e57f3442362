"""What a plain install brings (pyproject.toml) and that the README's first command gets the fast CPU path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from tests.support import REPO

ROOT = str(REPO)


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_numba_and_matplotlib_are_installed_by_a_plain_install() -> None:
    names = {re.split(r"[<>=!~ \[]", d, maxsplit=1)[0].lower() for d in _project()["dependencies"]}
    assert {"numpy", "ml_dtypes", "numba", "matplotlib"} <= names
    extras = _project()["optional-dependencies"]
    assert extras["jit"] == [] and extras["plot"] == []  # older commands keep working


def test_the_readme_first_command_is_a_plain_install_and_draws_with_it() -> None:
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    first = re.search(r"```bash\n(.*?)\n```", readme, re.S).group(1)
    assert "pip install -e . &&" in first and "[jit]" not in readme
    assert "python examples/tiny_transformer.py --out plots/" in readme  # a documented command that draws


def test_a_fresh_process_without_settings_takes_the_numba_cast_path() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TINYAMP_CAST_BACKEND"}
    code = ("import numpy as np; from tinyamp.kernels import convert; from tinyamp.kernels.cpu import cpu_path; "
            "convert.convert(np.ones(4096, np.float32), np.float16); "
            "print(cpu_path.BACKEND, cpu_path.numba_available())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["numba", "True"], result.stdout + result.stderr
