"""Shared pytest fixtures.

``spark``: one local Spark session (``kafkalab.spark.session``) for the whole test run;
tests that use it are marked ``@pytest.mark.spark``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """``kafkalab.spark.session("kafkalab-tests")``, stopped when the test run ends."""
    from kafkalab import spark as kspark

    session = kspark.session("kafkalab-tests")
    yield session
    session.stop()
