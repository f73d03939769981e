"""``kafkalab run rebalance`` on the live cluster, for consumer and partition counts that
notebook 02 does not use (it uses 3 consumers, 6 partitions): the verdicts must be the
notebook's (``rebalance_analysis.EXPECTED``). Timings are reported by the CLI, never asserted
here, except the protocol's own lower bound on a crash (``pause_at_least_session_timeout``).

Each case runs the four protocols' groups at once (about 30-40 s, then the Spark analysis)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab.cli import main
from kafkalab.experiments import rebalance

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

CASES = [
    (2, 4, "rolling-restart,scale-out,crash"),
    (4, 7, "rolling-restart,scale-out,add-partitions"),
]


@pytest.mark.parametrize("consumers,partitions,scenarios", CASES, ids=lambda v: str(v))
def test_cli_gives_the_notebooks_verdicts_for_other_group_sizes(spark, consumers: int, partitions: int,
                                                                 scenarios: str) -> None:
    # `spark`: the CLI's kafkalab.spark.session() finds this session instead of starting a JVM
    r = CliRunner().invoke(main, ["run", "rebalance", "--protocol", "all", "--consumers", str(consumers),
                                  "--partitions", str(partitions), "--scenario", scenarios, "--json"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    rows = json.loads(r.output)
    assert {(x["protocol"], x["scenario"]) for x in rows} == {(p, s) for p in rebalance.PROTOCOLS for s in scenarios.split(",")}
    for x in rows:
        assert {"rebalances", "revoked", "max_pause_s", "partition_pause_s"} <= set(x)
        assert x["unexpected"] == {}, f"{x['protocol']}, {x['scenario']}: {x['unexpected']} ({x['per_rebalance']})"
        assert x["overlap_s"] == 0, f"{x['protocol']}, {x['scenario']}: a partition had two live owners"
    by = {(x["protocol"], x["scenario"]): x for x in rows}
    assert by[("static", "rolling-restart")]["rebalances"] == 0
    assert by[("eager", "rolling-restart")]["rebalances"] == 2 * consumers
    assert by[("cooperative", "rolling-restart")]["rebalances"] >= 3 * consumers, "a leave and at least two rounds per join"
    assert by[("eager", "scale-out")]["revoked"] == partitions, "eager: one rebalance, every partition revoked"
    assert by[("cooperative", "scale-out")]["revoked"] < partitions
    print(json.dumps({f"{p} {s}": {k: x[k] for k in ("rebalances", "revoked", "max_pause_s", "partition_pause_s")}
                      for (p, s), x in by.items()}, indent=1))
