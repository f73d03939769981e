"""Sphinx extension: draw each ipywidgets output of an executed notebook as a static snapshot.

A book has no kernel, so a widget cannot run; MyST-NB's default is to load the ipywidgets
JavaScript from a CDN and rebuild the widgets from the state saved in the notebook. This lab has
no network, and a page that depends on one breaks offline. Instead, every widget view in a
notebook's outputs is replaced by plain HTML built from the saved widget state (nbclient stores
it in ``metadata.widgets`` while MyST-NB executes the notebook): boxes lay out their children,
sliders, text boxes, dropdowns and buttons are shown disabled with their values, and an
``Output`` widget shows what it captured (the explorer's picture, as an ``<img>``). The saved
state is then dropped from the page.

Sources: ipywidgets widget state and view formats,
https://ipywidgets.readthedocs.io/en/latest/embedding.html ; MyST-NB renders a widget view as a
``<script type="application/vnd.jupyter.widget-view+json">`` raw node (myst_nb.core.render).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from docutils import nodes

VIEW_MIME = "application/vnd.jupyter.widget-view+json"
_VIEW = re.compile(r'<script type="' + re.escape(VIEW_MIME) + r'">(.*?)</script>', re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NOTE = ("A snapshot of this widget as it was when the book was built; "
        "open the notebook in JupyterLab to use it.")


def _model_id(ref: Any) -> str | None:
    """``"IPY_MODEL_<id>"`` -> ``"<id>"`` (how a widget refers to its children)."""
    if isinstance(ref, str) and ref.startswith("IPY_MODEL_"):
        return ref[len("IPY_MODEL_"):]
    return None


def _output_html(output: dict) -> str:
    """One nbformat output (stream, display_data, execute_result, error) as HTML."""
    kind = output.get("output_type")
    if kind == "stream":
        return f'<pre class="widget-snapshot-stream">{html.escape("".join(output.get("text", "")))}</pre>'
    if kind == "error":
        text = _ANSI.sub("", "\n".join(output.get("traceback", [])))
        return f'<pre class="widget-snapshot-error">{html.escape(text)}</pre>'
    data = output.get("data", {})
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            payload = "".join(data[mime]).replace("\n", "")
            return f'<img class="widget-snapshot-image" alt="figure drawn by the widget" src="data:{mime};base64,{payload}">'
    if "image/svg+xml" in data:
        return "".join(data["image/svg+xml"])
    if "text/html" in data:
        return "".join(data["text/html"])
    if "text/plain" in data:
        return f'<pre>{html.escape("".join(data["text/plain"]))}</pre>'
    return ""


def widget_html(model_id: str, state: dict[str, dict], seen: frozenset[str] = frozenset()) -> str:
    """Static HTML for the widget ``model_id`` and its children.

    Args:
        model_id: a key of ``state``.
        state: the ``state`` mapping of an ``application/vnd.jupyter.widget-state+json``
            bundle: model id -> ``{"model_name": ..., "state": {...}}``.
    Returns:
        HTML text (empty for an unknown id).
    """
    model = state.get(model_id)
    if model is None or model_id in seen:
        return ""
    seen = seen | {model_id}
    name = model.get("model_name", "")
    s = model.get("state", {})
    desc = html.escape(str(s.get("description", "") or ""))
    label = f'<span class="widget-snapshot-label">{desc}</span> ' if desc else ""
    if name in {"VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel"}:
        direction = "row" if name == "HBoxModel" else "column"
        inner = "".join(widget_html(c, state, seen) for c in map(_model_id, s.get("children", [])) if c)
        return f'<div class="widget-snapshot-box" style="display:flex;flex-direction:{direction};gap:0.3em">{inner}</div>'
    if name in {"IntSliderModel", "FloatSliderModel"}:
        lo, hi, value = s.get("min", 0), s.get("max", 100), s.get("value", 0)
        return (f'<div>{label}<input type="range" disabled min="{lo}" max="{hi}" value="{value}" '
                f'aria-label="{desc}"> <code>{html.escape(str(value))}</code></div>')
    if name in {"IntTextModel", "FloatTextModel", "BoundedIntTextModel", "BoundedFloatTextModel", "TextModel"}:
        value = s.get("value")
        shown = "" if value is None else html.escape(str(value))
        return f'<div>{label}<input type="text" disabled value="{shown}" aria-label="{desc or "answer"}"></div>'
    if name in {"DropdownModel", "ToggleButtonsModel", "RadioButtonsModel", "SelectModel"}:
        options, index = s.get("_options_labels", []), s.get("index")
        if name == "ToggleButtonsModel":
            buttons = "".join(f'<button type="button" disabled{" aria-pressed=true" if i == index else ""}>'
                              f'{html.escape(str(o))}</button> ' for i, o in enumerate(options))
            return f"<div>{label}{buttons}</div>"
        chosen = "".join(f'<option{" selected" if i == index else ""}>{html.escape(str(o))}</option>'
                         for i, o in enumerate(options))
        return f'<div>{label}<select disabled aria-label="{desc}">{chosen}</select></div>'
    if name == "ButtonModel":
        return f'<div><button type="button" disabled>{desc or "button"}</button></div>'
    if name in {"HTMLModel", "HTMLMathModel"}:
        return f"<div>{label}{s.get('value', '')}</div>"
    if name == "LabelModel":
        return f"<div>{html.escape(str(s.get('value', '')))}</div>"
    if name == "OutputModel":
        return "".join(_output_html(o) for o in s.get("outputs", []))
    return f"<div><code>{html.escape(name)}</code> {label}</div>"


def _snapshot_views(app, doctree: nodes.document) -> None:
    """``doctree-read``: replace each widget view of this notebook by its snapshot, and drop the
    saved widget state and widget JavaScript from the page."""
    env = app.env
    js_files = getattr(env, "nb_metadata", {}).get(env.docname, {}).get("js_files", {})
    bundle = js_files.pop("ipywidgets_state", None)
    for key in [k for k in js_files if k.startswith("ipywidgets_")]:
        del js_files[key]
    state = json.loads(bundle[1]["body"]).get("state", {}) if bundle else {}
    for raw in list(doctree.findall(nodes.raw)):
        match = _VIEW.fullmatch(raw.astext().strip())
        if not match:
            continue
        view = json.loads(match.group(1).replace("<\\/", "</"))
        body = widget_html(view.get("model_id", ""), state)
        if not body:
            body = "<p><em>(a widget: its state was not saved)</em></p>"
        text = f'<div class="widget-snapshot"><p class="widget-snapshot-note">{NOTE}</p>{body}</div>'
        raw.replace_self(nodes.raw("", text, format="html"))


def setup(app):
    app.connect("doctree-read", _snapshot_views)
    app.add_css_file("widget_snapshot.css")  # conf.py: html_static_path = ["static"]
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
