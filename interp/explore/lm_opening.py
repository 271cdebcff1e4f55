"""The explorer on a language model (``interp explore --model MODEL``): served at once, before the model and the
libraries its views need (torch, transformers, Dash: half a minute to import on a busy machine) are loaded.

``serve`` starts the server straight away on an ``Opening``: a page that shows what is being done (a GGUF's first
conversion takes minutes, each of its steps reported by ``models/gguf_model.py``) and turns into the explorer when
the model is open. The explorer itself is ``lm_app``, imported only then.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from html import escape as html_escape

import click

from ..errors import UserError
from ..waits import say

OPENING_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>interp explore: opening {name}</title><link rel="icon" href="data:,"></head>
<body style="font-family: sans-serif; font-size: 15px; margin: 24px">
<h2>interp explore: opening {name}</h2>
<div id="what">starting…</div>
<progress id="bar" style="width: 420px; margin: 10px 0"></progress>
<div id="time" style="color: #555"></div>
<div id="error" style="color: #b00; margin-top: 10px"></div>
<p style="color: #555">The explorer opens here by itself when the model is ready. A GGUF file is converted once
(minutes) and cached; later launches read the cache.</p>
<script>
async function poll() {{
  let s;
  try {{ s = await (await fetch("{path}", {{cache: "no-store"}})).json(); }}
  catch (e) {{ document.getElementById("error").textContent = "the explorer stopped"; return; }}
  if (s.state === "ready") {{ location.reload(); return; }}
  document.getElementById("what").textContent = s.what;
  const bar = document.getElementById("bar");  // moving (no value) until a step of a known number is done
  if (s.total && s.done) {{ bar.max = s.total; bar.value = s.done; }} else {{ bar.removeAttribute("value"); }}
  document.getElementById("time").textContent = (s.total ? "step " + (s.done + 1) + " of " + s.total + "; " : "") +
    Math.round(s.seconds) + " s so far" + (s.total ? " (this step " + Math.round(s.step_seconds) + " s)" : "");
  if (s.state === "failed") {{ document.getElementById("error").textContent = s.error; return; }}
  setTimeout(poll, 500);
}}
poll();
</script></body></html>
"""


class Opening:
    """A language model being opened in a thread (a GGUF's first conversion takes minutes), served meanwhile: the
    server answers at once with a page showing each step (``report``), then, once the model is ready, is the
    explorer itself (the page reloads into it). A WSGI app."""

    PATH = "/_interp/opening"  # the page polls its progress here

    def __init__(self, spec: str, open_model=None):
        self.spec, self.open_model = spec, open_model
        # no number of steps until the conversion says it has some (the libraries' loading is not one of them)
        self.what, self.done, self.total, self.state, self.error = STARTING, 0, None, "opening", None
        self.started = self.step_started = time.monotonic()
        self.app = None  # the explorer's Flask server, once the model is open

    def report(self, what: str, done: int, total: int) -> None:
        if what != self.what:
            self.step_started = time.monotonic()
        # (the terminal has the conversion's own bar); a step alone ("reading x.gguf", 0 of 1) is not counted: the
        # page's "step 1 of 1" would start again at "step 1 of 4" when the conversion's steps begin
        self.what, self.done, self.total = what, done, total if total > 1 else None

    def open(self) -> None:
        """Open the model and build the explorer (in the thread ``start`` runs); a refusal is said in the page."""
        try:
            from models.language_model import open_language_model

            from .common import REFUSED
            from .lm_app import build_app
            from .lm_state import LanguageExplorer
        except Exception as err:  # noqa: BLE001
            self.error, self.state = f"{type(err).__name__}: {err}", "failed"
            return
        try:
            lm = (self.open_model or open_language_model)(self.spec, report=self.report)
            self.app = build_app(LanguageExplorer(lm)).server
            self.state = "ready"
        except REFUSED as err:
            self.error, self.state = str(err), "failed"
        except Exception as err:  # noqa: BLE001  (one line in the page and on the terminal, not a silent thread)
            self.error, self.state = f"{type(err).__name__}: {err}", "failed"

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.open, daemon=True, name=f"opening {self.spec}")
        thread.start()
        return thread

    def status(self) -> dict:
        now = time.monotonic()
        return dict(state=self.state, what=self.what, done=self.done, total=self.total, error=self.error,
                    seconds=now - self.started, step_seconds=now - self.step_started)

    def __call__(self, environ, start_response):
        if self.app is not None and environ.get("PATH_INFO") != self.PATH:
            return self.app(environ, start_response)
        if environ.get("PATH_INFO") == self.PATH:  # (ready: the page's last poll, which reloads it)
            body, kind = json.dumps(self.status()).encode(), "application/json"
        else:  # the page (a request for a view before the explorer exists gets the page too: it says why)
            body = OPENING_PAGE.format(name=html_escape(str(self.spec)), path=self.PATH).encode()
            kind = "text/html; charset=utf-8"
        if environ.get("PATH_INFO") == "/favicon.ico":  # no icon, and no error for the browser to log
            start_response("204 No Content", [("Cache-Control", "no-store")])
            return [b""]
        status = "200 OK" if environ.get("PATH_INFO") in ("/", self.PATH) else "503 Service Unavailable"
        start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store")])
        return [body]


STARTING = "loading the explorer's libraries (torch, transformers, Dash)"
OPEN_WAIT_S = 1.0  # a refusal within this long (no such file, a package not installed) is the command's own error


def serve(spec: str, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Serve the explorer of the language model ``spec`` (anything ``--model`` takes) until interrupted (Ctrl-C stops
    it at once, as the wind-tunnel explorer). The server answers at once: while the model opens (a GGUF's first
    conversion takes minutes) its page shows each step; a refusal that comes at once is the command's error, a later
    one is said in the page and on the terminal, and the server then stops."""
    import signal

    from werkzeug.serving import run_simple

    from .server import stop_at_once
    from ..ports import check_port

    check_port(host, port)
    signal.signal(signal.SIGINT, stop_at_once)
    opening = Opening(spec)
    thread = opening.start()
    thread.join(OPEN_WAIT_S)
    if opening.state == "failed":
        raise UserError(opening.error)

    def stop_when_refused():
        thread.join()
        if opening.state == "failed":
            say(f"error: {opening.error}")
            time.sleep(3)  # the page shows it before the server goes
            os._exit(1)
    threading.Thread(target=stop_when_refused, daemon=True).start()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    click.echo(f"explorer for {spec} at http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    run_simple(host, port, opening, threaded=True)
