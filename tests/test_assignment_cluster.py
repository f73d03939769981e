"""Notebook 01's programs against the live cluster, edited as a learner would edit them: the
outcome follows the edited line (``programs.from_notebook(...).replace(...)``)."""

from __future__ import annotations

import pytest

from kafkalab import programs
from kafkalab.experiments import assignment as A

pytestmark = pytest.mark.cluster

NOTEBOOK = "01_partition_assignment"


def test_editing_members_strategy_line_to_roundrobin_range_gives_the_idle_consumer_a_partition() -> None:
    """The shown ``member`` (range) leaves one of three consumers idle on A and B of 2
    partitions; with its strategy line edited to ``roundrobin,range`` the group leader picks
    the first strategy every member supports, round-robin, and nobody is idle
    (librdkafka CONFIGURATION.md, ``partition.assignment.strategy``)."""
    member = programs.from_notebook(NOTEBOOK, "member")
    edited = member.replace('"partition.assignment.strategy": "range",',
                            '"partition.assignment.strategy": "roundrobin,range",', name="member_edited")
    with A.MemberHost() as host:
        results = A.in_parallel({
            "shown": lambda: A.run_assignment(3, {"A": 2, "B": 2}, "range", program=member, host=host),
            "edited": lambda: A.run_assignment(3, {"A": 2, "B": 2}, "roundrobin,range", program=edited, host=host),
        })
    shown, after = results["shown"], results["edited"]
    assert shown.partition_assignor == "range" and shown.counts == [2, 2, 0]
    assert after.partition_assignor == "roundrobin", after.partition_assignor
    assert after.idle == 0 and after.imbalance == 1, after.counts
    assert after.short() == A.predict(after, "roundrobin")
    assert A.leftovers([shown, after]) == {"topics": [], "groups": []}


def test_editing_kip848_members_remote_assignor_to_range_leaves_a_consumer_idle() -> None:
    """The shown ``kip848_member`` (uniform) balances; edited to ``range`` the broker leaves
    one of three idle (KIP-848; Kafka 4.3 group-coordinator ``RangeAssignor``)."""
    kip = programs.from_notebook(NOTEBOOK, "kip848_member")
    edited = kip.replace('"group.remote.assignor": "uniform",', '"group.remote.assignor": "range",')
    with A.MemberHost() as host:
        shown = A.run_assignment(3, {"A": 2, "B": 2}, "consumer/uniform", program=kip, host=host)
        after = A.run_assignment(3, {"A": 2, "B": 2}, "consumer/range", program=edited, host=host)
    assert shown.partition_assignor == "uniform" and shown.idle == 0
    assert after.partition_assignor == "range" and after.idle == 1
    assert after.short() == A.predict(after, "range")


def test_a_member_program_that_raises_fails_the_run_with_its_traceback() -> None:
    """A learner's broken edit is reported, with the program's own line, not a timeout."""
    member = programs.from_notebook(NOTEBOOK, "member")
    broken = member.replace('"partition.assignment.strategy": "range",', '"partition.assignment.strategy": "sticky",')
    with pytest.raises(Exception, match="partition.assignment.strategy|sticky"):
        A.run_assignment(2, {"A": 2}, "broken", program=broken, timeout_s=60)
