"""The rendered book and JupyterLab, in a real browser (headless Chromium driven by Playwright).

Debian's Chromium (``/usr/bin/chromium``) is the browser: Playwright comes from PyPI, its own
browser download is never used. Without Chromium every test here is skipped, with the reason.

``test_book_pages`` opens every page of a built book over HTTP: no console error, no failed
request, every image decoded (non-zero natural size), every same-site link loads and every
``#anchor`` it names exists. The book is the one in ``KAFKALAB_BOOK_DIR`` (e.g. ``build/book``
after ``make book``), or else a small one built here: the same Sphinx configuration
(``notebooks/_book``) restricted to ``BOOK_NOTEBOOKS``, executed against the live cluster.

The book has two editions (English in the root, Korean under ``ko/``), linked page to page:
the crawl reaches both. ``test_book_korean_edition`` checks that the Korean pages are Korean and
that Hangul is drawn with a real glyph (a CJK font: Debian ``fonts-noto-cjk``), not as the empty
boxes a browser draws for characters no font has; ``test_jupyterlab_korean_notebook`` does the
same for a Korean notebook opened in JupyterLab.

``test_jupyterlab_assignment_explorer`` starts JupyterLab on ``notebooks/``, opens notebook 01,
runs the cells the explorer needs (a click and Ctrl+Enter on each), moves the explorer's
``consumers`` slider with the keyboard, presses "Run on the cluster" and checks that a new
picture, one row taller, replaced the old.

Screenshots go to ``build/screenshots/`` (git ignores ``/build/``).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin

import nbformat
import pytest

from kafkalab import optional

ROOT = Path(__file__).resolve().parents[1]
#: Debian's /usr/bin/chromium, Ubuntu's snap, Homebrew's cask, or $KAFKALAB_CHROMIUM (kafkalab.optional).
CHROMIUM = optional.chromium()
SCREENSHOTS = ROOT / "build" / "screenshots"
BIN = Path(sys.executable).parent
#: The small book: notebook 00 (the tour, with a figure of the listeners; nbval runs every
#: notebook, the book test checks what the book does with one).
BOOK_NOTEBOOKS = ("00_cluster_tour",)
#: nbval's per-cell timeout in ``make test`` (s); the book build has the same per cell.
CELL_TIMEOUT_S = 300
#: Bound of one test here (s), above pytest.ini's 600 s: a book build or notebook 01's explorer
#: on a loaded 2-core machine (measured: 5-6 min at a load average of 20).
TEST_TIMEOUT_S = 1800

pytestmark = [pytest.mark.cluster]
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[book]')")


# --- the browser ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Debian Chromium (``--no-sandbox``: the tests may run as root). Without one: skipped
    with the note saying how to install it, except on CI, where that is an error."""
    if not optional.available("chromium"):
        pytest.skip(optional.note([optional.EXTRAS[0]]))
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"], headless=True)
        try:
            yield b
        finally:
            b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shot(page, name: str, **kwargs) -> Path:
    """A screenshot of ``page`` (or of a locator given as ``element=``) to build/screenshots."""
    path = SCREENSHOTS / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    element = kwargs.pop("element", None)
    (element or page).screenshot(path=str(path), **kwargs)
    return path


# --- the book -------------------------------------------------------------------------------

