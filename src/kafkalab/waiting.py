"""Waiting on conditions, never on bare sleeps."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from .errors import WaitTimeout

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.1,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` until it returns a truthy value, and return that value.

    Args:
        condition: called repeatedly; exceptions propagate (catch inside if they are expected).
        timeout_s: give up after this many seconds.
        what: the condition in words, e.g. ``"3 brokers registered"``; it names the timeout.
        interval_s: pause between calls, seconds.
        on_timeout: optional callable whose text is appended to the error (e.g. last log lines).

    Raises:
        WaitTimeout: ``"timed out after 30.0 s waiting for 3 brokers registered"``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = on_timeout() if on_timeout else ""
            raise WaitTimeout(f"timed out after {timeout_s:.1f} s waiting for {what}" + (f"\n{extra}" if extra else ""))
        time.sleep(interval_s)
