"""``kafkalab run replication`` against the live cluster: notebook 08's verdicts hold for other
message counts than the notebook uses (8 per partition, 3 repeats). Each case kills broker 1
once and restores the cluster (about 30 s each)."""

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
    # ISR shrunk to the leader, unclean election on: acks=all with min ISR 1 is acks=1
    (["--scenario", "isr-shrink", "--acks", "all", "--min-insync-replicas", "1", "--unclean-leader-election", "true",
      "--messages", "12"], {"acked": 12, "lost_acked": 12, "produce_errors": 0}),
    # ISR shrunk, min ISR 2: every write refused, nothing acknowledged is lost
    (["--scenario", "isr-shrink", "--acks", "all", "--min-insync-replicas", "2", "--messages", "5", "--repeats", "2"],
     {"acked": 0, "lost_acked": 0, "produce_errors": 10}),
]


@pytest.mark.parametrize("args, expected", CASES, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_cli_verdicts_hold_for_other_message_counts(args: list[str], expected: dict) -> None:
    cp = subprocess.run([sys.executable, "-m", "kafkalab.cli", "run", "replication", *args, "--json"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr[-3000:]
    out = json.loads(cp.stdout)
    assert {k: out[k] for k in expected} == expected, out
    assert out["before_lost"] == 0, "records replicated to all three before the fault survive every configuration"
    if expected["produce_errors"]:
        assert out["error_codes"] == {"NOT_ENOUGH_REPLICAS": expected["produce_errors"]}
    cluster.wait_healthy(60)  # the command left every broker up and every ISR full