def _build_small_book(out: Path) -> Path:
    """``sphinx-build`` with the book's configuration, only ``BOOK_NOTEBOOKS`` executed (against
    the cluster of this process's ``KAFKALAB_PORT_BASE``). Returns the HTML folder.

    The two editions share one jupyter-cache (``KAFKALAB_BOOK_CACHE``, notebooks/_book/conf.py):
    the English build executes each notebook once, and the Korean build, whose code cells are
    byte-identical, takes those outputs instead of executing the same code again (nbval runs
    the Korean notebooks it tests). The cache ends with one record per notebook, or the Korean
    code cells differ from the English ones.

    Raises:
        AssertionError: the build failed (a failing cell fails it), with its last output lines;
            or the Korean build executed a notebook again.
    """
    from jupyter_cache import get_cache

    shutil.rmtree(out, ignore_errors=True)
    html = out / "html"
    cache = out / "jupyter_cache"
    timeout = (TEST_TIMEOUT_S - 300) / 2  # each edition's build; each cell has its own CELL_TIMEOUT_S
    for lang, source, target in (("en", ROOT / "notebooks", html), ("ko", ROOT / "notebooks" / "ko", html / "ko")):
        env = {**os.environ, "KAFKALAB_BOOK_NOTEBOOKS": ",".join(BOOK_NOTEBOOKS), "KAFKALAB_BOOK_LANG": lang,
               "KAFKALAB_BOOK_CACHE": str(cache)}
        cmd = [str(BIN / "sphinx-build"), "-b", "html", "-E", "-q", "-d", str(out / "doctrees" / lang),
               "-c", str(ROOT / "notebooks" / "_book"), str(source), str(target)]
        cp = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        assert cp.returncode == 0, f"the small book ({lang}) did not build:\n{(cp.stdout + cp.stderr)[-6000:]}"
    records = get_cache(str(cache)).list_cache_records()
    assert len(records) == len(BOOK_NOTEBOOKS), (
        f"{len(records)} executions cached for {len(BOOK_NOTEBOOKS)} notebooks: the Korean build executed "
        f"again, so its code cells differ from the English ones ({[r.uri for r in records]})")
    return html


@pytest.fixture(scope="module")
def book_dir() -> Path:
    """The HTML folder of the book under test: ``KAFKALAB_BOOK_DIR``, or a small book built now."""
    given = os.environ.get("KAFKALAB_BOOK_DIR")
    if given:
        path = Path(given).resolve()
        assert (path / "index.html").is_file(), f"KAFKALAB_BOOK_DIR={given} has no index.html: run make book first"
        return path
    return _build_small_book(ROOT / "build" / "test-book")


