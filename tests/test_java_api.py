"""kafkalab.java_api: javac's answer for Java client snippets, against the brokers' kafka-clients."""

from __future__ import annotations

import pytest

from kafkalab import java_api


@pytest.mark.jvm
def test_removed_client_calls_fail_to_compile_and_their_replacements_compile() -> None:
    old = java_api.compile_snippet("ConsumerRecords<String, String> r = consumer.poll(100);")
    new = java_api.compile_snippet("ConsumerRecords<String, String> r = consumer.poll(Duration.ofMillis(100));")
    assert not old.ok and old.errors == ["incompatible types: int cannot be converted to Duration"], old.output
    assert new.ok and new.errors == [], new.output


@pytest.mark.jvm
def test_a_syntax_error_is_reported_not_raised() -> None:
    r = java_api.compile_snippet("consumer.poll(;")
    assert not r.ok and r.errors and "Snippet.java" in r.output
