"""kafkalab.eos: the processor's spec, transform and sqlite sink (pure), and one live
incarnation (a worker process) that stops exactly at its crash point."""

from __future__ import annotations

import json
import signal

import pytest

from kafkalab import admin, eos, workloads
from kafkalab.worker import spec_from_json, spec_json
from kafkalab.ledger import read_events


def _spec(**kw) -> eos.ProcessorSpec:
    base = dict(name="p-0", run_id="r", ledger="/tmp/x.jsonl", input_topic="in", output_topic="out",
                group_id="g", transactional_id="tid")
    return eos.ProcessorSpec(**{**base, **kw})


def test_spec_rejects_unknown_modes_points_and_sinks() -> None:
    with pytest.raises(ValueError, match="mode"):
        _spec(mode="exactly-twice")
    with pytest.raises(ValueError, match="crash_point"):
        _spec(crash_point="before-lunch")
    with pytest.raises(ValueError, match="sink_mode"):
        _spec(sink_mode="merge")
    with pytest.raises(ValueError, match="batch"):
        _spec(batch=0)


def test_transactional_mode_needs_a_transactional_id() -> None:
    with pytest.raises(ValueError, match="transactional_id"):
        _spec(transactional_id=None)
    assert _spec(mode="at-least-once", transactional_id=None).mode == "at-least-once"


def test_after_offsets_is_not_a_crash_point_of_the_at_least_once_loop() -> None:
    with pytest.raises(ValueError, match="after-offsets"):
        _spec(mode="at-least-once", crash_at=1, crash_point="after-offsets")


def test_spec_round_trips_through_the_worker_json() -> None:
    s = _spec(crash_at=3, crash_point="mid-produce", conf={"linger.ms": 1})
    assert json.loads(spec_json(s))["kind"] == "eos"
    assert spec_from_json(spec_json(s)) == s


def test_transform_keeps_the_record_id_and_flags_delays_over_15_minutes() -> None:
    out = json.loads(eos.transform(b'{"record_id":"f-1","origin":"JFK","dest":"LAX","dep_delay":16}'))
    assert out == {"record_id": "f-1", "route": "JFK-LAX", "delayed": True}
    assert json.loads(eos.transform(b'{"record_id":"f-2","origin":"EWR","dest":"ORD","dep_delay":15}'))["delayed"] is False
    assert json.loads(eos.transform(b'{"record_id":"f-3","origin":"LGA","dest":"ATL","dep_delay":null}'))["delayed"] is False
    assert eos.transform(b'{"record_id":"f-1","origin":"JFK","dest":"LAX","dep_delay":16}') == \
        eos.transform(b'{"record_id":"f-1","origin":"JFK","dest":"LAX","dep_delay":16}'), "deterministic"
    with pytest.raises(ValueError, match="record_id"):
        eos.transform(b'{"origin":"JFK"}')


@pytest.mark.cluster
def test_a_processor_incarnation_dies_exactly_at_its_crash_point_and_the_next_one_finishes(tmp_path) -> None:
    from kafkalab.experiments import transactions as tx
    from kafkalab.experiments import transactions_analysis as ta

    run = tx.TxnRun(prefix="test-eosp")
    try:
        tin, tout = run.topic("in"), run.topic("out")
        admin.create_topics({tin: 2, tout: 2})
        tx.produce_input(tin, 30)
        common = dict(run_id=run.run_id, input_topic=tin, output_topic=tout, group_id=run.group("g"),
                      transactional_id=run.transactional_id("p"), batch=10)
        first = run.spawn(eos.ProcessorSpec(name="p-0", ledger=str(tmp_path / "p-0.jsonl"), crash_at=2,
                                             crash_point="after-offsets", **common))
        assert first.wait(60) == -signal.SIGKILL, first.log_tail()
        (inc,) = ta.incarnations(read_events(tmp_path / "p-0.jsonl"))
        assert inc.transactions == 1, "one batch committed, the crash came in the second"
        assert inc.produced == inc.consumed and inc.uncommitted > 0, (
            "every record read was produced, and the second batch (offsets sent) was never committed")
        second = run.spawn(eos.ProcessorSpec(name="p-1", ledger=str(tmp_path / "p-1.jsonl"), **common))
        assert second.wait(60) == 0, second.log_tail()
        out = [json.loads(r.value)["record_id"] for r in tx.read_all(tout, "read_committed")]
        assert sorted(out) == sorted(tx.input_records(30)[i][2] for i in range(30)), "each input record once"
    finally:
        run.cleanup()
