"""``kafkalab run replication`` against the live cluster: notebook 08's verdicts hold for another
message count than the notebook uses (8 per partition, 3 repeats), through the CLI's JSON, which
runs the notebook's ``producer`` program. The case kills broker 1 once and restores the cluster
(about 10 s).

The failover-retry test that was here (the notebook's ``idempotent_producer`` as shown, then
edited to ``enable.idempotence=False``: r0 once, then twice) ran two failovers back to back that
notebook 08 and its solution already run, with stronger checks: notebook 08's section on the
failover retry (cell 35: the first attempt dropped with NONE, every resend to the new leader with
the same producer id, epoch and sequence 0, the log ``r0, r1, r2``, the batches on disk) and
solution 08's exercise on the edited program (cell 14: no producer id or sequence, resends to the
new leader, the log ``r0, r0, r1, r2``, one duplicate, r0's delivery report at offset 1). The
ISR-shrink cases that were
here (acks=all with min ISR 1 and unclean election: every acknowledged record lost; min ISR 2:
every write refused with NOT_ENOUGH_REPLICAS, nothing lost) are asserted by notebook 08's
section 3 checks (``v[s.label].lost_acked``, ``error_codes``) and solution 08's exercise 1
(``error_codes == {"NOT_ENOUGH_REPLICAS": ...}``), with the same verdicts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kafkalab import cluster

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

