"""kafkalab.experiments.offset_commit (pure parts), its PySpark analysis and its plot,
on planted ledgers: no cluster needed."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalab import config, coordinators, java_api, ledger
from kafkalab.cli import main as cli_main
from kafkalab.cluster import parse_group_table
from kafkalab.errors import JarsMissing, KafkalabError
from kafkalab.experiments import offset_commit as oc
from kafkalab.experiments import offset_commit_analysis as oca
from kafkalab.experiments import offset_commit_plots as ocp
from kafkalab.ledger import Event, Ledger

# --- the group's view -------------------------------------------------------------------


DESCRIBE = """
GROUP                       TOPIC                 PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID                                                                 HOST            CLIENT-ID
offset-commit-rbc82df-group offset-commit-rbc82df 0          -               100             -               offset-commit-rbc82df-group-instance-0-53836f71-6f1b-4acf-ab42-3d36716a815d /127.0.0.1      consumer-0
offset-commit-rbc82df-group offset-commit-rbc82df 1          40              100             60              offset-commit-rbc82df-group-instance-0-53836f71-6f1b-4acf-ab42-3d36716a815d /127.0.0.1      consumer-0
offset-commit-rbc82df-group offset-commit-rbc82df 2          -               100             -               offset-commit-rbc82df-group-instance-0-53836f71-6f1b-4acf-ab42-3d36716a815d /127.0.0.1      consumer-0
"""


def test_describe_output_is_parsed_into_rows_and_integer_columns() -> None:
    rows = parse_group_table(DESCRIBE)
    assert [r["PARTITION"] for r in rows] == ["0", "1", "2"]
    d = coordinators.GroupDescribe("offset-commit-rbc82df-group", DESCRIBE, rows)
    assert d.column("CURRENT-OFFSET") == {0: None, 1: 40, 2: None}
    assert d.column("LAG") == {0: None, 1: 60, 2: None}
    assert parse_group_table("\nConsumer group 'g' has no active members.\n") == []


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "store-after-process", "client": "java"}, "not a java commit mode"),
    ({"mode": "commit-sync-no-args"}, "not a librdkafka commit mode"),
    ({"client": "kafka-python"}, "client must be one of"),
    ({"crash_after": 301}, "crash_after must be between 1 and messages"),
    ({"crash_after": 0}, "crash_after must be between 1 and messages"),
    ({"dedupe": True, "client": "java"}, "dedupe needs the sqlite sink"),
    ({"crash_point": "during-commit"}, "crash_point must be one of"),
    ({"auto_commit_interval_ms": 0}, "auto_commit_interval_ms must be at least 1"),
    ({"group_protocol": "share"}, "group_protocol must be classic or consumer"),
    ({"group_protocol": "consumer"}, "for the Java consumer only"),
])
def test_run_config_rejects_what_cannot_run(kwargs: dict, message: str) -> None:
    with pytest.raises(KafkalabError, match=message):
        oc.RunConfig(**kwargs)


def test_a_kip848_java_consumer_is_a_dynamic_member_without_session_timeout() -> None:
    classic = oc.java_conf(oc.RunConfig("auto", client="java"), "g", "c", "g-instance-0")
    kip848 = oc.java_conf(oc.RunConfig("auto", client="java", group_protocol="consumer"), "g", "c", "g-instance-0")
    assert classic["group.protocol"] == "classic" and classic["group.instance.id"] == "g-instance-0"
    assert kip848["group.protocol"] == "consumer"
    assert "session.timeout.ms" not in kip848 and "group.instance.id" not in kip848
    assert oc.RunConfig("auto", client="java", group_protocol="consumer").name == "java auto (KIP-848)"


def test_run_config_names_and_the_program_each_librdkafka_mode_runs() -> None:
    assert oc.RunConfig("auto").name == "auto"
    assert oc.RunConfig("auto", client="java").name == "java auto"
    assert oc.RunConfig("store-after-process", dedupe=True).name == "store-after-process + dedupe"
    progs = {m: oc.RunConfig(m).resolved_program() for m in oc.LIBRDKAFKA_MODES}
    assert {m: p.name for m, p in progs.items()} == oc.MODE_PROGRAMS
    assert oc.RunConfig("store-after-process", dedupe=True).resolved_program().name == oc.DEDUPE_PROGRAM
    assert '"enable.auto.offset.store": False' in progs["store-after-process"].source
    assert "store_offsets(message=msg)" in progs["store-after-process"].source
    assert '"enable.auto.commit": False' in progs["sync-per-message"].source
    assert "asynchronous=False" in progs["sync-per-message"].source and "asynchronous=True" in progs["async"].source
    assert "INSERT OR IGNORE" in oc.RunConfig("store-after-process", dedupe=True).resolved_program().source
    edited = progs["sync-per-message"].replace("asynchronous=False", "asynchronous=True", name="my_commit")
    assert oc.RunConfig("sync-per-message", program=edited).name == "my_commit"
    for mode in ("auto", "store-after-process", "sync-per-message", "async"):
        source = progs[mode].source
        assert '"group.instance.id": lab.instance_id' in source and '"session.timeout.ms": 6000' in source, (
            f"{mode}: static membership is written in the program, where a learner sees it")
    java = oc.java_conf(oc.RunConfig("auto", client="java", batch=7), "g", "c", "i")
    assert (java["enable.auto.commit"], java["max.poll.records"]) == ("true", "7")
    assert oc.java_conf(oc.RunConfig("commit-sync-no-args", client="java"), "g", "c", "i")["enable.auto.commit"] == "false"
    assert all(oc.describe_mode(oc.RunConfig(m)) for m in oc.LIBRDKAFKA_MODES)


def test_a_run_config_refuses_a_program_for_java_or_a_program_that_is_no_program() -> None:
    prog = oc.RunConfig("auto").resolved_program()
    with pytest.raises(KafkalabError, match="librdkafka"):
        oc.RunConfig("auto", client="java", program=prog)
    with pytest.raises(KafkalabError, match="kafkalab.programs.Program"):
        oc.RunConfig("auto", program=prog.source)


def test_cli_refuses_java_settings_for_a_librdkafka_program() -> None:
    r = CliRunner().invoke(cli_main, ["run", "offset-commit", "--batch", "1"])
    assert r.exit_code == 1 and "edit" in r.output and "Traceback" not in r.output


def test_cli_rejects_a_java_only_mode_for_librdkafka_with_one_line() -> None:
    r = CliRunner().invoke(cli_main, ["run", "offset-commit", "--mode", "commit-sync-no-args"])
    assert r.exit_code == 1 and "not a librdkafka commit mode" in r.output and "Traceback" not in r.output


def test_cli_help_lists_every_mode() -> None:
    r = CliRunner().invoke(cli_main, ["run", "offset-commit", "--help"])
    assert r.exit_code == 0
    for mode in (*oc.LIBRDKAFKA_MODES, *oc.JAVA_MODES):
        assert mode in r.output


# --- the Java consumer (kafka/src/main/java, built by `make jars`) --------------------------


def fake_jars(root: Path) -> Path:
    """A jars folder where only the broker's jar is present (a stub: only its name is checked)."""
    (root / "broker").mkdir(parents=True)
    (root / "broker" / f"kafka_2.13-{config.KAFKA_VERSION}.jar").write_bytes(b"")
    return root


