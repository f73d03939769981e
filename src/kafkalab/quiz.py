"""Predictions a learner records before a run, graded against what the cluster measured.

A notebook's *Predict* cell calls ``predict(key, question, ...)``: it shows the question with
an input (a number box, or one button per choice) and a "Record" button, and keeps the answer
under ``key``. The *Check* cell, after the run, calls ``check(key, measured)``: it compares the
recorded answer with the measured value and says so ("you predicted 0 duplicates; the cluster
wrote 3"). Without an answer (a learner who skipped it, or ``make test`` running the notebook
under nbval) it shows the measured value and grades nothing, so the notebook still runs from
top to bottom. The notebook's own ``assert`` stays the claim; the quiz is the learner's.

Only the answers of this kernel are kept (in memory): nothing is written anywhere.

In the Korean edition (a notebook under ``notebooks/ko/``, the same code) the question and the
choices are shown in Korean, from the notebook's catalog (``kafkalab.i18n.quiz_text``), and so
are the verdicts and the error messages; the recorded answer and ``check``'s ``measured`` stay
the English choice.

A number is shown with its unit (``unit=``) as the unit's translation says: a translation that
holds ``{n}`` is the whole phrase with ``{n}`` where the number goes, so Korean counts in its own
order, ``"노는 컨슈머 {n}개"`` (msgstr of ``"idle consumers"``, msgctxt ``quiz``) shows
``노는 컨슈머 2개``; a unit without ``{n}`` (every English one) follows the number after a space,
``2 idle consumers``, and ``"%"`` follows it without one, ``33%`` (SI writes ``33 %``; English
and Korean prose write ``33%``). The same form is used in the widget's label, "recorded: ...",
and both sides of the verdict (``counted``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

#: Answers recorded in this kernel, by key.
_ANSWERS: dict[str, "Prediction"] = {}


@dataclass
class Prediction:
    """One question and the learner's answer.

    Attributes:
        key: the name ``check`` finds it by (unique per notebook, e.g. ``"09-consumers"``).
        question: the text shown.
        choices: the allowed answers for a choice question; None for a number.
        unit: what the number counts ("duplicates", "ms"), used in the verdict.
        answer: the recorded answer (a number, or one of ``choices``), None until recorded.
    """

    key: str
    question: str
    choices: tuple[str, ...] | None = None
    unit: str = ""
    answer: Any = None
    widget: Any = field(default=None, repr=False, compare=False)
    lang: str = "en"

    def text(self, english: str) -> str:
        """``english`` (the question or a choice) in this prediction's language."""
        from . import i18n

        return i18n.quiz_text(english, self.lang)

    def record(self, answer: Any) -> None:
        """Record ``answer`` (what the "Record" button does).

        Raises:
            ValueError: None or not one of ``choices``, or not a number for a number question
                (the message in this prediction's language).
        """
        if self.choices is not None:
            if answer is None:  # "Record" pressed before a choice was made
                raise ValueError(_ui(self.lang, "no_choice"))
            if answer not in self.choices:
                raise ValueError(_ui(self.lang, "not_a_choice", answer=answer,
                                     choices=", ".join(self.text(c) for c in self.choices)))
        elif not isinstance(answer, (int, float)) or isinstance(answer, bool):
            raise ValueError(_ui(self.lang, "not_a_number", answer=answer))
        self.answer = answer

    def _ipython_display_(self) -> None:
        """Show nothing more when a Predict cell ends with ``predict(...)``: its widget is on
        screen already, and the dataclass repr below it would only repeat the question. Without
        a widget (``show=False``) the question and the answer are shown as Markdown."""
        if self.widget is None:
            from IPython.display import Markdown, display

            answer = _ui(self.lang, "unanswered") if self.answer is None else _said(self, self.answer)
            display(Markdown(f"**{_ui(self.lang, 'Predict.')}** {self.text(self.question)} "
                             f"({_ui(self.lang, 'answer')}: {answer})"))


def predict(key: str, question: str, choices: Sequence[str] | None = None, unit: str = "",
            show: bool = True) -> Prediction:
    """Ask ``question`` and keep the answer under ``key`` (a fresh, unanswered one each call).

    Args:
        choices: the possible answers (one button each); None asks for a number.
        unit: what a number counts, e.g. "duplicates" (used in the verdict).
        show: display the ipywidgets (False: only the ``Prediction``, e.g. in tests).

    Returns:
        The ``Prediction``; its ``answer`` is set when the learner presses "Record".
    """
    from . import i18n

    p = Prediction(key, question, tuple(choices) if choices is not None else None, unit, lang=i18n.language_of())
    _ANSWERS[key] = p
    if show:
        p.widget = _widget(p)
        from IPython.display import display

        display(p.widget)
    return p


def _widget(p: Prediction):
    import ipywidgets as widgets

    status = widgets.Label("")
    after = ""  # what follows the number box: the unit's words after its number ("개", "%")
    if p.choices is not None:
        box = widgets.ToggleButtons(options=[(p.text(c), c) for c in p.choices], value=None)
    else:
        before, after = _unit_parts(p.text(p.unit))
        if not after.startswith(" "):  # a placeholder or "%": the unit's words around the box
            label = before.strip() or _ui(p.lang, "answer")
        else:  # the unit, then the box, as before: "records [4]"
            label, after = after.strip(), ""
        box = widgets.FloatText(value=None, description=label, style={"description_width": "initial"})
    button = widgets.Button(description=_ui(p.lang, "Record"), button_style="info")

    def on_click(_):
        value = box.value
        if p.choices is None and value is not None and float(value).is_integer():
            value = int(value)
        try:
            p.record(value)
            status.value = f"{_ui(p.lang, 'recorded')}: {_said(p, value)}"
        except ValueError as e:
            status.value = str(e)

    button.on_click(on_click)
    return widgets.VBox([widgets.HTML(f"<b>{_ui(p.lang, 'Predict.')}</b> {p.text(p.question)}"),
                         widgets.HBox([box, widgets.Label(after.strip()), button]), status])


