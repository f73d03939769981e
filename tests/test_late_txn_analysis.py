"""The late transaction request's audit on planted runs (notebook 11): the rows a run gives,
and Jepsen's anomalies counted in plain Python and in Spark."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkalab.experiments.late_txn_analysis import WriteRow, python_counts, spark_counts, spark_frame, write_rows


def _run(seen: list[str], n1_after_error: str | None, committed_n: bool = True):
    steps = [{"step": "delivery", "value": f"N-{i}", "error": None} for i in range(3)]
    if committed_n:
        steps.append({"step": "committed", "txn": "N"})
    steps += [{"step": "delivery", "value": f"N+1-before-{i}", "error": None} for i in range(3)]
    steps += [{"step": "delivery", "value": f"N+1-after-{i}", "error": n1_after_error} for i in range(3)]
    steps.append({"step": "error", "txn": "N+1", "error": "INVALID_TXN_STATE"})
    return SimpleNamespace(program=steps, seen=seen)


#: librdkafka's run in notebook 11: N, and N+1's first three records, visible; N+1's later ones refused.
LATE_COMMIT = _run(["N-0", "N-1", "N-2", "N+1-before-0", "N+1-before-1", "N+1-before-2"], "INVALID_TXN_STATE")
#: the Java run: N visible, N+1 aborted and invisible.
FENCED = _run(["N-0", "N-1", "N-2"], None)
#: planted: N's commit lost a record, N+1 wholly invisible.
LOST = _run(["N-0", "N-2"], None)


def test_rows_name_each_records_transaction_ack_commit_and_visibility() -> None:
    rows = write_rows("r", LATE_COMMIT)
    assert len(rows) == 9 and rows[0] == WriteRow("r", "N-0", "N", True, True, True)
    assert rows[3] == WriteRow("r", "N+1-before-0", "N+1", True, False, True)
    assert rows[6] == WriteRow("r", "N+1-after-0", "N+1", False, False, False)


def test_python_counts_name_jepsens_anomalies() -> None:
    rows = write_rows("late", LATE_COMMIT) + write_rows("fenced", FENCED) + write_rows("lost", LOST)
    assert python_counts(rows) == {
        "late": {"aborted_reads": 3, "lost_writes": 0, "torn_transactions": 1},
        "fenced": {"aborted_reads": 0, "lost_writes": 0, "torn_transactions": 0},
        "lost": {"aborted_reads": 0, "lost_writes": 1, "torn_transactions": 1},
    }


def test_n_not_seen_committed_makes_its_visible_records_aborted_reads() -> None:
    rows = write_rows("x", _run(["N-0", "N-1", "N-2"], None, committed_n=False))
    assert python_counts(rows)["x"] == {"aborted_reads": 3, "lost_writes": 0, "torn_transactions": 0}


@pytest.mark.spark
def test_spark_counts_what_python_counts(spark) -> None:
    rows = write_rows("late", LATE_COMMIT) + write_rows("fenced", FENCED) + write_rows("lost", LOST)
    assert spark_counts(spark_frame(spark, rows)) == python_counts(rows)