def test_java_consumer_is_missing_until_make_jars_builds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    monkeypatch.setenv("KAFKALAB_JARS", str(fake_jars(tmp_path)))
    with pytest.raises(JarsMissing, match=r"OffsetCommitConsumer is not in .*Run `make jars`"):
        java_api.program_classpath(oc.JAVA_CLASS)
    jar = tmp_path / java_api.CLIENTS_JAR
    jar.parent.mkdir()
    with zipfile.ZipFile(jar, "w") as z:  # a jar of an older build, without the class
        z.writestr("kafkalab/clients/Other.class", b"")
    with pytest.raises(JarsMissing, match="make jars"):
        java_api.program_classpath(oc.JAVA_CLASS)
    with zipfile.ZipFile(jar, "a") as z:
        z.writestr(oc.JAVA_CLASS.replace(".", "/") + ".class", b"")
    assert java_api.program_classpath(oc.JAVA_CLASS).split(os.pathsep) == [str(jar), str(tmp_path / "broker" / "*")]


def test_a_java_run_fails_before_it_creates_a_topic_when_the_consumer_is_not_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAB_JARS", str(fake_jars(tmp_path)))
    monkeypatch.setattr(oc.admin, "create_topics", lambda *a, **k: pytest.fail("a topic was created"))
    with pytest.raises(JarsMissing, match="make jars"):
        oc.CrashAndRestart([oc.RunConfig("auto"), oc.RunConfig("auto", client="java")])


