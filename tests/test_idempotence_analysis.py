"""Notebook 04's analysis (PySpark): the log against the producers' acks."""

from __future__ import annotations

import pytest

from kafkalab.experiments import idempotence_analysis as ia


@pytest.mark.spark
def test_warm_up_finds_the_planted_duplicate(spark) -> None:
    rows = {r["value"]: (r["copies"], r["acks"], [(o["partition"], o["offset"]) for o in r["offsets"]]) for r in ia.warm_up(spark)}
    assert rows == {"a": (2, 1, [(0, 0), (0, 1)]), "b": (1, 1, [(0, 2)])}, "a acked once, held twice: a duplicate"
