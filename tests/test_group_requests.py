"""AdminClient group requests keep clear of the librdkafka 2.16.0 abort.

librdkafka 2.16.0 (confluent-kafka 2.16.1) aborts the process when a group request (one sent
through FindCoordinator: DescribeGroups, DeleteGroups, OffsetFetch, OffsetCommit/Delete by an
AdminClient) is ended by librdkafka's own request timer while its coordinator is down, and the
coordinator then comes back (``benchmarks/librdkafka_admin_abort.py`` reproduces it on every
round). kafkalab's rule: every such request goes through ``workloads.group_request``, which
sends it with ``ADMIN_GROUP_OPTIONS`` (librdkafka's timer at its maximum) and stops waiting on
its own. These tests read the source for calls that skip that rule, and check the wait.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from pathlib import Path

import pytest

from kafkalab import workloads

ROOT = Path(__file__).resolve().parents[1]

#: AdminClient methods that go through FindCoordinator to a group coordinator
#: (confluent-kafka 2.16.1, ``confluent_kafka/admin/__init__.py``).
GROUP_METHODS = ("describe_consumer_groups", "delete_consumer_groups", "list_consumer_group_offsets",
                 "alter_consumer_group_offsets", "delete_consumer_group_offsets")

#: Where a raw call is the point: the benchmark that reproduces the abort.
RAW_ALLOWED = {"benchmarks/librdkafka_admin_abort.py"}


def sources() -> list[Path]:
    files = [p for d in ("src", "tests", "benchmarks", "notebooks") for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".ipynb") and ".ipynb_checkpoints" not in p.parts]
    return [p for p in files if p.resolve() != Path(__file__).resolve()]


def test_every_group_request_goes_through_group_request():
    call = re.compile(r"\.(" + "|".join(GROUP_METHODS) + r")\(")
    offenders = []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel in RAW_ALLOWED:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if call.search(line) and "**o)" not in line:
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, ("group requests not sent through workloads.group_request(lambda o: ...(..., **o)):\n"
                           + "\n".join(offenders))
    # the rule has something to check: the package does send group requests
    assert any(call.search(p.read_text(encoding="utf-8")) for p in (ROOT / "src").rglob("*.py"))


def test_group_request_leaves_librdkafka_timer_at_its_maximum_and_waits_on_its_own():
    given = {}
    pending: concurrent.futures.Future = concurrent.futures.Future()  # never answered

    def call(options):
        given.update(options)
        return {"g": pending}

    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        workloads.group_request(call, 0.3, "g")
    waited = time.monotonic() - t0
    # librdkafka's admin request_timeout range ends at 3600 s (rdkafka_admin.c)
    assert given == {"request_timeout": 3600.0}
    assert waited >= 0.3, waited


def test_group_request_returns_the_answer_and_refuses_two_groups():
    done: concurrent.futures.Future = concurrent.futures.Future()
    done.set_result("described")
    assert workloads.group_request(lambda o: {"g": done}, 1.0, "g") == "described"
    with pytest.raises(ValueError, match="one group per request, not 2"):
        workloads.group_request(lambda o: {"g": done, "h": done}, 1.0, "g")
