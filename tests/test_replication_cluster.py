"""``kafkalab run replication`` against the live cluster: notebook 08's verdicts hold for another
message count than the notebook uses (8 per partition, 3 repeats), through the CLI's JSON, which
runs the notebook's ``producer`` program. And the notebook's ``idempotent_producer``, edited as a
learner would edit it, changes what a leader failover leaves in the log. The
case kills broker 1 once and restores the cluster (about 10 s). The ISR-shrink cases that were
here (acks=all with min ISR 1 and unclean election: every acknowledged record lost; min ISR 2:
every write refused with NOT_ENOUGH_REPLICAS, nothing lost) are asserted by notebook 08's
section 3 checks (``v[s.label].lost_acked``, ``error_codes``) and solution 08's exercise 1
(``error_codes == {"NOT_ENOUGH_REPLICAS": ...}``), with the same verdicts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kafkalab import cluster, programs
from kafkalab.experiments import replication as repl

pytestmark = pytest.mark.cluster

CASES = [
    # the CLI runs the notebook's producer program (programs.from_notebook), acks edited to 1
    # followers paused in the ISR, leader killed: acks=1 loses every write only the leader had
    (["--scenario", "leader-crash", "--acks", "1", "--min-insync-replicas", "2", "--messages", "17"],
     {"acked": 17, "lost_acked": 17, "produce_errors": 0, "program": "producer"}),
]


@pytest.mark.parametrize("args, expected", CASES, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_cli_verdicts_hold_for_other_message_counts(args: list[str], expected: dict) -> None:
    cp = subprocess.run([sys.executable, "-m", "kafkalab.cli", "run", "replication", *args, "--json"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    out = json.loads(cp.stdout)
    assert {k: out[k] for k in expected} == expected, out
    assert out["before_lost"] == 0, "records replicated to all three before the fault survive every configuration"
    cluster.wait_healthy(60)  # the command left every broker up and every ISR full


def test_editing_the_shown_idempotent_producer_changes_what_a_failover_leaves_in_the_log() -> None:
    """The same fault twice (the first record's ack lost, the leader killed, the record resent to
    the new leader): as shown, the new leader recognises the retry; with ``enable.idempotence``
    edited to False, it appends it a second time."""
    shown = programs.from_notebook("08_replication", "idempotent_producer")
    edited = shown.replace('"enable.idempotence": True', '"enable.idempotence": False', name="plain_producer")
    as_shown = repl.run_failover_retry(shown)
    assert [v for _, v in as_shown.log] == ["r0", "r1", "r2"], as_shown.log
    assert all(a.broker == as_shown.elected != 1 for a in as_shown.resends()), "the retries went to the new leader"
    without = repl.run_failover_retry(edited)
    assert [v for _, v in without.log] == ["r0", "r0", "r1", "r2"], without.log
    assert all(a.broker == without.elected != 1 for a in without.resends()), "the retries went to the new leader"
    assert (as_shown.duplicates, without.duplicates) == (0, 1)
    cluster.wait_healthy(60)
