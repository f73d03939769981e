"""kafkalab.quiz: a recorded prediction graded against a measured value; no answer, no grade."""

from __future__ import annotations

import pytest

from kafkalab import quiz


def test_a_number_prediction_is_graded_with_its_tolerance() -> None:
    p = quiz.predict("t-dup", "How many duplicates?", unit="duplicates", show=False)
    p.record(0)
    v = quiz.check("t-dup", 3, show=False)
    assert (v.right, v.answer, v.measured) == (False, 0, 3)
    assert v.message == "You predicted 0 duplicates; the cluster measured 3 duplicates. Not this time."
    p.record(2)
    near = quiz.check("t-dup", 3, tolerance=1, show=False)
    assert near.right is True
    assert near.message == ("You predicted 2 duplicates; the cluster measured 3 duplicates. Right. "
                            "(Within 1 counts as right.)")


def test_a_choice_prediction_is_right_only_on_the_same_choice() -> None:
    p = quiz.predict("t-who", "Which broker serves the fetch?", choices=["leader", "follower"], show=False)
    p.record("follower")
    assert quiz.check("t-who", "follower", show=False).right is True
    assert quiz.check("t-who", "leader", show=False).message == \
        'You predicted "follower"; the cluster measured "leader". Not this time.'
    assert quiz.check("t-who", "leader", show=False).right is False
    with pytest.raises(ValueError, match="not one of leader, follower"):
        p.record("controller")


def test_without_an_answer_the_check_shows_the_measurement_and_grades_nothing() -> None:
    quiz.predict("t-none", "How many?", show=False)
    v = quiz.check("t-none", 7, show=False)
    assert v.right is None and "measured 7" in v.message and "No prediction" in v.message
    assert v._repr_markdown_().startswith("**Check.**")


def test_bad_answers_and_unknown_keys_are_refused() -> None:
    p = quiz.predict("t-num", "How many?", show=False)
    with pytest.raises(ValueError, match="a number is expected"):
        p.record("three")
    with pytest.raises(ValueError, match="a number is expected"):
        p.record(True)
    with pytest.raises(KeyError, match="run its Predict cell first"):
        quiz.check("never-asked", 1, show=False)


def test_the_widget_records_what_the_learner_typed() -> None:
    p = quiz.predict("t-widget", "How many?", unit="records", show=False)
    p.widget = quiz._widget(p)
    _, row, status = p.widget.children
    box, button = row.children
    box.value = 4.0
    button.click()
    assert p.answer == 4 and status.value == "recorded: 4 records"


def test_a_predict_cell_shows_its_widget_and_no_repr_after_it(monkeypatch) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    published: list[dict] = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, *a, **k: published.append(data))
    p = quiz.predict("t-cell", "How many?", unit="records", show=False)
    shell.display_formatter.format(p)  # no widget (show=False): the question and answer as Markdown
    assert len(published) == 1 and "How many? (answer: None)" in published[0]["text/markdown"], published
    published.clear()
    p.widget = quiz._widget(p)  # what predict(show=True) displays
    data, _ = shell.display_formatter.format(p)  # the Out[] of a cell that ends with predict(...)
    assert data == {} and published == [], f"the widget is on screen; nothing repeats it: {data} {published}"
