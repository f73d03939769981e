"""``kafkalab run replication`` against the live cluster: notebook 08's verdicts hold for another
message count than the notebook uses (8 per partition, 3 repeats), through the CLI's JSON. The
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

from kafkalab import cluster

pytestmark = pytest.mark.cluster

CASES = [
    # followers paused in the ISR, leader killed: acks=1 loses every write only the leader had
    (["--scenario", "leader-crash", "--acks", "1", "--min-insync-replicas", "2", "--messages", "17"],
     {"acked": 17, "lost_acked": 17, "produce_errors": 0}),
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
