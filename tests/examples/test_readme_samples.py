"""The README's sample output is what its commands print today, and its first screen teaches.

Each ```text block of README.md is output of the last ``python examples/...``
command named (in backticks) before it. The test runs that command in-process
and checks that every line of the block (trailing spaces aside; ``...`` marks
lines left out) is a line of the output. When an op, a label or a number
changes, regenerate the block from the command it names.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST_SCREEN = 60


def _samples() -> list[tuple[list[str], list[str]]]:
    """(command argv, sample lines) for each ```text block of the README."""
    samples = []
    for match in re.finditer(r"^```text\n(.*?)^```", README, re.S | re.M):
        before = README[:match.start()]
        commands = re.findall(r"`(python examples/[^`]+)`", before)
        assert commands, f"no `python examples/...` command before the sample at offset {match.start()}"
        lines = [line.rstrip() for line in match.group(1).splitlines() if line.strip() != "..."]
        samples.append((shlex.split(commands[-1])[1:], lines))
    return samples


SAMPLES = _samples()


def _run(argv: list[str]) -> str:
    path = ROOT / argv[0]
    spec = importlib.util.spec_from_file_location(f"readme_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main(argv[1:])
    return out.getvalue()


def test_the_readme_shows_three_samples_of_the_tour_the_trace_and_the_shadow_run() -> None:
    commands = [" ".join(argv) for argv, _ in SAMPLES]
    assert commands == ["examples/autocast_tour.py", "examples/mnist_mlp.py --hidden 1024 --steps 1 --trace",
                        "examples/autocast_tour.py --section 6"]


@pytest.mark.parametrize("argv, lines", SAMPLES, ids=[" ".join(argv) for argv, _ in SAMPLES])
def test_each_sample_is_real_output_of_its_command(argv: list[str], lines: list[str]) -> None:
    printed = {line.rstrip() for line in _run(argv).splitlines()}
    missing = [line for line in lines if line not in printed]
    assert not missing, f"README lines that `python {' '.join(argv)}` does not print (regenerate them):\n" + \
        "\n".join(missing)


def test_the_first_screen_holds_the_loop_where_to_start_and_the_tour_and_trace_output() -> None:
    screen = "\n".join(README.splitlines()[:FIRST_SCREEN])
    for needed in ("with ta.amp.autocast():", "scaler.scale(loss).backward()", "scaler.update()",
                   "## Start here", "python examples/autocast_tour.py", "ta.amp.trace()"):
        assert needed in screen, needed
    assert screen.count("```text") == 2 and screen.count("```") >= 6  # the tour's and the trace's, closed


def test_the_two_fresh_machine_commands_training_first() -> None:
    commands = [line for line in README.splitlines() if line.startswith("python3 -m venv .venv")]
    assert commands == [
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && python examples/mnist_mlp.py --amp",
        'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && python -m pytest -q']
