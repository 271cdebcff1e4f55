"""Writing an analysis result: a vector PDF (one page per figure), an interactive HTML page, a JSON.

The HTML pages share one copy of plotly.js (``plotly.min.js``, ~4.8 MB, the copy installed with plotly;
written when missing or different) in the folder ``bundle_dir`` names, which each page loads by a
relative link: ``interp run`` and ``interp reproduce`` write it once at the top of the output folder
(``figures/plotly.min.js``, beside ``figures/<model>/``), not once per model. A page is ~20-300 kB
instead of ~5 MB and still opens offline, as long as the output folder is kept together (copy the
folder, not a page alone).

Each page draws the plotly toolbar (the mode bar) in a strip of its own above each figure, never over the
figure's title, and shows the analysis's definition and descriptions with their inline markup
(````calibration````, ```n```) as code, not as raw backticks.

PDFs go through kaleido, which drives a headless Chrome/Chromium: one browser is started for the life of
the process (its start, ~3 s, is most of an export's cost; each figure after it ~0.3 s), so that every
figure of a run costs that one start. ``start_browser()`` starts it in the background, where a caller
knows early that figures will be drawn (``interp run`` does, before importing torch), so that the start
overlaps the imports and the analysis; a browser that cannot start is said on the first figure, never
waited for. Everything is rendered in memory first and only then written, each file atomically, so a
failure (no Chromium, a full disk) leaves earlier outputs as they were.
"""
from __future__ import annotations

import html
import io
import json
import math
import os
import re
import threading
from pathlib import Path

from .errors import UserError
from .files import atomic_write_bytes, atomic_write_json, atomic_write_text, check_writes

FORMATS = ("pdf", "html", "json", "png")
DEFAULT_FORMATS = ("pdf", "html", "json")  # png (one file per figure, for slides and READMEs) is opt-in
IMAGE_FORMATS = ("pdf", "png")  # the formats drawn in the browser
BROWSER_START_S = 120  # the longest a browser's start is waited for (it takes ~3 s; minutes on a swamped machine)


def parse_formats(spec: str) -> tuple[str, ...]:
    chosen = tuple(f.strip().lower() for f in spec.split(",") if f.strip())
    bad = [f for f in chosen if f not in FORMATS]
    if bad or not chosen:
        raise UserError(f"unknown format {', '.join(bad) or repr(spec)}; choose from {', '.join(FORMATS)}")
    return chosen


def figure_pdf(fig) -> bytes:
    return figure_image(fig, "pdf")


PNG_WIDTH = 900  # a PNG (for a page of the guide, a slide, a README) is drawn at most this wide, at scale 2


def for_png(fig):
    """``fig`` as a PNG draws it: a figure wider than ``PNG_WIDTH`` (a patching map over every position, 1,248 px)
    is drawn at that width, its title wrapped again, so that its labels stay readable where the picture is shown
    in a column of ~760 px (at 1,248 px they came out at 7 px). The PDF and the HTML keep the full width."""
    if (fig.layout.width or 0) <= PNG_WIDTH:
        return fig
    from analyses import style

    narrow = type(fig)(fig)
    lines, joined = [line for line, _ in style.title_lines(fig.layout.title.text)], []
    for line in lines:  # the title's lines as written before wrapping (a <sup> line stays one line)
        if joined and not line.lstrip().startswith("<sup>") and not joined[-1].lstrip().startswith("<sup>"):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    narrow.update_layout(width=PNG_WIDTH, title_text="<br>".join(joined) or None)
    return style.apply(narrow)


