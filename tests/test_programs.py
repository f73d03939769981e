"""Every client program on a notebook's page is what a service would ship, and the lab's
instruments only observe (STYLE.md, "Code"; tests/program_rules.py has the rules, read with ast)."""

from __future__ import annotations

from pathlib import Path

import pytest

import program_rules as rules
from kafkalab import programs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "solutions").glob("*.ipynb"))
SHOWN = [(nb.name, name, p.source) for nb in NOTEBOOKS for name, p in programs.notebook_programs(nb).items()]
INSTRUMENTS = sorted((ROOT / "src" / "kafkalab" / "instruments").glob("*.py"))


def test_the_notebooks_show_programs() -> None:
    assert len(SHOWN) >= 40, f"only {len(SHOWN)} %%program cells found: is the notebook glob right?"


@pytest.mark.parametrize("rule", sorted(rules.RULES))
def test_every_shown_program_follows_the_rule(rule: str) -> None:
    found = [f"{nb} {name}: {f}" for nb, name, src in SHOWN for f in rules.RULES[rule](src)]
    assert not found, f"{len(found)} program(s) break {rule}:\n" + "\n".join(found)


def test_no_instrument_calls_a_client_method_that_changes_what_kafka_does() -> None:
    found = [f"{path.name} {f}" for path in INSTRUMENTS for f in rules.instrument_acts(path.read_text())]
    assert not found, "an instrument acts on Kafka (the program must):\n" + "\n".join(found)


# Each rule, planted: a rule that cannot fail is no rule.
GOOD_CONSUMER = """
import sys
from confluent_kafka import Consumer, KafkaException
consumer = Consumer({})
try:
    while True:
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            if msg.error().fatal():
                raise KafkaException(msg.error())
            print(msg.error(), file=sys.stderr)
            continue
finally:
    consumer.close()
"""
GOOD_PRODUCER = """
from confluent_kafka import Producer
producer = Producer({})
try:
    for i in range(10):
        while True:
            try:
                producer.produce("t", value=b"x")
                break
            except BufferError:
                producer.poll(1)
    left = producer.flush(30)
    if left:
        producer.purge()
        raise RuntimeError(left)
    if producer.flush(5):
        producer.purge()
        raise RuntimeError("not delivered")
finally:
    producer.close()
"""


def test_the_rules_pass_a_service_grade_consumer_and_producer() -> None:
    for rule in rules.RULES.values():
        assert rule(GOOD_CONSUMER) == [] and rule(GOOD_PRODUCER) == [], rule.__name__


@pytest.mark.parametrize("rule, source", [
    ("consumer_errors", GOOD_CONSUMER.replace("        msg = consumer.poll(1)", "        consumer.poll(1)\n        msg = None")),
    ("consumer_errors", GOOD_CONSUMER.replace(
        "            if msg.error().fatal():\n                raise KafkaException(msg.error())\n"
        "            print(msg.error(), file=sys.stderr)\n", "")),
    ("consumer_errors", GOOD_CONSUMER.replace(
        "        if msg.error():\n            if msg.error().fatal():\n                raise KafkaException(msg.error())\n"
        "            print(msg.error(), file=sys.stderr)\n            continue\n", "")),
    ("flush_checked", GOOD_PRODUCER.replace("left = producer.flush(30)", "producer.flush(30)\n    left = 0")),
    ("buffer_error", GOOD_PRODUCER.replace("except BufferError:", "except ValueError:")),
    ("purged_before_raise", GOOD_PRODUCER.replace("        producer.purge()\n        raise RuntimeError(left)", "        raise RuntimeError(left)")),
    ("purged_before_raise", GOOD_PRODUCER.replace("        producer.purge()\n        raise RuntimeError(\"not", "        raise RuntimeError(\"not")),
    ("closed_in_finally", GOOD_PRODUCER.replace("    producer.close()", "    pass")),
    ("closed_in_finally", GOOD_CONSUMER.replace("finally:\n    consumer.close()", "except KeyError:\n    consumer.close()")),
])
def test_each_rule_finds_its_mistake_planted(rule: str, source: str) -> None:
    assert rules.RULES[rule](source), f"{rule} passed a program that breaks it:\n{source}"


def test_a_produce_loop_that_flushes_each_record_is_not_tight() -> None:
    one_by_one = GOOD_PRODUCER.replace(
        "        while True:\n            try:\n                producer.produce(\"t\", value=b\"x\")\n"
        "                break\n            except BufferError:\n                producer.poll(1)\n",
        "        producer.produce(\"t\", value=b\"x\")\n        if producer.flush(30):\n            raise RuntimeError()\n")
    assert "BufferError" not in one_by_one
    assert rules.buffer_error(one_by_one) == []


def test_the_instrument_rule_finds_a_flush_of_the_programs_producer_but_not_of_its_own_ledger() -> None:
    assert rules.instrument_acts("def crash(self, producer):\n    producer.flush(30)\n")
    assert rules.instrument_acts("def f(self, consumer):\n    consumer.commit(asynchronous=False)\n")
    assert rules.instrument_acts("def f(self):\n    self.ledger.flush()\n    open('x', 'w').close()\n") == []


def _edits() -> dict[tuple[str, str], list[str]]:
    """(notebook, program) -> the text each ``PROGRAM.replace("...", ...)`` of the lesson or its
    solutions looks for (string literals only)."""
    import ast

    import nbformat

    out: dict[tuple[str, str], list[str]] = {}
    for nb in sorted((ROOT / "notebooks").glob("[01]*.ipynb")):
        shown = programs.notebook_programs(nb)
        for path in (nb, ROOT / "notebooks" / "solutions" / f"{nb.stem}_solutions.ipynb"):
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type != "code":
                    continue
                try:
                    tree = ast.parse("\n".join(l for l in cell.source.split("\n") if not l.startswith("%")))
                except SyntaxError:
                    continue
                for n in ast.walk(tree):
                    if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "replace"
                            and isinstance(n.func.value, ast.Name) and n.func.value.id in shown
                            and n.args and isinstance(n.args[0], ast.Constant)):
                        out.setdefault((nb.name, n.func.value.id), []).append(n.args[0].value)
    return out


def test_a_program_whose_lines_later_cells_change_says_so_at_its_top() -> None:
    edits = _edits()
    assert len(edits) >= 20, f"only {len(edits)} edited programs found: is the scan right?"
    found = []
    for (nb, name), olds in edits.items():
        source = programs.notebook_programs(ROOT / "notebooks" / nb)[name].source
        if not source.startswith("# Later cells copy this program"):
            found.append(f"{nb} {name}: no header naming the lines later cells change")
        found += [f"{nb} {name}: {old!r} occurs {source.count(old)} times" for old in olds if source.count(old) != 1]
    assert not found, "\n".join(found)


def test_a_korean_notebook_s_solutions_read_the_programs_of_the_korean_lesson(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from notebooks/ko/, ``notebook_programs("03_offset_commit")`` reads the Korean lesson: a
    program a Korean learner edits there is the one the solutions run. Same code, Korean comments."""
    from kafkalab.i18n import code_tokens as code

    en = programs.notebook_programs("03_offset_commit")
    monkeypatch.chdir(programs.notebooks_dir() / "ko" / "solutions")
    ko = programs.notebook_programs("03_offset_commit")
    assert list(ko) == list(en)
    assert all(code(ko[n].source) == code(en[n].source) for n in en)
    assert any(ko[n].source != en[n].source for n in en), "the Korean lesson's programs have Korean comments"
