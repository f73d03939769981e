"""Share groups (notebook 09): the run's settings, the worker's record fates, the audit on planted
ledgers, and `kafkalab run share-group` on the live cluster with other shapes than the notebook's."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kafkalab import ledger, worker
from kafkalab.cli import main
from kafkalab.errors import KafkalabError
from kafkalab.experiments import share_groups as sg
from kafkalab.experiments import share_groups_analysis as sga
from kafkalab.ledger import Event


# ----------------------------------------------------------------------------- settings, fates


def test_bad_shapes_are_refused_with_the_reason() -> None:
    with pytest.raises(KafkalabError, match="at least one must stay"):
        sg.ShareRun(consumers=2, crash_consumers=1, freeze_consumers=1)
    with pytest.raises(KafkalabError, match="2..10"):
        sg.ShareRun(delivery_count_limit=11)
    with pytest.raises(KafkalabError, match="group.share.min.record.lock.duration.ms"):
        sg.ShareRun(lock_ms=500)
    with pytest.raises(KafkalabError, match="need at least 15 messages, not 10"):
        sg.ShareRun(consumers=20, partitions=1, messages=10, crash_consumers=5)


def test_fates_and_roles_follow_the_counts() -> None:
    cfg = sg.ShareRun(consumers=5, messages=20, release_every=5, reject_every=4, crash_consumers=1, freeze_consumers=2)
    fates = [cfg.fate(i) for i in range(20)]
    assert [i for i, f in enumerate(fates) if f == "release"] == [4, 9, 14, 19]
    assert [i for i, f in enumerate(fates) if f == "reject"] == [3, 7, 11, 15]  # 19 is released, not rejected
    assert [cfg.role(i) for i in range(5)] == ["crash", "freeze", "freeze", "run", "run"]
    assert [cfg.process_ms_of(i) for i in range(5)] == [20.0, 40.0, 60.0, 80.0, 20.0]


def test_the_fate_header_is_read_and_checked() -> None:
    assert worker.fate_of(None) == "accept"
    assert worker.fate_of([("other", b"x"), (worker.FATE_HEADER, b"reject")]) == "reject"
    assert worker.fate_of([(worker.FATE_HEADER, b"slow")]) == "slow"
    with pytest.raises(ValueError, match="expected one of accept, release, reject, slow"):
        worker.fate_of([(worker.FATE_HEADER, b"drop")])
    assert {f: worker.SHARE_ACKS[f] for f in worker.SHARE_FATES} == \
        {"accept": "ACCEPT", "release": "RELEASE", "reject": "REJECT", "slow": "ACCEPT"}


def test_slow_first_makes_the_first_record_of_each_partition_slow_unless_released_or_rejected() -> None:
    cfg = sg.ShareRun(partitions=3, messages=12, reject_every=2, slow_first=True, lock_ms=4000)
    assert [cfg.fate(i) for i in range(6)] == ["slow", "reject", "slow", "reject", "accept", "reject"]
    assert cfg.slow_max_ms == 2000, "a slow record is acknowledged within half the lock"
    assert "slow" not in [sg.ShareRun(partitions=3, messages=12).fate(i) for i in range(12)]


def test_the_first_record_waits_for_every_member_that_has_consumed_one(tmp_path) -> None:
    with ledger.Ledger(tmp_path / "share-0.jsonl", "r") as a:
        a.record("consumed", topic=T, partition=0, offset=0, client_id="share-0", delivery_count=1)
    with ledger.Ledger(tmp_path / "share-1.jsonl", "r") as b:
        b.record("consumed", topic=T, client_id="share-1", error="_TIMED_OUT")  # an error is no record
    assert worker.members_with_records(tmp_path / "share-1.jsonl") == {"share-0"}
    with ledger.Ledger(tmp_path / "share-1.jsonl", "r") as b:
        b.record("consumed", topic=T, partition=0, offset=1, client_id="share-1", delivery_count=1)
    assert worker.members_with_records(tmp_path / "share-0.jsonl") == {"share-0", "share-1"}


def test_held_offsets_and_missed_crash_points_are_read_from_the_ledgers() -> None:
    events = [*delivery(10, "a", "c0", 0, 1, "ACCEPT"), *delivery(20, "b", "c0", 1, 1, None),
              *delivery(30, "c", "c1", 2, 1, "ACCEPT"), *delivery(40, "d", "c0", 5, 1, None, partition=1)]
    assert sg.held_offsets(events, {"c0"}) == {0: [1], 1: [5]}
    assert sg.held_offsets(events, {"c1"}) == {}
    assert sg.crash_points_missed(events, 3, {"c0", "c1"}) == ["c1"]  # c0 processed a, b and d; c1 only c
    assert sg.crash_points_missed(events, 4, {"c0", "c1"}) == ["c0", "c1"]
    with pytest.raises(KafkalabError, match="describe_held needs freeze_consumers"):
        sg.ShareRun(describe_held=True)


def test_a_slow_record_is_overtaken_only_by_a_later_offset_of_its_partition_in_another_ledger(tmp_path) -> None:
    own = tmp_path / "share-0.jsonl"
    with ledger.Ledger(own, "r") as mine:
        mine.record("processed", topic=T, partition=0, offset=9, client_id="share-0")  # its own: never counts
    assert not worker.overtaken(own, T, 0, 5)
    with ledger.Ledger(tmp_path / "share-1.jsonl", "r") as other:
        other.record("consumed", topic=T, partition=0, offset=8, client_id="share-1")   # consumed, not processed
        other.record("processed", topic=T, partition=1, offset=8, client_id="share-1")  # another partition
        other.record("processed", topic=T, partition=0, offset=5, client_id="share-1")  # the same offset
    assert not worker.overtaken(own, T, 0, 5)
    with ledger.Ledger(tmp_path / "share-2.jsonl", "r") as third:
        third.record("processed", topic=T, partition=0, offset=6, client_id="share-2")
    assert worker.overtaken(own, T, 0, 5)


def test_a_share_consumer_spec_round_trips_and_refuses_an_unknown_signal() -> None:
    spec = worker.ShareConsumerSpec("s", "r", "/tmp/l", "g", ["t"], crash_after=2, crash_signal="SIGSTOP")
    assert worker.spec_from_json(worker.spec_json(spec)) == spec
    with pytest.raises(ValueError, match="SIGKILL, SIGSTOP"):
        worker.ShareConsumerSpec("s", "r", "/tmp/l", "g", ["t"], crash_signal="SIGTERM")


def test_the_cli_refuses_bad_input_before_touching_the_cluster() -> None:
    r = CliRunner().invoke(main, ["run", "share-group", "--consumers", "2", "--crash-consumers", "2"])
    assert r.exit_code == 2 and "at least one must stay" in r.output
    r = CliRunner().invoke(main, ["run", "share-group", "--lock-ms", "10"])
    assert r.exit_code == 2 and "--lock-ms" in r.output


# ----------------------------------------------------------------------------- planted ledgers

T = "t"


def ev(kind: str, ts: int, value: str | None, client: str | None = None, partition: int = 0, offset: int | None = None,
       count: int | None = None, ack: str | None = None, error: str | None = None) -> Event:
    return Event("r", kind, ts, ts, T, partition=partition, offset=offset, value=value, client_id=client,
                 delivery_count=count, ack=ack, error=error)


def delivery(ts: int, value: str, client: str, offset: int, count: int, ack: str | None, processed: bool = True,
             partition: int = 0) -> list[Event]:
    out = [ev("consumed", ts, value, client, partition, offset, count)]
    if processed:
        out.append(ev("processed", ts + 1, value, client, partition, offset, count))
    if ack:
        out.append(ev("acknowledged", ts + 2, value, client, partition, offset, count, ack))
    return out


def planted() -> list[Event]:
    """Six records on one partition, limit 3:
    a accepted; b processed by crasher c0 (no ack), back to c1 at +100 ms and accepted (a
    duplicate processing and an inversion); c rejected; d released three times (archived);
    e acked by the brokers, never delivered (lost); f accepted after one release."""
    out = [ev("acked", 0, v, "producer", 0, i) for i, v in enumerate("abcdef")]
    out += delivery(10, "a", "c1", 0, 1, "ACCEPT")
    out += delivery(20, "b", "c0", 1, 1, None)                     # c0 dies holding b
    out += delivery(30, "c", "c1", 2, 1, "REJECT", processed=False)
    out += delivery(40, "d", "c1", 3, 1, "RELEASE", processed=False)
    out += delivery(50, "d", "c1", 3, 2, "RELEASE", processed=False)
    out += delivery(60, "d", "c1", 3, 3, "RELEASE", processed=False)
    out += delivery(70, "f", "c1", 5, 1, "RELEASE", processed=False)
    out += delivery(80, "f", "c1", 5, 2, "ACCEPT")
    out += delivery(120, "b", "c1", 1, 2, "ACCEPT")                # processed after offset 5: an inversion
    return out


def test_the_audit_settles_every_record_and_counts_what_is_lost(spark) -> None:
    events = ledger.events_frame(spark, planted())
    states = {r["value"]: r["state"] for r in sga.record_states(events, 3).collect()}
    assert states == {"a": "accepted", "b": "accepted", "c": "rejected", "d": "archived", "e": "lost", "f": "accepted"}
    counts = sga.account_events(events, 3, ["c0"])
    assert {k: counts[k] for k in ("produced", "accepted_unique", "rejected", "archived", "lost")} == \
        {"produced": 6, "accepted_unique": 3, "rejected": 1, "archived": 1, "lost": 1}
    assert counts["deliveries"] == 9 and counts["redelivered"] == 4 and counts["max_delivery_count"] == 3
    assert counts["deliveries_past_limit"] == 0
    assert counts["duplicates_processed"] == 1 and counts["per_partition_inversions"] == 1
    assert counts["consumers_with_records"] == 2 and counts["records_per_consumer"] == {"c0": 1, "c1": 8}
    assert counts["returned_after_ms"] == {"c0": 100}
    assert counts["held_processed"] == 1 == counts["duplicates_processed"]


def test_a_delivery_past_the_limit_and_a_failed_accept_are_counted(spark) -> None:
    out = [ev("acked", 0, "x", "producer", 0, 0)]
    out += delivery(10, "x", "c1", 0, 1, "RELEASE", processed=False)
    out += delivery(20, "x", "c1", 0, 2, "RELEASE", processed=False)
    out += delivery(30, "x", "c1", 0, 3, None)
    out.append(ev("acknowledged", 33, "x", "c1", 0, 0, 3, "ACCEPT", error="INVALID_RECORD_STATE"))
    counts = sga.account_events(ledger.events_frame(spark, out), 2)
    assert counts["deliveries_past_limit"] == 1
    assert counts["accepted_unique"] == 0 and counts["archived"] == 1 and counts["lost"] == 0


def test_final_values_follow_the_same_rules_in_the_run_process() -> None:
    events = planted()
    assert sg.final_values(events, 3, set()) == {"a", "b", "c", "d", "f"}
    held = [ev("acked", 0, "y", "producer", 0, 9), *delivery(10, "y", "c9", 9, 3, None)]
    assert sg.final_values(held, 3, {"c9"}) == {"y"}  # its holder is gone at the last delivery
    assert sg.final_values(held, 3, set()) == set()
    assert sg.past_limit(held, 2) == 1 and sg.past_limit(held, 3) == 0


# ----------------------------------------------------------------------------- live


def run_share(*args: str) -> dict:
    result = CliRunner().invoke(main, ["run", "share-group", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{"):])


@pytest.mark.cluster
@pytest.mark.parametrize("consumers,partitions,messages,extra", [
    # --first-for-all: each member holds its first record until every member has one, so that all of them
    # receive records whatever the scheduling (without it, four members could drain the topic before the fifth
    # joined)
    (5, 2, 50, ["--crash-consumers", "1", "--release-every", "6", "--delivery-count-limit", "4", "--slow-first",
                "--first-for-all"]),
    (3, 3, 30, ["--reject-every", "5", "--compare-consumer-group", "--first-for-all"]),
    (3, 1, 30, ["--freeze-consumers", "1", "--crash-after", "2", "--lock-ms", "60000", "--describe-held",
                "--first-for-all"]),
])
def test_a_share_group_settles_every_record_and_loses_none(consumers, partitions, messages, extra) -> None:
    r = run_share("--consumers", str(consumers), "--partitions", str(partitions), "--messages", str(messages), *extra)
    cfg = r["config"]
    assert r["produced"] == messages and r["lost"] == 0, r
    assert r["consumers_with_records"] == consumers, r["records_per_consumer"]
    released = sum(1 for i in range(messages) if cfg["release_every"] and i % cfg["release_every"] == cfg["release_every"] - 1)
    rejected = sum(1 for i in range(messages) if cfg["reject_every"] and i % cfg["reject_every"] == cfg["reject_every"] - 1)
    assert r["archived"] == released and r["rejected"] == rejected
    assert r["max_delivery_count"] <= cfg["delivery_count_limit"] and r["deliveries_past_limit"] == 0
    if released:
        assert r["max_delivery_count"] == cfg["delivery_count_limit"]
    if cfg["crash_consumers"]:
        assert r["held_processed"] == 1 == r["duplicates_processed"], "the crashed consumer's held record was processed again"
        assert r["returned_after_ms"]["share-0"] < cfg["lock_ms"]
    if cfg["compare_consumer_group"]:
        assert r["consumer_group_members_with_partitions"] == min(consumers, partitions)
    if cfg["first_for_all"]:
        assert set(r["records_per_consumer"]) == set(r["roles"]), "every member received a record"
    if cfg["describe_held"]:
        [(p, window)] = r["held_window"].items()
        assert window["start_offset"] <= window["held"][0] and window["lag"] >= len(window["held"]), window
        assert window["accepted_above"] == window["end_offset"] - window["held"][0] - len(window["held"]), window
        assert r["held_processed"] == r["duplicates_processed"] >= 1 and r["max_delivery_count"] == 2
    shared = any(sum(p in ps for ps in r["members_at_start"].values()) > 1 for p in range(partitions))
    if cfg["slow_first"] and shared:
        assert r["per_partition_inversions"] > 0, "a member overtook the slow first record of a shared partition"
    assert all(v["lag"] in (0, None) for v in r["share_offsets"].values()), r["share_offsets"]


def test_the_timeline_draws_each_delivery_and_a_lock_bar_for_each_unacknowledged_one() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from kafkalab.experiments import share_groups_plots as plots

    frame = pd.DataFrame([
        {"ms": 0, "client_id": "c0", "partition": 0, "offset": 0, "value": "a", "delivery_count": 1, "ack": None},
        {"ms": 10, "client_id": "c1", "partition": 0, "offset": 1, "value": "b", "delivery_count": 1, "ack": "ACCEPT"},
        {"ms": 900, "client_id": "c1", "partition": 0, "offset": 0, "value": "a", "delivery_count": 2, "ack": "ACCEPT"},
    ])
    fig = plots.deliveries_timeline(frame, lock_ms=1000)
    ax = fig.axes[0]
    points = sum(len(c.get_offsets()) for c in ax.collections)
    assert points == 3, "one marker per delivery"
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[0, 1000]], "the held delivery's lock runs to 1000 ms"
    plt.close(fig)
