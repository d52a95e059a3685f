"""One poll loop for every "wait until X or give up" in the platform."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout_s: float, interval_s: float = 0.5) -> T | None:
    """Call `check` every `interval_s` until it returns something truthy (returned) or
    `timeout_s` passes (None; `check` is asked once more at the deadline, so a slow last step
    that succeeded is not reported as a timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(interval_s, max(0.01, deadline - time.monotonic())))
