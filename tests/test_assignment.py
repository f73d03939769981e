"""kafkalab.experiments.assignment: the pure rules (range, round-robin predictions, labels,
co-partitioning, leave bookkeeping) and, marked ``cluster``, a few live groups."""

from __future__ import annotations

import os

import pytest

from kafkalab import groups
from kafkalab.errors import KafkalabError
from kafkalab.experiments import assignment as A


def result(held: dict[str, list[str]], topics: dict[str, int], assignor: str = "range",
           member_ids: dict[str, str] | None = None, instance_ids: dict[str, str] | None = None) -> A.AssignmentResult:
    """An AssignmentResult built by hand: ``held`` = member name -> ["A-0", ...] (given names)."""
    names = A.topic_names(topics, "kl-rtest")
    members = []
    for name, labels in held.items():
        parts = sorted((names[label.rsplit("-", 1)[0]], int(label.rsplit("-", 1)[1])) for label in labels)
        members.append(A.Member(name, (member_ids or {}).get(name, f"{name}-uuid"),
                                (instance_ids or {}).get(name), parts))
    return A.AssignmentResult("kl-rtest-group", assignor, dict(topics), names, members, 100)


# ----------------------------------------------------------------------------- labels


@pytest.mark.parametrize("label", A.LABELS + A.DEFAULT_LABELS)
def test_every_label_parses_back_to_itself(label: str) -> None:
    assert A.Assignor.parse(label).label == label


def test_default_labels_set_nothing_and_eagerness_follows_the_protocol() -> None:
    classic_default = A.Assignor.parse("classic/default")
    assert (classic_default.strategy, classic_default.group_protocol) == (None, "classic")
    assert A.Assignor.parse("consumer/default").remote_assignor is None
    assert A.Assignor.parse("range").eager and A.Assignor.parse("roundrobin").eager
    assert classic_default.eager, "librdkafka's default list range,roundrobin holds only eager strategies"
    assert not A.Assignor.parse("cooperative-sticky").eager
    assert not A.Assignor.parse("consumer/range").eager


def test_unknown_assignors_are_rejected() -> None:
    with pytest.raises(KafkalabError, match="strategy must be one of"):
        A.Assignor.parse("sticky")
    with pytest.raises(KafkalabError, match="remote assignor must be one of"):
        A.Assignor.parse("consumer/sticky")


# ----------------------------------------------------------------------------- predictions


def test_range_leaves_the_third_consumer_idle_in_the_articles_example() -> None:
    got = A.predict_range(["c0", "c1", "c2"], {"A": 2, "B": 2})
    assert got == {"c0": [("A", 0), ("B", 0)], "c1": [("A", 1), ("B", 1)], "c2": []}


def test_range_gives_the_extra_partition_of_every_topic_to_the_same_first_members() -> None:
    got = A.predict_range(["c0", "c1", "c2"], {"A": 4, "B": 4, "C": 4})
    counts = [len(got[m]) for m in ("c0", "c1", "c2")]
    assert counts == [6, 3, 3], "imbalance equals the number of topics when P % C != 0"


def test_range_follows_the_order_given_not_the_names() -> None:
    got = A.predict_range(["zeta", "alpha"], {"A": 3})
    assert got == {"zeta": [("A", 0), ("A", 1)], "alpha": [("A", 2)]}


def test_roundrobin_deals_all_partitions_in_turn_sorted_by_topic_then_partition() -> None:
    got = A.predict_roundrobin(["c0", "c1", "c2"], {"B": 2, "A": 2})
    assert got == {"c0": [("A", 0), ("B", 1)], "c1": [("A", 1)], "c2": [("B", 0)]}


def test_roundrobin_imbalance_is_at_most_one_for_identical_subscriptions() -> None:
    for consumers in range(1, 7):
        for parts in range(1, 7):
            got = A.predict_roundrobin([f"c{i}" for i in range(consumers)], {"A": parts, "B": parts})
            counts = [len(v) for v in got.values()]
            assert max(counts) - min(counts) <= 1


