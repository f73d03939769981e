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


@pytest.fixture(autouse=True)
def _default_ports_for_pure_tests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that compare files against the default port plan (the compose file, captured tool
    output) see the default ports even when the suite runs against a second cluster
    (``KAFKALAB_PORT_BASE``); tests marked ``cluster`` keep the environment."""
    if request.node.get_closest_marker("cluster") is None:
        monkeypatch.delenv("KAFKALAB_PORT_BASE", raising=False)