class _Browser:
    """One kaleido (a headless Chromium and its page) on an event loop in a thread of its own, opened at once in
    the background and closed when the process exits. ``render`` waits for the opening, raising its error (no
    browser found, a browser that closed at once) rather than waiting on a browser that will never come."""

    def __init__(self):
        import asyncio
        import atexit
        import concurrent.futures

        import kaleido

        self._asyncio, self._timeout = asyncio, concurrent.futures.TimeoutError  # builtin TimeoutError only from 3.11
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="interp-browser", daemon=True).start()
        self._opened = asyncio.run_coroutine_threadsafe(self._open(kaleido), self._loop)
        atexit.register(self.close)

    @staticmethod
    async def _open(kaleido):
        browser = kaleido.Kaleido()  # kaleido's defaults, as kaleido.start_sync_server() opened it
        await browser.open()
        return browser

    def render(self, fig_dict: dict, opts: dict, topojson) -> bytes:
        try:
            browser = self._opened.result(timeout=BROWSER_START_S)
        except self._timeout:
            raise UserError(f"the browser that draws PDFs (Chromium) did not start in {BROWSER_START_S} s; "
                            f"pass --format html,json to skip the PDF") from None
        return self._asyncio.run_coroutine_threadsafe(browser.calc_fig(fig_dict, opts=opts, topojson=topojson),
                                                      self._loop).result()

    def close(self) -> None:
        try:
            browser = self._opened.result(timeout=BROWSER_START_S)
            self._asyncio.run_coroutine_threadsafe(browser.__aexit__(None, None, None), self._loop).result(timeout=30)
        except Exception:  # never opened, or gone: nothing to close
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)


_browser: _Browser | None = None
_browser_lock = threading.Lock()


def start_browser() -> None:
    """Start the browser that draws PDFs and PNGs in the background, if not started yet; returns at once."""
    global _browser
    with _browser_lock:
        if _browser is None:
            _browser = _Browser()


def figure_image(fig, fmt: str) -> bytes:
    # what plotly.io.to_image hands kaleido (its figure dict, size and scale defaults), drawn in the one browser
    from plotly.io._defaults import defaults
    from plotly.io._utils import validate_coerce_fig_to_dict

    fig_dict = validate_coerce_fig_to_dict(for_png(fig) if fmt == "png" else fig, True)
    layout = fig_dict.get("layout", {})
    template = layout.get("template", {}).get("layout", {})
    opts = dict(format=fmt, width=layout.get("width") or template.get("width") or defaults.default_width,
                height=layout.get("height") or template.get("height") or defaults.default_height,
                scale=(2 if fmt == "png" else None) or defaults.default_scale)
    try:
        start_browser()
        return _browser.render(fig_dict, opts, defaults.topojson)
    except UserError:
        raise
    except Exception as err:  # kaleido raises several types when no browser is found
        text = str(err).lower()
        if "chrome" in text or "chromium" in text or "browser" in text:
            raise UserError("PDF export needs Chrome or Chromium: install it (Debian: `apt-get install chromium`) "
                            "or pass --format html,json") from None
        raise


