"""Sphinx + MyST-NB configuration of the rendered book (``make book``).

The source folder is ``notebooks/`` itself; this folder holds only the configuration, the book's
front page (``index.md``) and a small extension (``widget_snapshot.py``). Every notebook is
executed against the live cluster while the book is built, in memory: the executed copies are
written under the build folder (``build/jupyter_execute``), never back into ``notebooks/``.

The book has two editions, built by two runs of ``sphinx-build`` with this configuration: the
English one from ``notebooks/`` (``build/book/``) and the Korean one from ``notebooks/ko/``
(``build/book/ko/``, generated from the catalogs by ``kafkalab.i18n``). Every page carries a
link to the same page in the other edition (``static/lang_switch.js``).

Environment:
    KAFKALAB_BOOK_LANG: ``en`` (default) or ``ko``: the edition; with ``ko`` the source folder
        must be ``notebooks/ko`` (Sphinx's own labels, e.g. the search page, are then Korean).
    KAFKALAB_BOOK_NOTEBOOKS: comma-separated notebook names without ``.ipynb`` (e.g.
        ``00_cluster_tour,07_ordering``); when set, only these notebooks are read and executed
        (the browser test builds such a small book). Markdown pages are always included.
    KAFKALAB_PORT_BASE: the cluster the notebooks reach (the kernels inherit this process's
        environment).
    KAFKALAB_BOOK_CACHE: a folder for a jupyter-cache (MyST-NB ``nb_execution_mode = "cache"``):
        a notebook whose code cells (and their metadata, and the kernel) hash as one already in
        the cache is not executed again, its cached outputs are used. The Korean notebooks' code
        cells are the English ones with only their comments translated (``kafkalab.i18n``): the
        cache hashes code without comments (``i18n.code_tokens``) and a cell merged from the cache
        keeps its own source, so a Korean build that shares the English build's cache executes
        nothing and shows its Korean comments. Unset (``make book``): every notebook is executed
        on every build.

Sources: MyST-NB configuration, https://myst-nb.readthedocs.io/en/latest/configuration.html
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LANG = os.environ.get("KAFKALAB_BOOK_LANG", "en").strip() or "en"
if LANG not in ("en", "ko"):
    raise ValueError(f"KAFKALAB_BOOK_LANG={LANG!r}: the book's editions are 'en' and 'ko'")
SOURCE = HERE.parent if LANG == "en" else HERE.parent / LANG
sys.path.insert(0, str(HERE))
language = LANG

project = "kafkalab"
author = "kafkalab"
copyright = "kafkalab authors, Apache-2.0"

extensions = ["myst_nb", "widget_snapshot"]
root_doc = "_book/index"
exclude_patterns = ["**.ipynb_checkpoints", "_book/root", "ko", "locale"]

only = os.environ.get("KAFKALAB_BOOK_NOTEBOOKS", "").strip()
if only:
    wanted = {name.strip().removesuffix(".ipynb") for name in only.split(",") if name.strip()}
    found = {p.relative_to(SOURCE).with_suffix("").as_posix() for p in SOURCE.rglob("*.ipynb")
             if ".ipynb_checkpoints" not in p.parts}
    missing = wanted - found
    if missing:
        raise ValueError(f"KAFKALAB_BOOK_NOTEBOOKS names notebooks that do not exist: {sorted(missing)}")
    exclude_patterns += [f"{name}.ipynb" for name in sorted(found - wanted)]

# Execution: every notebook, every build, against the live cluster; a failing cell fails the build.
# With KAFKALAB_BOOK_CACHE, a notebook already executed into that cache is not executed again.
nb_execution_mode = "force"
_cache = os.environ.get("KAFKALAB_BOOK_CACHE", "").strip()
if _cache:
    nb_execution_mode = "cache"
    nb_execution_cache_path = _cache

    def _cache_by_code_without_comments() -> None:
        """jupyter-cache (``JupyterCacheBase``) hashes code cells by their source and, on a match,
        puts the cached cells, sources included, into the notebook. Here the hash reads each cell
        as its tokens without comments, and the merged cells keep the notebook's own sources, so
        the two editions share one execution (the code that ran is the same, token for token)."""
        import copy

        from jupyter_cache.cache.main import JupyterCacheBase

        from kafkalab.i18n import code_tokens

        if getattr(JupyterCacheBase, "_kafkalab_patched", False):
            return
        hashed, merge = JupyterCacheBase.create_hashed_notebook, JupyterCacheBase.merge_match_into_notebook

        def create_hashed_notebook(self, nb, *args, **kwargs):
            nb_for_hash = copy.deepcopy(nb)
            for cell in nb_for_hash.cells:
                if cell.cell_type == "code":
                    cell.source = repr(code_tokens(cell.source))
            _, key = hashed(self, nb_for_hash, *args, **kwargs)
            return hashed(self, nb, *args, **kwargs)[0], key

        def merge_match_into_notebook(self, nb, *args, **kwargs):
            pk, merged = merge(self, nb, *args, **kwargs)
            own = [c.source for c in nb.cells if c.cell_type == "code"]
            for cell, source in zip((c for c in merged.cells if c.cell_type == "code"), own):
                cell.source = source
            return pk, merged

        JupyterCacheBase.create_hashed_notebook = create_hashed_notebook
        JupyterCacheBase.merge_match_into_notebook = merge_match_into_notebook
        JupyterCacheBase._kafkalab_patched = True

    _cache_by_code_without_comments()
nb_execution_timeout = 300  # seconds per cell, as nbval's --nbval-cell-timeout in make test
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_in_temp = False  # cwd = notebooks/, as under nbval and JupyterLab
# Widgets are drawn as static snapshots (widget_snapshot.py): no widget JavaScript from a CDN.
nb_ipywidgets_js = {}
nb_merge_streams = True

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 4  # Markdown links to "#section-title" anchors resolve

html_theme = "sphinx_book_theme"
html_title = ("kafkalab: Kafka delivery semantics, measured" if LANG == "en"
              else "kafkalab: 측정으로 확인하는 Kafka 전달 보장")
html_extra_path = [str(HERE / "root")]  # build/book/index.html: a redirect to the front page
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "use_repository_button": False,
}
if LANG == "ko":
    # The theme's Korean for "By {author}" puts the particle first ("으로 kafkalab"): the
    # footer keeps the copyright line only.
    html_theme_options["footer_content_items"] = ["copyright.html"]
html_show_sourcelink = False
html_copy_source = False
html_static_path = [str(HERE / "static")]  # widget_snapshot.css, lang_switch.js
html_js_files = ["lang_switch.js"]
# pydata-sphinx-theme logs a console error when no colour mode is set ("Got invalid theme mode").
html_context = {"default_mode": "light"}
html_favicon = str(HERE / "favicon.svg")  # without one, the browser's request for /favicon.ico fails


def _unlink_outside_targets(app, doctree, docname) -> None:
    """A Markdown link MyST could not resolve to a page of the book (a file outside it, e.g. the
    articles in ``../shared/seeds/``) would be rendered as a dead ``#../path`` anchor: show its
    text instead (``doctree-resolved``). Sphinx ids never hold ``/`` or ``.``, so such a
    ``refid`` is never a real anchor."""
    from docutils import nodes

    for ref in list(doctree.findall(nodes.reference)):
        refid = ref.get("refid", "")
        if refid and ("/" in refid or "." in refid):
            ref.replace_self(nodes.inline("", "", *ref.children, classes=["outside-book"]))


def setup(app):
    app.connect("doctree-resolved", _unlink_outside_targets)
