"""kafkalab.experiments.stalled_partition (notebook 13): the tool tables, the analysis on a
planted run, and one live run."""

from __future__ import annotations

import pytest

from kafkalab.experiments import stalled_partition as sp
from kafkalab.experiments import stalled_partition_analysis as sa

# What kafka-transactions 4.4.0 printed (tab-separated, cells padded).
DESCRIBE = ("CoordinatorId\tTransactionalId\tProducerId\tProducerEpoch\tTransactionState\tTransactionTimeoutMs\t"
            "CurrentTransactionStartTimeMs\tTransactionDurationMs\tTopicPartitions\t\n"
            "1            \tscratch-tid    \t0         \t0            \tOngoing         \t60000               \t"
            "1795959855337                \t7447                 \tscratch-txn-0  \t\n")
FIND_HANGING_EMPTY = "Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\tLastTimestamp\tDuration(min)\t\n"


def test_a_kafka_transactions_table_parses_into_rows_keyed_by_its_header() -> None:
    (row,) = sp.parse_tool_table(DESCRIBE)
    assert row["TransactionState"] == "Ongoing" and row["TopicPartitions"] == "scratch-txn-0"
    assert row["TransactionTimeoutMs"] == "60000"
    assert sp.parse_tool_table(FIND_HANGING_EMPTY) == [], "a header alone: nothing found"
    assert sp.parse_tool_table("") == []


def _planted() -> sp.StalledRun:
    killed = 10_000
    jmx = [{"t_ms": killed + dt, "lso_lag": {"0": lag, "1": 0.0, "2": 0.0}, "late_transactions": 0.0}
           for dt, lag in ((-500, 0.0), (500, 15.0), (1000, 25.0), (4000, 0.0))]
    stats = [{"t_ms": killed + dt, "client_id": "c", "topic": "t", "partition": 0, "hi_offset": hi, "ls_offset": ls,
              "app_offset": ls, "committed_offset": c, "consumer_lag": lag, "fetch_state": "active"}
             for dt, hi, ls, c, lag in ((-1000, 10, 10, -1001, -1), (1000, 37, 22, 22, 0), (3900, 37, 37, 22, 15))]
    lag = {"stalled": {"read_committed": {0: {"committed": 22, "log_end_offset": 37, "last_stable_offset": 22, "lag": 15}},
                       "read_uncommitted": {0: {"committed": 37, "log_end_offset": 37, "last_stable_offset": 22, "lag": 0}}},
           "after": {"read_committed": {0: {"committed": 47, "log_end_offset": 47, "last_stable_offset": 47, "lag": 0}},
                     "read_uncommitted": {0: {"committed": 47, "log_end_offset": 47, "last_stable_offset": 47, "lag": 0}}}}
    return sp.StalledRun("t", "abort", "p-txn", 60000, 10000, killed, killed - 50, killed + 3000, killed + 3500, [],
                         jmx, stats, [], lag, {}, [])


def test_the_analysis_finds_the_stalled_partition_and_the_blind_client_lag() -> None:
    run = _planted()
    assert sa.stalled_partitions(run) == [0]
    rows = sa.client_rows(run)
    assert [r["t_s"] for r in rows] == [1.0, 3.9], "reports before the first commit are left out"
    assert rows[0]["lag_to_hw"] == 15 and rows[0]["consumer_lag"] == 0
    assert sa.max_client_lag(run, 0, "lag_to_hw") == 15
    assert [r["lag"] for r in sa.lag_table(run, "stalled")] == [15, 0]
    assert sa.timeout_window_ms(run) == (60000, 80000)
    assert [r["t_s"] for r in sa.jmx_rows(run) if r["partition"] == 0] == [-0.5, 0.5, 1.0, 4.0]


def test_the_plot_draws_both_panels_with_the_fault_marked() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from kafkalab.experiments import stalled_partition_plots as plots

    fig = plots.dashboard(_planted())
    top, bottom = fig.axes
    assert any("killed" in t.get_text() for t in top.get_legend().get_texts())
    assert len(bottom.get_lines()) >= 2


def test_the_uncommitted_twin_changes_the_isolation_level_only() -> None:
    consumer = sp.notebook_program("orders_consumer")
    twin = sp.uncommitted_twin(consumer)
    assert '"isolation.level": "read_uncommitted"' in twin.source
    assert twin.source.replace('"isolation.level": "read_uncommitted"', sp.READ_COMMITTED) == consumer.source


@pytest.mark.cluster
def test_a_dead_transactional_producer_stalls_one_partition_until_kafka_transactions_abort() -> None:
    run = sp.run()
    rc = run.lag["stalled"]["read_committed"]
    assert rc[sp.STUCK]["lag"] > 0 and all(rc[p]["lag"] == 0 for p in rc if p != sp.STUCK)
    assert all(v["lag"] == 0 for v in run.lag["stalled"]["read_uncommitted"].values())
    assert sa.stalled_partitions(run) == [sp.STUCK]
    assert run.tool_rows("find-hanging") == [] and run.tools["abort"]["returncode"] == 0
    assert all(v["lag"] == 0 for g in run.lag["after"].values() for v in g.values())


def test_gauge_rows_put_each_jmx_sample_on_one_clock_and_between_picks_a_window() -> None:
    from kafkalab import metrics

    samples = metrics.parse_jmx(f"time\t1000\n{metrics.UNDER_MIN_ISR}:Value\t0\ntime\t3000\n{metrics.UNDER_MIN_ISR}:Value\t4\n"
                                f"time\t5000\n{metrics.UNDER_MIN_ISR}:Value\t0\n")
    rows = sa.gauge_rows(samples, {"under min ISR": metrics.UNDER_MIN_ISR}, t0_ms=2000)
    assert rows == [{"t_s": -1.0, "under min ISR": 0.0}, {"t_s": 1.0, "under min ISR": 4.0},
                    {"t_s": 3.0, "under min ISR": 0.0}]
    assert sa.between(rows, "under min ISR", 0.0, 3.0) == [4.0], "from the fault up to, not including, the recovery"
