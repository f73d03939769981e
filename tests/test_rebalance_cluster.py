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


def test_commenting_out_group_instance_id_in_the_static_program_brings_back_a_rebalance_per_restart(spark) -> None:
    """Notebook 02's ``static_member`` as shown, and the same program with its ``group.instance.id``
    line commented out (the learner's edit): the same rolling restart of 2 pods, side by side."""
    from kafkalab.experiments.rebalance_analysis import analyse

    shown = rebalance.member_program("static")
    dynamic = shown.replace('    "group.instance.id": lab.name.split(".")[0],',
                            '    # "group.instance.id": lab.name.split(".")[0],', name="dynamic")
    assert not rebalance.Protocol.from_program("dynamic", dynamic).static
    runs = rebalance.run_many({
        label: rebalance.RebalanceConfig(label, 2, 4, ("rolling-restart",), settle_timeout_s=120, program=program)
        for label, program in (("static", shown), ("dynamic", dynamic))})
    result = analyse(spark, list(runs.values()))
    static, edited = result.result("static", "rolling-restart"), result.result("dynamic", "rolling-restart")
    late = [x for x in static.notes["restarts"] if x["stop_to_assigned_ms"] >= static.session_timeout_ms]
    assert not late, f"(precondition) every static replacement was back within the session timeout: {late}"
    assert static.rebalances == 0, f"as shown: no rebalance for the restarts ({static.per_rebalance})"
    assert edited.rebalances >= 2 * 2, f"edited: a leave and a join per pod, at least 4 rebalances ({edited.per_rebalance})"
    assert edited.verdicts["every_rebalance_revoked_every_partition"], "each of them eager: every partition revoked"
