"""kafkalab.experiments.late_txn against the live cluster (KAFKA-17754, notebook 11): the
transaction coordinator of Kafka 4.3.1 applies librdkafka's late EndTxn (transactions v1) to
the next transaction, and fences the Java producer's (transactions v2, EndTxn v5)."""

from __future__ import annotations

import pytest

from kafkalab.experiments import late_txn


@pytest.mark.cluster
def test_a_late_end_txn_of_librdkafka_commits_the_next_transaction_and_tears_it() -> None:
    run = late_txn.run_librdkafka()
    assert run.held["api"] == "EndTxn" and run.held["txn"]["committed"] is True
    assert run.versions["EndTxn"] == [1], "librdkafka sends EndTxn v1 (transactions v1)"
    assert run.late_answer == "NONE", f"the coordinator applied the late commit: {run.held}"
    assert run.aborted_reads == [f"N+1-before-{i}" for i in range(3)], (
        f"a read_committed reader sees the records of the transaction the program aborted: {run.seen}")
    assert run.torn and run.lost_writes == [], "N+1 is torn (its later records were refused), nothing of N is lost"
    assert any(p.get("step") == "error" and p.get("error") == "INVALID_TXN_STATE" for p in run.program), (
        "the program's abort of N+1 fails: the coordinator already committed it")


@pytest.mark.cluster
@pytest.mark.jvm
def test_the_java_producers_late_end_txn_v5_is_fenced_by_the_epoch_bump() -> None:
    run = late_txn.run_java()
    assert run.versions["EndTxn"] == [5], "kafka-clients 4.3.1 sends EndTxn v5 (transactions v2, KIP-890)"
    assert run.late_answer == "PRODUCER_FENCED", f"the late request of the old epoch is fenced: {run.held}"
    committed = [a for a in run.txn_answers if a["action"] == "forwarded" and a["error"] == "NONE"]
    assert committed and committed[0]["producer_epoch"] == run.held["txn"]["producer_epoch"] + 1, (
        "the commit of N returned the bumped epoch")
    assert run.aborted_reads == [] and run.lost_writes == [] and not run.torn
    assert run.seen == ["N-0", "N-1", "N-2"], "the reader sees N and nothing of the aborted N+1"