@pytest.mark.jvm
def test_the_built_java_consumer_reports_the_pinned_kafka_clients_defaults() -> None:
    # a JVM, no cluster: ConsumerConfig built from nothing but a group.id (notebook 03, section 7)
    got = oc.java_consumer_defaults()
    assert got == {"enable.auto.commit": "true", "auto.commit.interval.ms": "5000", "max.poll.records": "500",
                   "group.protocol": "classic", "kafka-clients": config.KAFKA_VERSION,
                   "enable.auto.commit.without.group.id": "false"}, got


# --- counting a run from its ledgers --------------------------------------------------------

RUN = "r1"
T = "t"


def ev(kind: str, partition: int | None = None, offset: int | None = None, value: str | None = None,
       client: str = "consumer-0", ts: int = 0, seq: int = 0, error: str | None = None) -> Event:
    return Event(RUN, kind, ts, seq, T, partition, offset, value=value, client_id=client, error=error)


def acked(n: int, partitions: int = 1) -> list[Event]:
    """n records, round-robin over partitions; value v<i> at offset i // partitions."""
    return [ev("acked", i % partitions, i // partitions, f"v{i}", "producer-0") for i in range(n)]


def consumer(client: str, batches: list[list[int]], processed: int, ts0: int = 1000) -> list[Event]:
    """A single-partition consumer: batches of offsets handed over, then processed one by
    one, the first ``processed`` of them in all."""
    out: list[Event] = [ev("assigned", 0, client=client, ts=ts0)]
    done = 0
    t = ts0
    for batch in batches:
        for o in batch:
            t += 1
            out.append(ev("consumed", 0, o, f"v{o}", client, ts=t))
        for o in batch:
            if done == processed:
                return out
            t += 10
            out.append(ev("processed", 0, o, f"v{o}", client, ts=t))
            done += 1
    return out


def summarize(cfg: oc.RunConfig, crashed: list[Event], drained: list[Event], produced: int = 10) -> oca.OffsetCommitResult:
    return oca.summarize(cfg, RUN, T, "g", acked(produced), crashed, drained, {}, None, -9, [])


def test_auto_commit_past_the_batch_counts_the_unprocessed_rest_as_lost() -> None:
    cfg = oc.RunConfig("auto", messages=10, crash_after=6, batch=4, process_ms=40, crash_point="after-commit")
    crashed = consumer("consumer-0", [[0, 1, 2, 3], [4, 5, 6, 7]], processed=6)
    drained = consumer("consumer-1", [[8, 9]], processed=2, ts0=5000)  # resumed at 8: the commit covered 0..7
    r = summarize(cfg, crashed, drained)
    assert (r.lost, r.lost_ids, r.duplicates) == (2, ["v6", "v7"], 0)
    assert (r.in_hand_at_crash, r.in_hand_below_resume, r.processed_at_or_after_resume) == (2, 2, 0)
    assert (r.last_batch, r.processed_from_last_batch) == (4, 2)
    assert r.resumed_from == {0: 8}
    assert oca.verdicts(r) == {"explained_by_committed_offset": True, "auto_commit_loses_what_was_in_hand": True}
    assert r.records_per_s == pytest.approx(2 / ((5000 + 2 + 20 - 5001) / 1000))


def test_a_replay_from_the_last_commit_counts_duplicates_not_losses() -> None:
    cfg = oc.RunConfig("store-after-process", messages=10, crash_after=6, batch=4)
    crashed = consumer("consumer-0", [[0, 1, 2, 3], [4, 5, 6, 7]], processed=6)
    drained = consumer("consumer-1", [[4, 5, 6, 7], [8, 9]], processed=6, ts0=5000)  # resumed at 4
    r = summarize(cfg, crashed, drained)
    assert (r.lost, r.duplicates, r.duplicate_ids) == (0, 2, ["v4", "v5"])
    assert r.processed == 12 and r.processed_unique == 10
    assert oca.verdicts(r) == {"explained_by_committed_offset": True, "at_least_once": True}


def test_verdicts_fail_when_the_outcome_contradicts_the_claim() -> None:
    crashed = consumer("consumer-0", [[0, 1, 2, 3], [4, 5, 6, 7]], processed=6)
    replay = consumer("consumer-1", [[4, 5, 6, 7], [8, 9]], processed=6, ts0=5000)
    skip = consumer("consumer-1", [[8, 9]], processed=2, ts0=5000)
    sync = oc.RunConfig("sync-per-message", messages=10, crash_after=6, batch=4)
    assert oca.verdicts(summarize(sync, crashed, replay))["at_most_one_duplicate"] is False  # 2 duplicates
    assert oca.verdicts(summarize(sync, crashed, skip))["at_most_one_duplicate"] is False  # 2 lost
    store = oc.RunConfig("store-after-process", messages=10, crash_after=6, batch=4)
    assert oca.verdicts(summarize(store, crashed, skip))["at_least_once"] is False
    java = oc.RunConfig("auto", client="java", messages=10, crash_after=6, batch=4)
    assert oca.verdicts(summarize(java, crashed, replay))["java_auto_commit_duplicates_since_last_poll"] is True
    assert oca.verdicts(summarize(java, crashed, skip))["java_auto_commit_duplicates_since_last_poll"] is False


def test_the_auto_claim_is_made_only_when_the_crash_came_after_the_timers_commit() -> None:
    crashed = consumer("consumer-0", [[0, 1, 2, 3], [4, 5, 6, 7]], processed=6)
    drained = consumer("consumer-1", [[4, 5, 6, 7], [8, 9]], processed=6, ts0=5000)
    before_commit = oc.RunConfig("auto", messages=10, crash_after=6, batch=4, crash_point="after-process")
    assert oca.verdicts(summarize(before_commit, crashed, drained)) == {"explained_by_committed_offset": True}


def test_an_edited_program_gets_only_the_accounting_verdict() -> None:
    crashed = consumer("consumer-0", [[0, 1, 2, 3], [4, 5, 6, 7]], processed=6)
    replay = consumer("consumer-1", [[4, 5, 6, 7], [8, 9]], processed=6, ts0=5000)
    prog = oc.RunConfig("sync-per-message").resolved_program().replace("asynchronous=False", "asynchronous=True",
                                                                       name="edited")
    cfg = oc.RunConfig("sync-per-message", messages=10, crash_after=6, batch=4, program=prog)
    r = summarize(cfg, crashed, replay)
    assert oca.verdicts(r) == {"explained_by_committed_offset": True}
    assert r.to_json()["config"]["program"]["name"] == "edited"


def test_dedupe_verdict_reads_the_sink(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "sink.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE processed (record_id TEXT PRIMARY KEY, topic TEXT, partition INTEGER, "
                "offset INTEGER, consumer TEXT, ts_ms INTEGER)")
    con.executemany("INSERT INTO processed VALUES (?, 't', 0, ?, 'c', 0)", [(f"v{i}", i) for i in range(10)])
    con.commit()
    con.close()
    cfg = oc.RunConfig("store-after-process", dedupe=True, messages=10, crash_after=6, batch=4)
    crashed = consumer("consumer-0", [[0, 1, 2, 3], [4, 5, 6, 7]], processed=6)
    drained = consumer("consumer-1", [[4, 5, 6, 7], [8, 9]], processed=6, ts0=5000)
    r = oca.summarize(cfg, RUN, T, "g", acked(10), crashed, drained, {0: 4}, db, -9, [])
    assert (r.sink_rows, r.sink_unique, r.duplicates) == (10, 10, 2)
    assert oca.verdicts(r)["dedupe_side_effect_exactly_once"] is True
    assert r.to_json()["committed_at_crash"] == {"0": 4} and r.to_json()["verdicts"]["at_least_once"] is True


def test_last_batch_is_the_last_run_of_consumed_events() -> None:
    events = consumer("c", [[0, 1, 2], [3, 4, 5]], processed=4)
    batch, done = oca.last_batch(events)
    assert [e.offset for e in batch] == [3, 4, 5] and [e.offset for e in done] == [3]
    assert oca.last_batch([ev("assigned", 0)]) == ([], [])


# --- PySpark analysis -------------------------------------------------------------------------


def planted_ledger(tmp_path: Path) -> Path:
    """Run r1: 4 records, v2 never processed, v1 processed twice; the restarted consumer-1
    processes 2 records 100 ms apart. Run r2: 2 records, each once."""
    path = tmp_path / "ledger.jsonl"
    with Ledger(path, "r1") as book:
        for i in range(4):
            book.record("acked", topic="t", partition=0, offset=i, value=f"v{i}", client_id="producer-0", ts_ms=1)
        book.record("acked", topic="t", partition=0, offset=None, value="failed", error="timed out", ts_ms=1)
        for v in ("v0", "v1"):
            book.record("processed", topic="t", partition=0, value=v, client_id="consumer-0", ts_ms=10)
        book.record("consumed", topic="t", partition=0, offset=1, value="v1", client_id="consumer-1", ts_ms=1000)
        book.record("processed", topic="t", partition=0, value="v1", client_id="consumer-1", ts_ms=1050)
        book.record("processed", topic="t", partition=0, value="v3", client_id="consumer-1", ts_ms=1100)
    with Ledger(tmp_path / "other.jsonl", "r2") as book:
        for i in range(2):
            book.record("acked", topic="t", partition=0, offset=i, value=f"w{i}", client_id="producer-0", ts_ms=1)
            book.record("processed", topic="t", partition=0, value=f"w{i}", client_id="consumer-0", ts_ms=5)
    return tmp_path


@pytest.mark.spark
def test_outcomes_anti_join_and_group_by_count_lost_and_duplicates(spark, tmp_path: Path) -> None:
    events = ledger.load(spark, str(planted_ledger(tmp_path)))
    rows = {r["run_id"]: r.asDict() for r in oca.outcomes(events).collect()}
    assert rows["r1"] == {"run_id": "r1", "produced": 4, "processed": 4, "processed_unique": 3, "lost": 1, "duplicates": 1}
    assert rows["r2"] == {"run_id": "r2", "produced": 2, "processed": 2, "processed_unique": 2, "lost": 0, "duplicates": 0}
    assert [(r["value"], r["offset"]) for r in oca.lost_records(events).collect()] == [("v2", 2)]
    dups = oca.duplicate_records(events).collect()
    assert [(r["value"], r["times"], r["consumers"]) for r in dups] == [("v1", 2, ["consumer-0", "consumer-1"])]
    rate = oca.drain_rates(events).collect()
    assert [(r["run_id"], r["records"], r["span_ms"], r["records_per_s"]) for r in rate] == [("r1", 2, 100, 20.0)]


@pytest.mark.spark
def test_side_effects_join_the_sink_rows_against_what_was_produced(spark, tmp_path: Path) -> None:
    events = ledger.load(spark, str(planted_ledger(tmp_path)))
    sink = spark.createDataFrame([("r1", "v0"), ("r1", "v1"), ("r1", "v1"), ("r1", "v3"), ("r2", "w0"), ("r2", "w1")],
                                 "run_id string, record_id string")
    rows = {r["run_id"]: r.asDict() for r in oca.side_effects(events, sink).collect()}
    assert rows["r1"] == {"run_id": "r1", "produced": 4, "rows": 4, "missing": 1, "repeated": 1}
    assert rows["r2"] == {"run_id": "r2", "produced": 2, "rows": 2, "missing": 0, "repeated": 0}


@pytest.mark.spark
def test_warm_up_runs_on_a_private_ledger(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``warm_up`` runs every query of the module on a ledger of its own, in a temporary folder
    that it deletes: no file in the state folder (where real runs' ledgers live), nothing cached."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("KAFKALAB_STATE", str(tmp_path / "state"))
    loaded: list[tuple[Path, list[tuple[str, str]]]] = []
    real_load = ledger.load

    def spy_load(session, path, *args, **kwargs):
        events = real_load(session, path, *args, **kwargs)
        loaded.append((Path(path), [(r["run_id"], r["kind"]) for r in events.collect()]))
        return events

    monkeypatch.setattr(ledger, "load", spy_load)
    queries = ("outcomes", "drain_rates", "lost_records", "duplicate_records", "side_effects")
    ran: list[str] = []
    for name in queries:
        monkeypatch.setattr(oca, name, lambda *a, _q=getattr(oca, name), _n=name: ran.append(_n) or _q(*a))
    cache = spark._jsparkSession.sharedState().cacheManager()
    was_empty = cache.isEmpty()

    found = oca.warm_up(spark)

    assert len(loaded) == 1, f"one ledger is loaded, not {len(loaded)}"
    path, rows = loaded[0]
    assert path.is_relative_to(tmp_path / "tmp") and path.parent.name.startswith("kafkalab-warmup-"), (
        f"the warm-up ledger {path} is in a temporary folder of its own")
    assert rows == [("warmup", "acked"), ("warmup", "consumed"), ("warmup", "processed")], rows
    assert sorted(set(ran)) == sorted(queries), f"every query of the module ran once at least: {ran}"
    assert not any((tmp_path / "tmp").iterdir()), "the temporary folder is deleted afterwards"
    assert not (tmp_path / "state").exists(), "nothing is written where real ledgers live"
    assert cache.isEmpty() == was_empty, "warm_up leaves nothing cached in the session"
    assert found == {"produced": 1, "processed": 1, "lost": 0, "duplicates": 0,
                     "lost_records": 0, "duplicate_records": 0, "side_effects": 1}, found


# --- plotting ---------------------------------------------------------------------------------


def test_plot_outcomes_draws_two_panels_and_refuses_an_empty_table() -> None:
    import matplotlib

    matplotlib.use("Agg")
    rows = [{"mode": "auto", "lost": 10, "duplicates": 0, "records_per_s": 2000.0},
            {"mode": "sync-per-message", "lost": 0, "duplicates": 1, "records_per_s": None}]
    fig = ocp.plot_outcomes(rows, title="t")
    assert len(fig.axes) == 2 and fig.axes[1].get_yscale() == "linear"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["auto", "sync-per-message"]
    with pytest.raises(ValueError, match="empty"):
        ocp.plot_outcomes([])
    with pytest.raises(ValueError, match="records_per_s"):
        ocp.plot_outcomes([{"mode": "auto", "lost": 1, "duplicates": 0}])


def test_result_row_is_what_the_table_and_plot_use() -> None:
    cfg = oc.RunConfig("auto", messages=10, crash_after=6, batch=4)
    r = summarize(cfg, consumer("consumer-0", [[0, 1, 2, 3]], processed=4), consumer("consumer-1", [[4, 5, 6, 7, 8, 9]], 6, 5000))
    assert set(ocp.outcome_rows([r])[0]) == {"mode", "produced", "processed", "processed_unique", "lost",
                                             "duplicates", "records_per_s"}
    assert asdict(r)["config"]["mode"] == "auto"
