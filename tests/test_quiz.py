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
    box, after, button = row.children
    assert (box.description, after.value) == ("records", ""), "English: the unit, then the box"
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


def test_a_number_and_its_unit_are_shown_in_the_units_order() -> None:
    assert quiz.counted(2, "노는 컨슈머 {n}개") == "노는 컨슈머 2개", "{n} is where the number goes"
    assert quiz.counted(120, "ms") == "120 ms" and quiz.counted(3, "records") == "3 records", "no {n}: number, space, unit"
    assert quiz.counted(33, "%") == "33%", "a percent attaches without a space"
    assert quiz.counted(7, "") == "7"


def test_a_percent_attaches_to_its_number_in_english() -> None:
    p = quiz.predict("t-pct", "What share?", unit="%", show=False)
    p.record(30)
    assert quiz.check("t-pct", 33, tolerance=10, show=False).message == \
        "You predicted 30%; the cluster measured 33%. Right. (Within 10 counts as right.)"
    p.widget = quiz._widget(p)
    _, row, status = p.widget.children
    box, after, button = row.children
    assert (box.description, after.value) == ("answer", "%")
    button.click()  # the box holds 0.0 until the learner types
    assert status.value == "recorded: 0%"


#: The catalogs' quiz strings as a Korean notebook would find them (``i18n.quiz_text``).
KOREAN = {"How many idle consumers?": "노는 컨슈머는 몇 개일까?", "idle consumers": "노는 컨슈머 {n}개",
          "ms": "ms", "%": "%", "Where does it go?": "어디로 갈까?", "leader": "리더", "follower": "팔로워"}


@pytest.fixture
def korean(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel in ``notebooks/ko/`` whose catalogs hold ``KOREAN``."""
    from kafkalab import i18n

    monkeypatch.setattr(i18n, "language_of", lambda path=None: "ko")
    monkeypatch.setitem(i18n._quiz_cache, "ko", dict(KOREAN))


def test_korean_counts_in_korean_order(korean) -> None:
    p = quiz.predict("t-ko-idle", "How many idle consumers?", unit="idle consumers", show=False)
    assert quiz.check("t-ko-idle", 1, show=False).message == "클러스터 측정값: 노는 컨슈머 1개. (기록한 예측이 없다.)"
    p.widget = quiz._widget(p)
    question, row, status = p.widget.children
    box, after, button = row.children
    assert (box.description, after.value, button.description) == ("노는 컨슈머", "개", "기록"), \
        "the unit's words around the box, in the phrase's order"
    assert question.value == "<b>예측.</b> 노는 컨슈머는 몇 개일까?"
    box.value = 2.0
    button.click()
    assert p.answer == 2 and status.value == "예측을 기록했다: 노는 컨슈머 2개"
    v = quiz.check("t-ko-idle", 1, show=False)
    assert v.message == "예측: 노는 컨슈머 2개, 클러스터 측정값: 노는 컨슈머 1개. 이번에는 틀렸다."
    assert v._repr_markdown_().startswith("**확인.** 예측: 노는 컨슈머 2개")


def test_korean_keeps_number_then_unit_without_a_placeholder_and_attaches_a_percent(korean) -> None:
    p = quiz.predict("t-ko-ms", "How long?", unit="ms", show=False)
    p.record(120)
    assert quiz.check("t-ko-ms", 120, show=False).message == "예측: 120 ms, 클러스터 측정값: 120 ms. 맞았다."
    q = quiz.predict("t-ko-pct", "What share?", unit="%", show=False)
    q.record(30)
    assert quiz.check("t-ko-pct", 33, tolerance=10, show=False).message == \
        "예측: 30%, 클러스터 측정값: 33%. 맞았다. (차이가 10 이내면 맞은 것으로 본다.)"


REFUSALS = {
    "en": ["a number is expected, not 'three'", "'controller' is not one of leader, follower",
           "no answer chosen yet: choose one, then press Record",
           "no prediction 'never-asked-en': run its Predict cell first"],
    "ko": ["숫자로 답해야 한다. 입력한 값: 'three'", "선택지에 없는 답이다: 'controller'. 고를 수 있는 답: 리더, 팔로워",
           "아직 고른 답이 없다: 하나를 고른 뒤 기록을 누르자.",
           "예측을 찾을 수 없다: 'never-asked-ko'. 먼저 그 예측 셀(quiz.predict)을 실행하자."],
}


@pytest.mark.parametrize("lang", ["en", "ko"])
def test_a_bad_answer_and_an_unknown_key_are_refused_in_the_notebooks_language(
        lang: str, request: pytest.FixtureRequest) -> None:
    if lang == "ko":
        request.getfixturevalue("korean")
    p = quiz.predict(f"t-{lang}-num", "How long?", unit="ms", show=False)
    c = quiz.predict(f"t-{lang}-who", "Where does it go?", choices=["leader", "follower"], show=False)
    said = []
    for bad in (lambda: p.record("three"), lambda: c.record("controller"), lambda: c.record(None)):
        with pytest.raises(ValueError) as e:
            bad()
        said.append(str(e.value))
    with pytest.raises(KeyError) as k:
        quiz.check(f"never-asked-{lang}", 1, show=False)
    assert said + [k.value.args[0]] == REFUSALS[lang]
    c.widget = quiz._widget(c)
    _, row, status = c.widget.children
    row.children[-1].click()  # Record with no choice made: the refusal shows under the buttons
    assert status.value == REFUSALS[lang][2]


def test_english_notebooks_keep_english_order() -> None:
    p = quiz.predict("t-en-idle", "How many idle consumers?", unit="idle consumers", show=False)
    p.record(2)
    assert quiz.check("t-en-idle", 1, show=False).message == \
        "You predicted 2 idle consumers; the cluster measured 1 idle consumers. Not this time."


def test_every_korean_quiz_unit_places_its_number() -> None:
    """Each ``unit=`` of a quiz cell has a Korean form with ``{n}`` once (Korean counts after the
    noun: 노는 컨슈머 2개), or is "%" (33%)."""
    import ast

    import nbformat

    from kafkalab import i18n

    units = {}
    for doc in (d for d in i18n.documents() if d.endswith(".ipynb")):
        for cell in nbformat.read(i18n.notebooks_dir() / doc, 4).cells:
            tree = i18n._python(cell.source) if cell.cell_type == "code" else None
            units.update({k.value.value: doc for node in (ast.walk(tree) if tree else ())
                          if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "predict"
                          for k in node.keywords if k.arg == "unit" and isinstance(k.value, ast.Constant)})
    assert "idle consumers" in units and "%" in units, sorted(units)
    i18n._quiz_cache.pop("ko", None)
    shown = {u: i18n.quiz_text(u, "ko") for u in units}
    bad = {u: k for u, k in shown.items() if not (k.count(quiz.PLACEHOLDER) == 1 or k == "%")}
    assert not bad, f"Korean units without {{n}} (translate them as e.g. 파티션 {{n}}개): {bad}"
    assert quiz.counted(2, shown["idle consumers"]) == "노는 컨슈머 2개"