#: The quiz's own words in the Korean edition (the questions and units come from the notebooks'
#: catalogs): 한다체 as the notebooks, "예측." and "확인." as their Predict and Check paragraphs
#: begin, 기록 as the button; no particle after a shown value (its last sound varies).
_KO = {
    "Predict.": "예측.", "Check.": "확인.", "answer": "답", "Record": "기록", "recorded": "예측을 기록했다",
    "measured_only": "클러스터 측정값: {shown}. (기록한 예측이 없다.)",
    "verdict": "예측: {said}, 클러스터 측정값: {shown}. ",
    "Right.": "맞았다.", "Not this time.": "이번에는 틀렸다.", "within": " (차이가 {tolerance:g} 이내면 맞은 것으로 본다.)",
    "not_a_choice": "선택지에 없는 답이다: {answer!r}. 고를 수 있는 답: {choices}",
    "not_a_number": "숫자로 답해야 한다. 입력한 값: {answer!r}",
    "no_choice": "아직 고른 답이 없다: 하나를 고른 뒤 기록을 누르자.",
    "no_prediction": "예측을 찾을 수 없다: {key!r}. 먼저 그 예측 셀(quiz.predict)을 실행하자.",
    "unanswered": "아직 없다",
}
_EN = {
    "measured_only": "The cluster measured {shown}. (No prediction recorded.)",
    "verdict": "You predicted {said}; the cluster measured {shown}. ",
    "within": " (Within {tolerance:g} counts as right.)",
    "not_a_choice": "{answer!r} is not one of {choices}",
    "not_a_number": "a number is expected, not {answer!r}",
    "no_choice": "no answer chosen yet: choose one, then press Record",
    "no_prediction": "no prediction {key!r}: run its Predict cell first",
    "unanswered": "None",
}


def _ui(lang: str, key: str, /, **values: Any) -> str:
    text = (_KO if lang == "ko" else _EN).get(key, key)
    return text.format(**values) if values else text


#: Where a unit's translation puts the number (see the module docstring).
PLACEHOLDER = "{n}"


def _unit_parts(unit: str) -> tuple[str, str]:
    """``unit`` (as shown, translated) cut around its number: ``("노는 컨슈머 ", "개")`` for
    ``"노는 컨슈머 {n}개"``, ``("", "%")`` for ``"%"``, ``("", " records")`` for ``"records"``,
    ``("", "")`` for no unit."""
    if PLACEHOLDER in unit:
        before, _, after = unit.partition(PLACEHOLDER)
        return before, after
    return ("", unit) if unit in ("", "%") else ("", " " + unit)


def counted(number: Any, unit: str) -> str:
    """``number`` with ``unit`` (already in the shown language) in that language's order:
    ``counted(2, "노는 컨슈머 {n}개") == "노는 컨슈머 2개"``, ``counted(3, "records") ==
    "3 records"``, ``counted(33, "%") == "33%"``, ``counted(7, "") == "7"``."""
    before, after = _unit_parts(unit)
    return f"{before}{number}{after}"


@dataclass
class Verdict:
    """``check``'s answer: ``right`` is None when nothing was predicted."""

    key: str
    measured: Any
    answer: Any
    right: bool | None
    message: str

    lang: str = "en"

    def _repr_markdown_(self) -> str:
        return f"**{_ui(self.lang, 'Check.')}** {self.message}"


def _said(p: Prediction, value: Any) -> str:
    """A number with its unit (``3 duplicates``, ``중복 레코드 3개``), a choice in quotes (``"it goes"``)."""
    return f'"{p.text(value)}"' if p.choices is not None else counted(value, p.text(p.unit) if p.unit else "")


def check(key: str, measured: Any, tolerance: float = 0.0, show: bool = True) -> Verdict:
    """Compare the answer recorded under ``key`` with ``measured``.

    Args:
        measured: what the cluster showed (a number, or one of the choices).
        tolerance: for a number, how far from ``measured`` still counts as right (absolute, in
            the question's unit); the verdict says so when it is not 0.
        show: display the verdict as Markdown.

    Returns:
        A ``Verdict``. ``right`` is None (and the message gives the measured value) when no
        answer was recorded, e.g. when ``make test`` runs the notebook.

    Raises:
        KeyError: no ``predict`` call made ``key`` in this kernel (the message in the notebook's
            language, ``i18n.language_of()``).
    """
    if key not in _ANSWERS:
        from . import i18n

        raise KeyError(_ui(i18n.language_of(), "no_prediction", key=key))
    p = _ANSWERS[key]
    shown = _said(p, measured)
    if p.answer is None:
        v = Verdict(key, measured, None, None, _ui(p.lang, "measured_only", shown=shown), p.lang)
    else:
        if p.choices is not None:
            right = p.answer == measured
        else:
            right = abs(float(p.answer) - float(measured)) <= tolerance
        said = _said(p, p.answer)
        within = _ui(p.lang, "within", tolerance=tolerance) if p.choices is None and tolerance else ""
        v = Verdict(key, measured, p.answer, right,
                    _ui(p.lang, "verdict", said=said, shown=shown)
                    + _ui(p.lang, "Right." if right else "Not this time.") + within, p.lang)
    if show:
        from IPython.display import display

        display(v)
    return v
