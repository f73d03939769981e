"""Notebook 06's analysis: the per-key table of a compacted topic, summarised in pandas."""

from __future__ import annotations

import pandas as pd

from kafkalab.experiments import segments_demo_analysis as sda


def test_key_stats_and_latest_values_from_a_spark_key_table() -> None:
    table = pd.DataFrame([
        {"topic": "t", "key": "a", "records": 3, "tombstones": 1, "latest": None},
        {"topic": "t", "key": "b", "records": 2, "tombstones": 0, "latest": "v"},
        {"topic": "u", "key": "b", "records": 1, "tombstones": 0, "latest": "v"},
    ])
    stats = sda.key_stats(table)
    assert stats["t"].to_dict() == {"records": 5, "keys": 2, "tombstones": 1, "live keys": 1}
    assert stats["u"].to_dict() == {"records": 1, "keys": 1, "tombstones": 0, "live keys": 1}
    assert sda.latest_values(table, "t") == sda.latest_values(table, "u") == {"b": "v"}
