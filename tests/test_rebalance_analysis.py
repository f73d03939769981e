"""Rebalance analysis (PySpark) on planted runs: ownership intervals, gaps, overlaps,
revocations and verdicts, each checked against numbers worked out by hand."""

from __future__ import annotations

import pytest

from kafkalab.experiments import rebalance
from kafkalab.experiments import rebalance_analysis as A
from kafkalab.experiments.rebalance import PROTOCOLS, RunRecord, Window
from kafkalab.ledger import Event, events_frame

pytestmark = pytest.mark.spark


def planted(protocol: str, rows: list[tuple[str, int, int, str]], windows: list[Window], gens: list[tuple[int, int]],
            actions: list[tuple[int, str, str]] = (), run_id: str = "p1") -> tuple[list[Event], RunRecord]:
    """rows: (client, partition, ts_ms, kind); gens: (ts_ms, generation); actions: (ts_ms, action, client)."""
    seq: dict[str, int] = {}
    events = []
    for client, partition, ts, kind in rows:
        seq[client] = seq.get(client, -1) + 1
        events.append(Event(run_id=run_id, kind=kind, ts_ms=ts, seq=seq[client], topic="t", partition=partition,
                            client_id=client))
    rec = RunRecord(run_id, PROTOCOLS[protocol], 2, windows[0].partitions, "t", "g", ".", 0, windows,
                    [{"run_id": run_id, "ts_ms": ts, "action": a, "client_id": c} for ts, a, c in actions],
                    [{"ts_ms": ts, "generation": g} for ts, g in gens])
    return events, rec


def analyse(spark, events, rec) -> A.Analysis:
    return A.analyse(spark, [rec], ledger=events_frame(spark, events))


def test_example_run_gives_the_numbers_its_docstring_promises(spark) -> None:
    events, rec = rebalance.example_run()
    a = analyse(spark, events, rec)
    out, crash = a.result("eager", "scale-out"), a.result("eager", "crash")
    assert (out.rebalances, out.revoked, out.needless_revocations, out.lost) == (1, 2, 1, 0)
    assert out.max_pause_s == pytest.approx(0.3) and out.partition_pause_s == pytest.approx(0.55)
    assert out.moved == 1, "partition 1 moved from c0.0 to c1.0; partition 0 came back to c0.0"
    assert out.verdicts["every_rebalance_revoked_every_partition"] and not out.verdicts["revoked_only_what_moved"]
    assert (crash.rebalances, crash.revoked, crash.lost) == (1, 1, 1)
    assert crash.max_pause_s == pytest.approx(5.8) and crash.partition_pause_s == pytest.approx(6.1)
    assert crash.per_rebalance[0]["revoked_or_lost"] == 2, "the revoked partition and the dead member's lost one"
    assert crash.verdicts["pause_at_least_session_timeout"], "5.8 s >= 6000 - 1000 ms"
    assert crash.overlap_s == 0


def test_killed_members_ownership_ends_at_the_kill_and_open_intervals_stay_open(spark) -> None:
    events, rec = rebalance.example_run()
    iv = analyse(spark, events, rec).intervals
    dead = iv[iv["client_id"] == "c1.0"].iloc[0]
    assert (dead["end_ms"], dead["ended_by"]) == (3500, "killed")
    assert set(iv[iv["ended_by"] == "open"]["partition"]) == {0, 1}


def test_cooperative_move_revokes_one_partition_in_two_rounds(spark) -> None:
    # c0.0 holds 0 and 1; c1.0 joins; gen 2: c0.0 revokes 1 only; gen 3: c1.0 is assigned 1
    rows = [("c0.0", 0, 100, "assigned"), ("c0.0", 1, 100, "assigned"), ("c0.0", 1, 2100, "revoked"),
            ("c1.0", 1, 2600, "assigned")]
    events, rec = planted("cooperative", rows, [Window(0, "scale-out", 1000, 3000, 2, ["c0.0"], ["c0.0", "c1.0"])],
                          [(50, 1), (2000, 2), (2500, 3)])
    r = analyse(spark, events, rec).result("cooperative", "scale-out")
    assert (r.rebalances, r.revoked, r.needless_revocations, r.moved) == (2, 1, 0, 1)
    assert [g["revoked_or_lost"] for g in r.per_rebalance] == [0, 1], "revocations count toward the next rebalance"
    assert r.verdicts["revoked_only_what_moved"] and not r.verdicts["every_rebalance_revoked_every_partition"]
    assert r.max_pause_s == pytest.approx(0.5) and r.partition_pause_s == pytest.approx(0.5)


