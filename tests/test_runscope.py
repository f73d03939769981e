"""The run scope: unique names per run, one cleanup registry, and the "cluster is whole"
precondition every notebook and every ``kafkalab run`` starts with (issue 12)."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

import kafkalab
from kafkalab import cluster, runscope
from kafkalab.errors import ClusterUnreachable
from kafkalab.runscope import PRECONDITION_BUDGET_S, RunScope

SRC = Path(__file__).resolve().parents[1] / "src" / "kafkalab"


# ----------------------------------------------------------------------------- names


def test_run_names_are_unique_and_remembered_for_cleanup() -> None:
    a, b = RunScope("tour"), RunScope("tour")
    try:
        assert a.run_id != b.run_id and a.topic("flights") != b.topic("flights")
        assert a.topic("flights").startswith(f"tour-{a.run_id}-")
        assert a.group("reader") == f"tour-{a.run_id}-reader"
        assert a.topics == [f"tour-{a.run_id}-flights"] * 2 and a.groups == [f"tour-{a.run_id}-reader"]
        assert a.name("txn") == f"tour-{a.run_id}-txn" and "txn" not in " ".join(a.topics + a.groups), \
            "name() names without remembering (a transactional.id cannot be deleted)"
    finally:
        for s in (a, b):  # nothing was created: keep the cluster out of it
            s.keep()


def test_a_prefix_chosen_by_the_caller_is_used_as_given() -> None:
    s = RunScope("my-prefix", unique=False)
    try:
        assert s.prefix == "my-prefix" and s.topic("A") == "my-prefix-A"
        assert s.add_topic("elsewhere") == "elsewhere" and s.add_group("g") == "g"
        assert s.topics == ["my-prefix-A", "elsewhere"] and s.groups == ["g"]
    finally:
        s.keep()


def test_run_ids_are_short_and_distinct() -> None:
    ids = {runscope.run_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(re.fullmatch(r"r[0-9a-f]{6}", i) for i in ids)


# ----------------------------------------------------------------------------- one registry


def test_every_open_scope_is_in_one_registry_until_cleaned_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # a registry of its own: the scopes other tests left open (groups a static member still
    # holds) are not this test's to delete, right after brokers were restarted
    monkeypatch.setattr(runscope, "_OPEN", [])
    calls: list[str] = []
    a, b = RunScope("a"), RunScope("b")
    a.on_cleanup(lambda: calls.append("a1"))
    a.on_cleanup(lambda: calls.append("a2"))
    b.on_cleanup(lambda: calls.append("b"))
    assert {a, b} <= set(runscope.open_scopes())
    left = runscope.cleanup_all(timeout_s=5)  # other tests' scopes may still hold groups: only a and b count here
    assert a.pending_groups == [] and b.pending_groups == [], "no group of theirs is left (none was named)"
    assert not set(left) & {*a.groups, *b.groups}
    assert calls == ["b", "a2", "a1"], "newest scope first, each one's closers last registered first"
    assert not {a, b} & set(runscope.open_scopes()) and a.cleaned and b.cleaned


def test_a_failing_closer_does_not_stop_the_cleanup() -> None:
    calls: list[str] = []
    s = RunScope("x")
    s.on_cleanup(lambda: calls.append("first"))
    s.on_cleanup(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        s.cleanup()
    assert calls == ["first"] and s not in runscope.open_scopes(), "the other closers ran, the scope is clean"


def test_a_kept_scope_leaves_the_registry() -> None:
    s = RunScope("keep")
    s.topic("t")
    s.keep()
    assert s not in runscope.open_scopes(), "cleanup_all and interpreter exit leave a kept run's topics alone"


def test_topic_and_group_cleanup_has_one_atexit_hook() -> None:
    """Only the run scope cleans topics and groups at exit; workers (workloads) and the fault
    proxy (faults) reap their own processes and sockets."""
    users = sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py") if "atexit.register" in p.read_text())
    assert users == ["faults.py", "runscope.py", "workloads.py"], users


def test_no_experiment_imports_another_notebooks_module_for_its_run_scope() -> None:
    for p in (SRC / "experiments").glob("*.py"):
        text = p.read_text()
        assert "TourRun" not in text and "from .tour import" not in text and "from . import tour" not in text, p.name


# ----------------------------------------------------------------------------- the precondition


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.socket
def test_a_cluster_that_is_down_fails_within_the_budget_naming_kafkalab_up(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
    monkeypatch.setenv("KAFKALAB_BOOTSTRAP", f"127.0.0.1:{_free_port()}")
    t0 = time.monotonic()
    with pytest.raises(ClusterUnreachable, match="kafkalab up"):
        kafkalab.require_cluster()
    assert time.monotonic() - t0 < PRECONDITION_BUDGET_S


@pytest.mark.socket
def test_a_cluster_that_does_not_answer_within_the_timeout_fails_naming_kafkalab_up(monkeypatch, tmp_path) -> None:
    """A port that accepts but never answers (a paused broker) fails at the metadata timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path))
        monkeypatch.setenv("KAFKALAB_BOOTSTRAP", f"127.0.0.1:{silent.getsockname()[1]}")
        t0 = time.monotonic()
        with pytest.raises(ClusterUnreachable, match="kafkalab up"):
            runscope.require_whole_cluster(timeout_s=2)
        assert time.monotonic() - t0 < PRECONDITION_BUDGET_S


