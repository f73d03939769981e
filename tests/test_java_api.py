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


def test_java_command_is_the_one_jvm_line_of_the_labs_java_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from kafkalab import cluster

    monkeypatch.setattr(java_api, "_java", {})
    monkeypatch.setattr(cluster, "java_executable", lambda: "/jdk/bin/java")
    argv = java_api.java_command("a.jar:b/*", "x.Main", "1", "two", heap_mb=64, log4j2_config=Path("/l.properties"))
    assert argv == ["/jdk/bin/java", "-Xmx64m", *java_api.PROGRAM_JVM_FLAGS, "-Dlog4j2.configurationFile=/l.properties",
                    "-cp", "a.jar:b/*", "x.Main", "1", "two"]
    default = java_api.java_command("cp", "x.Main")
    assert default[1] == "-Xmx128m" and default[-3:] == ["-cp", "cp", "x.Main"]
    assert default[-4].endswith("tools-log4j2.properties"), "warnings and errors only, as Kafka's tools log here"


def test_no_experiment_builds_a_jvm_command_line_by_hand() -> None:
    from pathlib import Path

    root = Path(java_api.__file__).parent / "experiments"
    found = [f"{p.name}:{n}" for p in sorted(root.glob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if "-XX:TieredStopAtLevel" in line or '"-Xmx' in line]
    assert not found, f"JVM command lines built by hand (use java_api.java_command): {found}"