def test_a_generation_written_before_the_window_or_rewritten_is_not_a_rebalance(spark) -> None:
    # a static member's replacement rewrites generation 4 inside the window: no new generation
    rows = [("c0.0", 0, 100, "assigned"), ("c0.0", 0, 1500, "revoked"), ("c0.1", 0, 1800, "assigned"),
            ("c1.0", 1, 100, "assigned")]
    events, rec = planted("static", rows, [Window(0, "rolling-restart", 1000, 3000, 2, ["c0.0", "c1.0"], ["c0.1", "c1.0"])],
                          [(90, 4), (1790, 4)], actions=[(1490, "stop", "c0.0"), (1600, "exited", "c0.0")])
    r = analyse(spark, events, rec).result("static", "rolling-restart")
    assert r.rebalances == 0 and r.verdicts["no_rebalance"]
    assert r.revoked == 1 and r.moved == 1 and r.needless_revocations == 0
    assert r.verdicts["every_rebalance_revoked_every_partition"] is None, "no rebalance, nothing to judge"
    assert r.max_pause_s == pytest.approx(0.3)


def test_two_live_owners_at_once_is_an_overlap_not_a_gap(spark) -> None:
    # a zombie: c0.0 still holds 0 until 2500 although c1.0 was assigned 0 at 2000
    rows = [("c0.0", 0, 100, "assigned"), ("c1.0", 0, 2000, "assigned"), ("c0.0", 0, 2500, "revoked"),
            ("c1.0", 1, 100, "assigned")]
    events, rec = planted("eager", rows, [Window(0, "slow-consumer", 1000, 3000, 2, ["c1.0"], ["c1.0"])], [(1900, 2)])
    a = analyse(spark, events, rec)
    r = a.result("eager", "slow-consumer")
    assert r.overlap_s == pytest.approx(0.5) and r.max_pause_s == 0
    assert r.rebalances == 1 and r.revoked == 1 and r.needless_revocations == 0


def test_a_partition_nobody_owns_is_one_gap_as_long_as_the_window(spark) -> None:
    rows = [("c0.0", 0, 100, "assigned")]
    events, rec = planted("eager", rows, [Window(0, "add-partitions", 1000, 4000, 2, ["c0.0"], ["c0.0"])], [])
    a = analyse(spark, events, rec)
    assert A.longest_gaps(a, "eager", "add-partitions") == {0: 0.0, 1: 3.0}
    r = a.result("eager", "add-partitions")
    assert r.partition_pause_s == pytest.approx(3.0) and r.rebalances == 0


def test_tables_and_unexpected_verdicts(spark) -> None:
    events, rec = rebalance.example_run()
    a = analyse(spark, events, rec)
    t = a.table()
    assert list(t.index) == [("eager", "scale-out"), ("eager", "crash")]
    assert t.loc[("eager", "crash"), "lost"] == 1
    assert A.unexpected(a.result("eager", "scale-out")) == {}, "the example behaves as eager should"
    r = a.result("eager", "scale-out")
    r.verdicts["revoked_only_what_moved"] = True
    assert A.unexpected(r) == {"revoked_only_what_moved": (False, True)}
    assert A.assignors(a) == {"eager": ("CLASSIC", "range")}


def test_the_tables_know_every_protocol_of_the_run_module_in_its_order() -> None:
    assert tuple(PROTOCOLS) == A.PROTOCOL_NAMES, "rebalance.PROTOCOLS and the analysis's table order name the same protocols"


def test_warm_up_analyses_the_hand_made_run(spark) -> None:
    from kafkalab import spark as kspark

    example = rebalance.example_run()
    started = kspark.session_in_background("kafkalab-tests", lambda s: A.warm_up(s, example)).result(timeout=120)
    assert started is spark, "getOrCreate: the process's one session, warmed up without error"
