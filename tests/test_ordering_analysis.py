"""Inversion counting on planted data: plain Python and Spark agree (notebook 07)."""

from __future__ import annotations

import pytest

from kafkalab.experiments.ordering import key_of
from kafkalab.experiments.ordering_analysis import (Consumed, InversionCounts, adjacent_inversions, count_inversions,
                                                    interleaving_witness)


def recs(rows: list[tuple[int, str | None, int, int, int]]) -> list[Consumed]:
    """(seq, key, partition, offset, batch) in consumption order."""
    return [Consumed(s, k, p, o, f"c{p}", i, b) for i, (s, k, p, o, b) in enumerate(rows)]


def test_adjacent_inversions_count_the_steps_down_and_are_zero_only_when_sorted() -> None:
    assert adjacent_inversions([]) == adjacent_inversions([5]) == adjacent_inversions([0, 1, 2]) == 0
    assert adjacent_inversions([1, 2, 3, 0]) == 1
    assert adjacent_inversions([3, 2, 1, 0]) == 3
    assert adjacent_inversions([0, 0, 1]) == 0  # a repeat is not a step down


# two partitions, consumed a whole partition at a time: p0 holds even seqs, p1 odd ones
TWO_PARTITIONS = recs([(0, "a", 0, 0, 0), (2, "a", 0, 1, 0), (4, "a", 0, 2, 0),
                       (1, "b", 1, 0, 1), (3, "b", 1, 1, 1), (5, "b", 1, 2, 1)])


def test_whole_partitions_in_a_row_break_the_global_order_but_not_key_or_partition_order() -> None:
    assert count_inversions(TWO_PARTITIONS) == InversionCounts(1, 0, 0)
    assert interleaving_witness(TWO_PARTITIONS) == (0, 2, 1)


def test_a_perfect_interleaving_has_no_inversion_and_no_witness() -> None:
    rows = recs([(0, "a", 0, 0, 0), (1, "b", 1, 0, 1), (2, "a", 0, 1, 2), (3, "b", 1, 1, 3)])
    assert count_inversions(rows) == InversionCounts(0, 0, 0)
    assert interleaving_witness(rows) is None


def test_a_retry_appended_last_is_one_inversion_in_each_scope() -> None:
    rows = recs([(1, "k", 0, 0, 0), (2, "k", 0, 1, 0), (3, "k", 0, 2, 0), (0, "k", 0, 3, 0)])
    assert count_inversions(rows) == InversionCounts(1, 1, 1)


def test_per_partition_order_is_the_offset_order_whatever_the_consumption_order() -> None:
    # a partition read back to front (offsets decreasing as consumed) still has its log order
    rows = recs([(2, None, 0, 2, 0), (1, None, 0, 1, 1), (0, None, 0, 0, 2)])
    assert count_inversions(rows) == InversionCounts(2, 0, 0)  # null keys are not counted per key


def test_keys_cycle_and_zero_keys_means_no_key() -> None:
    assert [key_of(i, 3) for i in range(4)] == ["k0", "k1", "k2", "k0"]
    assert key_of(7, 0) is None


@pytest.mark.spark
def test_spark_window_functions_count_what_python_counts(spark) -> None:
    from kafkalab.experiments import ordering_analysis as oa

    retry = recs([(1, "k", 0, 0, 0), (2, "k", 0, 1, 0), (0, "k", 0, 2, 0)])
    df = oa.spark_frame(spark, TWO_PARTITIONS, "two").unionByName(oa.spark_frame(spark, retry, "retry"))
    assert oa.spark_counts(df) == {"two": count_inversions(TWO_PARTITIONS), "retry": count_inversions(retry)}
    rows = oa.spark_inversions(df).where("run = 'retry'").collect()
    assert sorted((r["scope"], r["prev_seq"], r["seq"]) for r in rows) == [("global", 2, 0), ("key", 2, 0), ("partition", 2, 0)]