def test_roundrobin_skips_members_not_subscribed_and_can_be_uneven() -> None:
    # the example of Kafka's RoundRobinAssignor javadoc
    subs = {"c0": ["t0"], "c1": ["t0", "t1"], "c2": ["t0", "t1", "t2"]}
    got = A.predict_roundrobin(["c0", "c1", "c2"], {"t0": 1, "t1": 2, "t2": 3}, subs)
    assert got == {"c0": [("t0", 0)], "c1": [("t1", 0)], "c2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def test_predict_follows_the_subscriptions_of_the_result() -> None:
    r = result({"c0": ["T0-0"], "c1": ["T1-0"], "c2": ["T1-1", "T2-0", "T2-1", "T2-2"]},
               {"T0": 1, "T1": 2, "T2": 3})
    r.subscriptions = {"c0": ["T0"], "c1": ["T0", "T1"], "c2": ["T0", "T1", "T2"]}
    assert A.predict(r, "roundrobin") == r.short()
    with pytest.raises(KafkalabError, match="same topics only"):
        A.predict(r, "range")


def test_group_run_rejects_subscriptions_that_cannot_work() -> None:
    a = A.Assignor.parse("roundrobin")
    with pytest.raises(KafkalabError, match="2 subscriptions for 3 consumers"):
        A.GroupRun(3, {"A": 1}, a, subscriptions=[["A"], ["A"]])
    with pytest.raises(KafkalabError, match="no member subscribes to"):
        A.GroupRun(2, {"A": 1, "B": 1}, a, subscriptions=[["A"], ["A"]])
    with pytest.raises(KafkalabError, match="each subscription needs topics"):
        A.GroupRun(2, {"A": 1}, a, subscriptions=[["A"], ["C"]])


def test_predict_uses_the_member_order_of_the_result() -> None:
    # member ids sort c2 < c0 < c1, as random KIP-848 ids may
    r = result({"c0": ["A-1", "B-1"], "c1": [], "c2": ["A-0", "B-0"]}, {"A": 2, "B": 2},
               member_ids={"c0": "M", "c1": "x", "c2": "B"})
    assert r.order() == ["c2", "c0", "c1"]
    assert A.predict(r, "range") == r.short()
    assert A.predict(r, "roundrobin") != r.short()


def test_static_members_sort_first_by_instance_id() -> None:
    r = result({"c0": [], "c1": [], "c2": []}, {"A": 1}, member_ids={"c0": "a", "c1": "b", "c2": "c"},
               instance_ids={"c1": "z-instance", "c2": "y-instance"})
    assert r.order() == ["c2", "c1", "c0"]


def test_predict_rejects_unknown_rules() -> None:
    with pytest.raises(KafkalabError, match="rule must be one of"):
        A.predict(result({"c0": ["A-0"]}, {"A": 1}), "sticky")


# ----------------------------------------------------------------------------- result helpers


def test_counts_imbalance_idle_and_owners() -> None:
    r = result({"c0": ["A-0", "B-1"], "c1": ["A-1"], "c2": []}, {"A": 2, "B": 2})
    assert (r.counts, r.imbalance, r.idle) == ([2, 1, 0], 2, 1)
    assert r.owners()[("B", 1)] == "c0"
    assert r.to_json()["members"][0]["partitions"] == [["kl-rtest-A", 0], ["kl-rtest-B", 1]]


def test_co_partitioned_needs_partition_i_of_both_topics_on_one_member() -> None:
    assert result({"c0": ["A-0", "B-0"], "c1": ["A-1", "B-1"]}, {"A": 2, "B": 2}).co_partitioned("A", "B")
    assert not result({"c0": ["A-0", "B-1"], "c1": ["A-1", "B-0"]}, {"A": 2, "B": 2}).co_partitioned("A", "B")
    with pytest.raises(KafkalabError, match="different partition counts"):
        result({"c0": ["A-0", "B-0", "B-1"]}, {"A": 1, "B": 2}).co_partitioned("A", "B")


def test_leave_result_separates_the_leavers_partitions_from_collateral_moves() -> None:
    topics = {"A": 2, "B": 2}
    before = result({"c0": ["A-0", "B-0"], "c1": ["A-1", "B-1"], "c2": []}, topics)
    after = result({"c1": ["A-0", "B-0"], "c2": ["A-1", "B-1"]}, topics)
    n = before.topic_names
    moved = [(n["A"], 0), (n["A"], 1), (n["B"], 0), (n["B"], 1)]
    leave = A.LeaveResult("range", before, after, "c0", moved, revoked_from_survivors=2)
    assert leave.leaver_partitions == [(n["A"], 0), (n["B"], 0)]
    assert leave.survivors_held_before == 2
    assert leave.moved_beyond_leaver == [(n["A"], 1), (n["B"], 1)]
    assert leave.to_json()["survivors_held_before"] == 2


def test_leaver_index_names_the_first_or_last_member_in_the_assignors_order() -> None:
    # member ids sort c2 < c0 < c1, as random KIP-848 ids may
    r = result({"c0": ["A-1"], "c1": [], "c2": ["A-0"]}, {"A": 2}, member_ids={"c0": "M", "c1": "x", "c2": "B"})
    assert (A.leaver_index(r, "first"), A.leaver_index(r, "last"), A.leaver_index(r, 1)) == (2, 1, 1)
    for bad in ("middle", 3, True):
        with pytest.raises(KafkalabError, match="leaver"):
            A.leaver_index(r, bad)


def test_grid_and_sweep_rows() -> None:
    cases = A.grid([3], [1, 2], [2, 4], ["range", "roundrobin"])
    assert len(cases) == 8 and cases[0] == A.SweepCase(3, 1, 2, "range")
    r = result({"c0": ["T0-0"], "c1": ["T0-1"], "c2": []}, {"T0": 2})
    rows = list(A.sweep_rows(A.SweepCase(3, 1, 2, "range"), r))
    assert [row["assigned"] for row in rows] == [1, 1, 0]
    assert set(rows[0]) == {"assignor", "consumers", "topics", "partitions", "member", "assigned", "group_id", "elapsed_ms"}


def test_sweep_sets_the_heartbeat_interval_group_config_only_on_kip848_groups(monkeypatch) -> None:
    seen = {}

    def fake_run(consumers, topics, assignor, *args, group_config=None, **kwargs):
        seen[assignor] = group_config
        return assignor

    monkeypatch.setattr(A, "run_assignment", fake_run)
    cases = A.grid(consumers=[3], topics=[1], partitions=[2])
    host = object()  # no member host: run_assignment is faked; the saved notebook's programs are read, not run
    assert A.sweep(cases, parallel=2, kip848_heartbeat_interval_ms=5000, host=host) == [c.assignor for c in cases]
    kip848 = {label for label in A.LABELS if label.startswith("consumer/")}
    assert kip848 and set(seen) == set(A.LABELS)
    assert all(seen[label] == {"consumer.heartbeat.interval.ms": 5000} for label in kip848)
    assert all(seen[label] is None for label in set(A.LABELS) - kip848), "classic groups have no such config"
    A.sweep(cases, parallel=2, host=host)
    assert all(v is None for v in seen.values()), "without the argument every group takes the broker's interval"


def test_tables_show_partitions_per_member_and_the_leave_bookkeeping() -> None:
    topics = {"A": 2, "B": 2}
    before = result({"c0": ["A-0", "B-0"], "c1": ["A-1", "B-1"], "c2": []}, topics)
    before.partition_assignor = "range"
    table = A.as_table({"range": before})
    assert table.loc["c0", "range"] == "A-0 B-0" and table.loc["c2", "range"] == "-"
    assert (table.loc["idle", "range"], table.loc["coordinator says", "range"]) == (1, "range")
    members = A.members_table(before)
    assert members.loc["c1", "order"] == 1 and members.loc["c1", "partitions"] == "A-1 B-1"
    after = result({"c1": ["A-0", "B-0"], "c2": ["A-1", "B-1"]}, topics)
    n = before.topic_names
    moved = [(n["A"], 0), (n["A"], 1), (n["B"], 0), (n["B"], 1)]
    leaves = A.leave_table({"range": A.LeaveResult("range", before, after, "c0", moved, 2)})
    row = leaves.loc["range"]
    assert (row["eager"], row["leaver held"], row["revoked from survivors"], row["moved"]) == (True, "A-0 B-0", 2, 4)
    assert row["moved although owner stayed"] == "A-1 B-1"


def test_join_placement_counts_keys_whose_two_sides_meet() -> None:
    r = result({"c0": ["A-0", "B-0"], "c1": ["A-1", "B-1"]}, {"A": 2, "B": 2})
    keys = [A.KeyPlacement("k1", 0, 0, "c0", "c0"), A.KeyPlacement("k2", 1, 0, "c1", "c0")]
    j = A.JoinPlacement("range", "x", "y", r, keys)
    assert (j.same_partition, j.same_member) == (1, 1)
    assert A.join_table({"case": j}).loc["case", "A-i and B-i on one member"]


def test_in_parallel_keeps_the_order_given_and_raises_the_first_failure() -> None:
    assert list(A.in_parallel({"b": lambda: 2, "a": lambda: 1})) == ["b", "a"]

    def boom():
        raise KafkalabError("boom")

    with pytest.raises(KafkalabError, match="boom"):
        A.in_parallel({"ok": lambda: 1, "bad": boom})


# ----------------------------------------------------------------------------- live


def needs_cluster() -> None:
    if os.environ.get("KAFKALAB_SKIP_CLUSTER"):
        pytest.skip("KAFKALAB_SKIP_CLUSTER is set: not using the live cluster")


@pytest.mark.cluster
def test_live_range_and_roundrobin_follow_their_rules_and_clean_up() -> None:
    needs_cluster()
    got = A.compare(3, {"A": 2, "B": 2}, ["range", "roundrobin", "consumer/range"])
    assert got["range"].short() == A.predict(got["range"], "range") and got["range"].idle == 1
    assert got["roundrobin"].short() == A.predict(got["roundrobin"], "roundrobin")
    assert got["consumer/range"].short() == A.predict(got["consumer/range"], "range")
    assert got["consumer/range"].partition_assignor == "range"
    assert A.leftovers(list(got.values())) == {"topics": [], "groups": []}


@pytest.mark.cluster
def test_live_leave_under_cooperative_sticky_revokes_nothing_from_survivors() -> None:
    needs_cluster()
    leave = A.run_leave(3, {"A": 2, "B": 2}, "cooperative-sticky", leaver="first")
    assert leave.revoked_from_survivors == 0
    assert set(leave.moved) == set(leave.leaver_partitions)


@pytest.mark.cluster
def test_live_leave_under_eager_range_revokes_everything_survivors_held() -> None:
    needs_cluster()
    leave = A.run_leave(3, {"A": 2, "B": 2}, "range", leaver="first")
    assert leave.revoked_from_survivors == leave.survivors_held_before > 0


@pytest.mark.cluster
def test_live_join_placement_range_keeps_both_sides_of_every_key_together() -> None:
    needs_cluster()
    j = A.run_join_placement(3, 4, "range", n_keys=12)
    assert j.same_partition == j.same_member == 12


@pytest.mark.cluster
def test_live_broker_lists_uniform_first_among_remote_assignors() -> None:
    needs_cluster()
    assert A.broker_config("group.consumer.assignors").split(",")[0].strip() == "uniform"
    with pytest.raises(KafkalabError, match="has no config"):
        A.broker_config("no.such.setting")


# ----------------------------------------------------------------------------- the programs

from kafkalab.programs import Program  # noqa: E402

_MEMBER = '''from kafkalab.instruments import lab
conf = lab.conf | {
    "partition.assignment.strategy": "range",    # the assignor
    "session.timeout.ms": 6000,
}
'''
_KIP848 = '''from kafkalab.instruments import lab
conf = lab.conf | {
    "group.protocol": "consumer",
    "group.remote.assignor": "uniform",   # broker-side
}
'''


def test_member_program_changes_only_the_assignor_line() -> None:
    member, kip = Program("member", _MEMBER), Program("kip848_member", _KIP848)
    progs = A.member_programs(A.LABELS + A.DEFAULT_LABELS, member, kip)
    assert progs["range"] is member and progs["consumer/uniform"] is kip, "the shown program itself when it already says so"
    assert progs["roundrobin"].name == "member_roundrobin"
    assert progs["cooperative-sticky"].source == _MEMBER.replace('"range"', '"cooperative-sticky"')
    assert progs["consumer/range"].source == _KIP848.replace('"uniform"', '"range"')
    assert '# "partition.assignment.strategy" not set,' in progs["classic/default"].source
    assert '# "group.remote.assignor" not set,' in progs["consumer/default"].source
    for p in progs.values():
        compile(p.source, p.filename, "exec")
    lines = A.assignor_lines(progs)
    assert lines["roundrobin"] == 'member_roundrobin: "partition.assignment.strategy": "roundrobin",'
    assert lines["classic/default"].endswith('# "partition.assignment.strategy" not set,')


def test_member_program_refuses_what_it_cannot_edit() -> None:
    member = Program("member", _MEMBER)
    with pytest.raises(KafkalabError, match="kip848_member"):
        A.member_program("consumer/range", member)
    with pytest.raises(KafkalabError, match="once"):
        A.member_program("roundrobin", Program("bare", "x = 1\n"))
    with pytest.raises(KafkalabError):
        A.member_program("sticky", member)


def test_partitioner_of_reads_the_producer_programs_setting() -> None:
    assert A.partitioner_of(Program("p", 'p = Producer(lab.conf | {"partitioner": "murmur2_random"})\n')) == "murmur2_random"
    assert A.partitioner_of(Program("p", "p = Producer(lab.conf | {'partitioner': 'murmur2'})\n")) == "murmur2", (
        "one parser (ast): single quotes read as well")
    assert A.partitioner_of(Program("p", "p = Producer(lab.conf)\n")) == "consistent_random (default)"



# ----------------------------------------------------------------------------- a KIP-848 member stuck between assignments
# (issue 34: notebook 01's sweep, a consumer/range group whose first member kept both partitions
# of T0 for 45 s: the heartbeat response that took one away was lost to librdkafka's request
# timeout, and the coordinator never sent it again)

T0, T1 = ("t", 0), ("t", 1)


def test_unreconciled_names_a_member_that_never_heard_of_its_revocation() -> None:
    views = {"consumer-0": [T0, T1], "consumer-1": [], "consumer-2": []}
    current = {"consumer-0": [T0, T1], "consumer-1": [], "consumer-2": []}
    target = {"consumer-0": [T0], "consumer-1": [T1], "consumer-2": []}
    assert groups.unreconciled(views, current, target) == {
        "consumer-0": {"holds": [T0, T1], "coordinator": [T0, T1], "target": [T0]}}


def test_unreconciled_names_a_member_that_never_heard_of_its_assignment() -> None:
    views = {"consumer-0": [T0], "consumer-1": []}
    current = {"consumer-0": [T0], "consumer-1": [T1]}
    target = {"consumer-0": [T0], "consumer-1": [T1]}
    assert groups.unreconciled(views, current, target) == {
        "consumer-1": {"holds": [], "coordinator": [T1], "target": [T1]}}


def test_unreconciled_is_empty_while_a_group_converges_and_for_classic_groups() -> None:
    waiting = {"consumer-0": [T0], "consumer-1": []}  # consumer-1 waits for T1, which consumer-0 still holds
    assert groups.unreconciled(waiting, {"consumer-0": [T0, T1], "consumer-1": []},
                          {"consumer-0": [T0], "consumer-1": [T1]}) == {}
    assert groups.unreconciled({"consumer-0": [T0]}, {"consumer-0": [T0]}, {}) == {}, "classic groups have no target"