@pytest.fixture(scope="module")
def book_url(book_dir: Path) -> Iterator[str]:
    """The book served over HTTP on 127.0.0.1 (a free port) while the tests of this module run."""
    handler = functools.partial(_QuietHandler, directory=str(book_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


#: Reads every image after making lazy ones load: (src, naturalWidth, naturalHeight, in a cell output).
_IMAGES_JS = """() => Array.from(document.images).map(i => [
    i.currentSrc.slice(0, 120), i.naturalWidth, i.naturalHeight, !!i.closest('.cell_output, .widget-snapshot')])"""
_LINKS_JS = """() => Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"""
_IDS_JS = """() => Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.getAttribute('name'))"""


_REFRESH = re.compile(r'<meta http-equiv="refresh" content="\d+; url=([^"]+)"')


def _page_name(url: str, base: str) -> str:
    rel = url[len(base):] or "index.html"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", rel.removesuffix(".html")) or "index"


#: How often a page is loaded again when the host's network changed under the browser.
NETWORK_CHANGED_RETRIES = 3


def _network_changed(problems: list[str], mark: int) -> bool:
    """Chromium aborts every request in flight with ``net::ERR_NETWORK_CHANGED`` when an address
    of the host changes (e.g. Docker creating a bridge for a compose cluster): not a fault of the
    book. True when the problems recorded since ``mark`` include one."""
    return any("ERR_NETWORK_CHANGED" in p for p in problems[mark:])


def _reload(page, url: str, problems: list[str], mark: int):
    """Load ``url`` again, at most ``NETWORK_CHANGED_RETRIES`` times, while its problems are due to
    a network change (they are dropped before each try; those of the last try stay)."""
    response = None
    for _ in range(NETWORK_CHANGED_RETRIES):
        del problems[mark:]
        response = page.goto(url, wait_until="load")
        if not _network_changed(problems, mark):
            break
    return response


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_book_pages(browser, book_url: str) -> None:
    """Every page of the book reachable from its front page, in Chromium: no console error, no
    failed request or HTTP error, every image decoded with a non-zero size, every same-site link
    loads and every anchor it names exists; a screenshot of each page."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(120_000)  # ms; a loaded machine serves and renders slowly
    page = context.new_page()
    problems: list[str] = []
    current = {"url": ""}
    page.on("console", lambda m: m.type == "error" and problems.append(f"{current['url']}: console error: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"{current['url']}: page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"{current['url']}: request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{current['url']}: HTTP {r.status} for {r.url}"))

    ids: dict[str, set[str]] = {}          # page URL -> ids and names on it
    anchors: list[tuple[str, str, str]] = []  # (from page, target page, fragment)
    queue, seen = deque([book_url]), {book_url}
    figures = 0
    others: set[str] = set()               # same-site files that are not pages
    try:
        while queue:
            url = queue.popleft()
            current["url"] = url
            try:
                with urllib.request.urlopen(url, timeout=30) as r:  # the HTML as served, before any redirect
                    redirect = _REFRESH.search(r.read().decode("utf-8", "replace"))
            except urllib.error.URLError as exc:
                problems.append(f"{url} did not load: {exc}")
                continue
            mark = len(problems)
            response = page.goto(url, wait_until="load")
            if response is None or not response.ok:
                problems.append(f"{url} did not load: {response and response.status}")
                continue
            if redirect:  # build/book/index.html sends the reader to the front page
                url = urljoin(url, redirect.group(1))
                page.wait_for_url(url, wait_until="load")
                if url in seen:
                    continue
                seen.add(url)
            if _network_changed(problems, mark):
                _reload(page, url, problems, mark)
            current["url"] = url
            page.evaluate("() => document.querySelectorAll('img[loading=lazy]').forEach(i => i.loading = 'eager')")
            page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=60_000)
            for src, width, height, in_output in page.evaluate(_IMAGES_JS):
                if width == 0 or height == 0:
                    problems.append(f"{url}: image {src} has natural size {width}x{height}")
                figures += in_output
            ids[url] = set(page.evaluate(_IDS_JS))
            _shot(page, f"book/{_page_name(url, book_url)}")
            for href in page.evaluate(_LINKS_JS):
                if not href.startswith(book_url):
                    continue  # another site, or mailto:/javascript: (this test is offline)
                target, fragment = urldefrag(href)
                if fragment:
                    anchors.append((url, target, unquote(fragment)))
                if target.endswith((".html", "/")):
                    if target not in seen:
                        seen.add(target)
                        queue.append(target)
                else:
                    others.add(target)
        for target in sorted(others):
            try:
                with urllib.request.urlopen(target, timeout=30) as r:
                    r.read(1)
            except urllib.error.URLError as exc:
                problems.append(f"link to {target} is broken: {exc}")
        for source, target, fragment in anchors:
            if target in ids and fragment not in ids[target]:
                problems.append(f"{source}: link to {target}#{fragment}: no such anchor")
    finally:
        context.close()
    pages = [u for u in ids if not u.endswith(("genindex.html", "search.html"))]
    print(f"book: {len(ids)} pages, {figures} figures in outputs, {len(anchors)} anchor links, {len(others)} files")
    assert not problems, f"{len(problems)} problems in the book:\n" + "\n".join(problems[:80])
    notebooks = [u for u in pages if re.search(r"/\d\d_[^/]+\.html$", u)]
    assert notebooks, f"no notebook page is reachable from the front page: {sorted(ids)}"
    assert figures > 0, "no figure in any notebook output: the notebooks were not executed into the book"


#: Draws one character in the font of an element, on a canvas: Hangul in a CJK font gives two
#: different pictures for two syllables; without one, both (and an unassigned code point, U+0378)
#: are the same empty box. Returns what it saw.
_GLYPHS_JS = """el => {
    const family = getComputedStyle(el).fontFamily;
    const c = document.createElement('canvas'); c.width = 96; c.height = 96;
    const g = c.getContext('2d'); g.font = `48px ${family}`; g.fillStyle = '#000';
    const draw = ch => { g.clearRect(0, 0, 96, 96); g.fillText(ch, 8, 64);
        return Array.from(g.getImageData(0, 0, 96, 96).data).join(','); };
    const blank = draw(''), han = draw('한'), geul = draw('글'), none = draw('\\u0378');
    return {family, inked: han !== blank, distinct: han !== geul, notBox: han !== none};
}"""


def _hangul_drawn(page, selector: str) -> dict:
    """The first element matching ``selector`` that holds Hangul, checked with ``_GLYPHS_JS``."""
    el = page.locator(selector).filter(has_text=re.compile("[가-힣]")).first
    el.wait_for(timeout=120_000)
    return el.evaluate(_GLYPHS_JS)


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_book_korean_edition(browser, book_url: str) -> None:
    """The Korean front page and a Korean notebook page: ``<html lang="ko">``, Korean text drawn
    with real glyphs, code comments in Korean with the outputs of the one shared execution, and
    the edition switch leads to the same page in English and back."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(120_000)
    page = context.new_page()
    try:
        page.goto(f"{book_url}_book/index.html", wait_until="load")
        switch = page.locator("a.kafkalab-lang-switch")
        assert switch.inner_text().strip() == "한국어", "the English front page has no link to the Korean edition"
        switch.click()
        page.wait_for_url(f"{book_url}ko/_book/index.html", wait_until="load")
        assert page.evaluate("() => document.documentElement.lang") == "ko"
        for url in (f"{book_url}ko/_book/index.html", f"{book_url}ko/{BOOK_NOTEBOOKS[0]}.html"):
            page.goto(url, wait_until="load")
            text = page.locator("article").inner_text()
            assert len(re.findall("[가-힣]", text)) > 100, f"{url}: the page is not in Korean:\n{text[:500]}"
            seen = _hangul_drawn(page, "article p")
            _shot(page, f"book-ko/{_page_name(url, book_url)}")
            assert not optional.available("cjk-font") or seen["inked"] and seen["distinct"] and seen["notBox"], \
                f"{url}: Hangul is drawn as empty boxes, no CJK font (Debian: apt-get install fonts-noto-cjk): {seen}"
            if url.endswith(f"{BOOK_NOTEBOOKS[0]}.html"):  # code with its comments in Korean, outputs from the shared run
                code = page.locator("div.cell_input").all_inner_texts()
                assert any(re.search(r"#\s*[^\n]*[가-힣]", c) for c in code), f"{url}: no code comment is in Korean"
                assert page.locator("div.cell_output").count() > 0, f"{url}: the Korean page shows no outputs"
        page.locator("a.kafkalab-lang-switch").click()
        page.wait_for_url(f"{book_url}{BOOK_NOTEBOOKS[0]}.html", wait_until="load")
        assert page.evaluate("() => document.documentElement.lang").startswith("en")
    finally:
        context.close()


# --- JupyterLab -----------------------------------------------------------------------------

#: JupyterLab settings for the test: never save the notebook (its outputs must not land in
#: notebooks/), render every cell (no windowing, so the DOM holds them all), ask about no news.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


def _api(base: str, token: str, path: str, method: str = "GET") -> object:
    req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body else None


def _kernels(base: str, token: str) -> list[dict]:
    """The server's kernels (``GET /api/kernels``); ``[]`` while a kernel is being started, when
    Jupyter Server 2.21.1 answers 500: its model of a starting kernel reads ``last_activity``
    before the start has set it (TraitError: expected a datetime, not None; seen in CI)."""
    try:
        return _api(base, token, "/api/kernels")
    except urllib.error.HTTPError as exc:
        if exc.code == 500:
            return []
        raise


def _wait(condition, timeout_s: float, what: str, interval_s: float = 0.5):
    """Call ``condition()`` until it returns a true value (returned), at most ``timeout_s``.

    Raises:
        TimeoutError: naming ``what``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


@pytest.fixture
def jupyterlab(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``jupyter lab`` from this venv on notebooks/ (127.0.0.1, a free port, a token, no browser,
    ``--allow-root`` as root), with this process's environment (``KAFKALAB_PORT_BASE``: the
    kernels reach the same cluster). Yields (base URL, token); shuts kernels and server down at
    the end, also on failure."""
    settings = tmp_path / "settings"
    for name, value in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [str(BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={ROOT / 'notebooks'}", f"--LabApp.user_settings_dir={settings}",
           f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"]
    if os.getuid() == 0:
        cmd.append("--allow-root")
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    log = (tmp_path / "jupyter.log").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {proc.returncode}:\n{(tmp_path / 'jupyter.log').read_text()[-4000:]}")
        try:
            return _api(base, token, "/api/status") is not None
        except (urllib.error.URLError, ConnectionError):
            return False

    try:
        _wait(ready, 120, f"jupyter lab to answer on {base}/api/status")
        yield base, token
    finally:
        try:
            for kernel in _api(base, token, "/api/kernels") or []:
                _api(base, token, f"/api/kernels/{kernel['id']}", method="DELETE")
            _api(base, token, "/api/shutdown", method="POST")
            proc.wait(timeout=60)
        except Exception:  # the server is already gone or hangs: end it and its process group
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
        log.close()


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_jupyterlab_korean_notebook(browser, jupyterlab: tuple[str, str]) -> None:
    """A Korean notebook opens in JupyterLab with its markdown in Korean, drawn with real glyphs,
    and the same code cells as the English one."""
    base, token = jupyterlab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(120_000)
    page = context.new_page()
    try:
        page.goto(f"{base}/lab/tree/ko/00_cluster_tour.ipynb?token={token}", wait_until="load")
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=120_000)
        seen = _hangul_drawn(page, ".jp-Notebook .jp-MarkdownCell .jp-RenderedMarkdown p")
        _shot(page, "jupyterlab/notebook-00-ko")
        assert not optional.available("cjk-font") or seen["inked"] and seen["distinct"] and seen["notBox"], \
            f"Hangul is drawn as empty boxes in JupyterLab, no CJK font (Debian: apt-get install fonts-noto-cjk): {seen}"
        english = nbformat.read(ROOT / "notebooks" / "00_cluster_tour.ipynb", 4)
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        assert cells.count() == sum(c.cell_type == "code" for c in english.cells)
    finally:
        context.close()


#: Input prompts of the code cells: "[12]:" done, "[*]:" queued or running, "[ ]:" not run.
_PROMPTS_JS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt'))
    .map(p => p.textContent.trim())"""
_EXPLORER_IMG_JS = """() => { const i = document.querySelector('.widget-interact .jp-OutputArea-output img');
    return i ? [i.src, i.naturalWidth, i.naturalHeight] : null; }"""


def _explorer_cells(notebook: Path) -> list[int]:
    """Positions, among the code cells of notebook 01, of the cells the explorer needs: the
    set-up (the first code cell), the two member programs it runs (``%%program member`` and
    ``%%program kip848_member``) and the explorer itself (``assignment_explorer(``)."""
    code = [c.source for c in nbformat.read(notebook, 4).cells if c.cell_type == "code"]
    wanted = [0] + [i for i, src in enumerate(code)
                    if src.startswith(("%%program member\n", "%%program kip848_member\n")) or "assignment_explorer(" in src]
    assert len(wanted) == 4, f"notebook 01 should have the set-up, two member programs and the explorer: {wanted}"
    return wanted


@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_jupyterlab_assignment_explorer(browser, jupyterlab: tuple[str, str]) -> None:
    """Notebook 01 in JupyterLab: the cells the explorer needs (set-up, the two member programs,
    the explorer), each selected with a click and run with Ctrl+Enter, complete; the explorer's
    ``consumers`` slider moved from 3 to 4 with the keyboard and "Run on the cluster" pressed
    give a new picture with one member row more (a taller image); the notebook file is not
    modified. (Run All of notebook 01 is ``make test``'s nbval run of it.)"""
    base, token = jupyterlab
    notebook = ROOT / "notebooks" / "01_partition_assignment.ipynb"
    before_file = hashlib.sha256(notebook.read_bytes()).hexdigest()
    needed = _explorer_cells(notebook)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(120_000)  # ms
    page = context.new_page()
    try:
        page.goto(f"{base}/lab/tree/{notebook.name}?token={token}", wait_until="load")
        page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=120_000)
        _wait(lambda: [k for k in _kernels(base, token) if k["execution_state"] == "idle"],
              120, "the notebook's kernel to start and be idle")
        prompts = page.evaluate(_PROMPTS_JS)
        assert prompts and all(x == "[ ]:" for x in prompts), f"notebook 01 should open with no cell run: {prompts}"

        cells = page.locator(".jp-Notebook .jp-CodeCell")
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                              has_text="Traceback")
        for k in needed:
            cell = cells.nth(k)
            cell.scroll_into_view_if_needed()
            cell.locator(".jp-InputArea-prompt").click()  # selects the cell (command mode)
            page.keyboard.press("Control+Enter")          # Run Selected Cell and Do Not Advance

            def done(k=k):
                p = page.evaluate(_PROMPTS_JS)[k]
                return p if re.fullmatch(r"\[\d+\]:", p) else None

            _wait(done, CELL_TIMEOUT_S, f"code cell {k} of notebook 01 to run", 0.5)
            assert errors.count() == 0, f"code cell {k} of notebook 01 failed:\n" + "\n".join(errors.all_inner_texts())[-4000:]

        explorer = page.locator(".widget-interact")
        explorer.scroll_into_view_if_needed()
        old = page.evaluate(_EXPLORER_IMG_JS)
        assert old and old[1] > 0 and old[2] > 0, f"the explorer shows no picture after its cell ran: {old}"
        _shot(page, "jupyterlab/explorer-before", element=explorer)

        slider = explorer.locator(".widget-slider", has=page.locator(".widget-label", has_text=re.compile(r"^consumers$")))
        readout = slider.locator(".widget-readout")
        assert readout.inner_text().strip() == "3", f"the explorer starts with 3 consumers, not {readout.inner_text()}"
        slider.locator(".noUi-handle").focus()
        page.keyboard.press("ArrowRight")
        _wait(lambda: readout.inner_text().strip() == "4", 30, "the consumers slider to read 4")
        explorer.locator("button", has_text="Run on the cluster").click()

        new = page.wait_for_function(
            """old => { const i = document.querySelector('.widget-interact .jp-OutputArea-output img');
                return i && i.complete && i.src !== old && i.naturalWidth > 0 ? [i.src, i.naturalWidth, i.naturalHeight] : null; }""",
            arg=old[0], timeout=CELL_TIMEOUT_S * 1000, polling=500).json_value()
        assert new[0] != old[0] and new[1] > 0, "pressing Run on the cluster gave no new picture"
        assert new[2] > old[2], \
            f"4 consumers are drawn as 4 rows, so the picture grows: {old[1]}x{old[2]} -> {new[1]}x{new[2]}"
        _shot(page, "jupyterlab/explorer-after", element=explorer)
        _shot(page, "jupyterlab/notebook-01")
    finally:
        context.close()
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before_file, \
        "the test changed notebooks/01_partition_assignment.ipynb (JupyterLab saved it)"
