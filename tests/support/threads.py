"""Running a test's work on several threads at once, with the interpreter switching between them often."""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, Iterable


def run_threads(target: Callable[..., Any], arguments: Iterable[tuple], switch_interval: float = 1e-6
                ) -> list[BaseException]:
    """``target(*args)`` for each ``args`` on its own thread, all started together, with threads switched every
    ``switch_interval`` seconds (every shared structure gets interleaved); the exceptions the threads raised."""
    errors: list[BaseException] = []

    def run(*args: Any) -> None:
        try:
            target(*args)
        except Exception as error:  # noqa: BLE001 - returned to the test
            errors.append(error)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(switch_interval)
    try:
        threads = [threading.Thread(target=run, args=args) for args in arguments]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    return errors