def merged_pdf(figures: dict) -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for fig in figures.values():
        writer.append(io.BytesIO(figure_pdf(fig)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def plotly_bundle() -> tuple[str, bytes]:
    """(file name, contents) of the plotly.js the HTML pages load: the copy installed with plotly."""
    from plotly.offline import get_plotlyjs

    return "plotly.min.js", get_plotlyjs().encode()


def same_file(path: Path, data: bytes) -> bool:
    """Whether a regular file (not a link) at ``path`` holds exactly ``data``."""
    try:
        return not path.is_symlink() and path.is_file() and path.stat().st_size == len(data) and \
            path.read_bytes() == data
    except OSError:
        return False


MODEBAR_STRIP = 30  # pixels above each figure that hold its toolbar


def markup_html(text: str) -> str:
    """``text`` escaped for HTML, with its inline code markup (reST ````x````, Markdown ```x```) shown as code."""
    return re.sub(r"``(.+?)``|`([^`]+)`", lambda m: f"<code>{m.group(1) or m.group(2)}</code>", html.escape(text))


def page_html(title: str, definition: str, figures: dict, numbers: dict, descriptions: dict | None = None,
              bundle: str | None = None) -> str:
    """The page; ``bundle`` is the relative path of the plotly.js it loads (None: the first figure carries
    plotly.js inline, a page that works alone)."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;}"
             "pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}"
             "code{background:#f6f6f6;padding:0 .2em}"
             # the toolbar in a strip of its own above the figure (plotly puts it over the figure's top right
             # corner, where a long title runs)
             f".figure{{margin-top:{MODEBAR_STRIP}px}}"
             f".figure .modebar-container{{top:-{MODEBAR_STRIP}px !important}}</style></head><body>",
             f"<h1>{html.escape(title)}</h1><p>{markup_html(definition)}</p>"]
    if bundle and figures:
        parts.append(f"<script src='{html.escape(bundle)}' charset='utf-8'></script>")
    for i, (name, fig) in enumerate(figures.items()):
        parts.append(f"<h2>{html.escape(name)}</h2><div class='figure'>")
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0 and not bundle), div_id=f"fig-{name}",
                                 config=dict(displaylogo=False)))
        parts.append("</div>")
    headline = {k: v for k, v in numbers.items() if not isinstance(v, (dict, list))}
    parts.append(f"<h2>numbers</h2><pre>{html.escape(json.dumps(headline, indent=2))}</pre>")
    if descriptions:
        parts.append("<dl>" + "".join(f"<dt><code>{html.escape(k)}</code></dt><dd>{markup_html(v)}</dd>"
                                      for k, v in descriptions.items()) + "</dl>")
    parts.append("</body></html>")
    return "".join(parts)


def clean(obj):
    """JSON-safe copy: NaN and inf become null (strict JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def write_result(result, out_dir: str | Path, formats=DEFAULT_FORMATS, context: dict | None = None,
                 bundle_dir: str | Path | None = None) -> list[Path]:
    """Render ``result`` in the chosen formats and write ``<out_dir>/<name>.<fmt>``; return the paths. An HTML
    page loads plotly.js from ``bundle_dir`` (default: ``out_dir``; the output root, where several folders
    share it), written there when missing or different. ``bundle_dir`` is the folder the user named: no level
    below it, ``out_dir`` included, may be a link."""
    out_dir = Path(out_dir)
    bundle_dir = out_dir if bundle_dir is None else Path(bundle_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):  # os.path: no error on a name too long
        raise UserError(f"output path {out_dir} exists and is not a folder")
    context = context or {}
    descriptions = getattr(result, "descriptions", None)  # what each metric key means, where the analysis says
    rendered = {}
    if "json" in formats:
        rendered["json"] = json.dumps(clean(result.record(context)), indent=2) + "\n"
    shared = {}  # the bundle, in bundle_dir
    if "html" in formats:
        bundle, script = plotly_bundle()
        link = Path(os.path.relpath(bundle_dir / bundle, out_dir)).as_posix()
        rendered["html"] = page_html(f"{result.name}: {context.get('run', '')}", result.definition,
                                     result.figures, result.metrics, descriptions, link)
        if not same_file(bundle_dir / bundle, script):
            shared[bundle] = script  # written first: no page is on disk before the bundle it loads
    files = {}
    if "pdf" in formats:
        rendered["pdf"] = merged_pdf(result.figures)
    files.update({f"{result.name}.{fmt}": data for fmt, data in rendered.items()})
    if "png" in formats:
        files.update({f"{result.name}-{name}.png": figure_image(fig, "png") for name, fig in result.figures.items()})
    # The JSON, the record of the result, is written last: a JSON on disk means every file of the
    # result was written (a full disk half way leaves figures without their record, never a record
    # without its figures, which a rerun that reuses results would take as complete).
    # the whole set, before its first byte (no file replaced, then a refusal), from the folder the user named down
    check_writes(bundle_dir, files=[(out_dir / name).relative_to(bundle_dir) for name in files])
    if shared:
        check_writes(bundle_dir, files=list(shared))
    paths = []
    for filename, data in shared.items():
        atomic_write_bytes(bundle_dir / filename, data)
        paths.append(bundle_dir / filename)
    for filename in sorted(files, key=lambda name: name.endswith(".json")):
        path = out_dir / filename
        data = files[filename]
        atomic_write_bytes(path, data if isinstance(data, bytes) else data.encode())
        paths.append(path)
    return paths


__all__ = ["FORMATS", "parse_formats", "start_browser", "write_result", "atomic_write_json", "atomic_write_text"]