# ----------------------------------------------------------------------------- live: a node down


@pytest.fixture
def local_whole():
    """The local cluster, whole before and after the test."""
    if cluster.cluster().backend != "local":
        pytest.skip("kills and pauses nodes of the local backend")
    runscope.require_whole_cluster()
    yield
    cluster.restore()


@pytest.mark.cluster
def test_a_killed_broker_fails_fast_naming_it_or_is_restarted(local_whole) -> None:
    cluster.kill(2)
    t0 = time.monotonic()
    with pytest.raises(ClusterUnreachable, match=r"broker 2 is down.*`kafkalab start 2`"):
        runscope.require_whole_cluster(restore=False)
    failed_after = time.monotonic() - t0
    assert failed_after < PRECONDITION_BUDGET_S

    said: list[str] = []
    t0 = time.monotonic()
    st = kafkalab.require_cluster(echo=said.append)  # what a notebook's setup cell does
    print(f"broker 2 killed: failed in {failed_after:.1f} s (restore=False), restored in {time.monotonic() - t0:.1f} s")
    assert st.all_alive and st.brokers[2].alive, "broker 2 runs again"
    assert not cluster.under_replicated(), "every ISR is full again"
    assert any("broker 2 was down" in m and "kafkalab start 2" in m for m in said), said
    assert any("whole again" in m for m in said), said


@pytest.mark.cluster
def test_a_paused_broker_fails_fast_naming_it_or_is_resumed(local_whole) -> None:
    cluster.pause(3)
    t0 = time.monotonic()
    with pytest.raises(ClusterUnreachable, match=r"broker 3 is paused.*`kafkalab resume 3`"):
        runscope.require_whole_cluster(restore=False)
    assert time.monotonic() - t0 < PRECONDITION_BUDGET_S
    said: list[str] = []
    st = runscope.require_whole_cluster(echo=said.append)
    assert st.all_alive and not st.brokers[3].paused and not cluster.under_replicated()
    assert any("broker 3 was paused" in m for m in said), said


@pytest.mark.cluster
def test_a_whole_cluster_passes_quietly(local_whole) -> None:
    said: list[str] = []
    t0 = time.monotonic()
    st = runscope.require_whole_cluster(echo=said.append)
    assert st.all_alive and said == [], "nothing to restore, nothing said"
    assert time.monotonic() - t0 < PRECONDITION_BUDGET_S


@pytest.mark.cluster
def test_group_configs_outlive_their_group_until_deleted() -> None:
    """Kafka keeps a group's configs after DeleteGroups (measured on 4.3.1);
    ``admin.delete_group_configs`` removes them, so a later group of the same id starts from
    the broker's values."""
    from kafkalab import admin

    scope = RunScope("group-config")
    group = scope.group("g")
    scope.on_cleanup(lambda: admin.delete_group_configs([group]))
    key = "consumer.heartbeat.interval.ms"
    try:
        admin.alter_group_config(group, {key: 6000})
        assert admin.delete_groups([group]) == []
        kept = admin.describe_config("group", group, [key])[key]
        assert (kept.value, kept.source) == ("6000", "GROUP_CONFIG"), "DeleteGroups leaves the group's configs"
        admin.delete_group_configs([group])
        after = admin.describe_config("group", group, [key])[key]
        assert after.source != "GROUP_CONFIG" and after.value != "6000", f"the group config is still there: {after}"
    finally:
        scope.cleanup()
