"""The report in a real browser: headless Chromium loads the file offline, plotly draws every
figure, nothing logs an error, no network request leaves the page, and the table sorts.

Driven over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 in, fd 4 out, JSON
messages ending in NUL), so console errors, exceptions and requests are seen exactly. Skipped
when Chromium is absent (CI installs the Debian package `chromium`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpuperf.reports.html import write_report

pytestmark = pytest.mark.browser

CHROMIUM = next(
    (p for p in (os.environ.get("CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                 shutil.which("chromium-browser"), shutil.which("google-chrome"))
     if p and Path(p).exists()),
    None,
)  # fmt: skip
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--proxy-server=127.0.0.1:9",  # any request that escapes fails instead of reaching out
]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)"
)


class Browser:
    """The smallest CDP client: send a command, wait for its answer, keep every event."""

    def __init__(self, user_dir: Path) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()

        # copies numbered 10+, so that moving them onto 3 and 4 cannot clobber one another
        keep_r, keep_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_r, from_w))

        def wire() -> None:  # child: the protocol wants our pipes on fds 3 and 4
            os.dup2(keep_r, 3)
            os.dup2(keep_w, 4)
            for fd in (keep_r, keep_w, to_r, from_w, self._to_w, self._from_r):
                if fd > 4:
                    os.close(fd)

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={user_dir}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire, close_fds=False,  # close_fds would shut 3 and 4 after wire()
        )  # fmt: skip
        for fd in (to_r, from_w, keep_r, keep_w):
            os.close(fd)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:  # fmt: skip
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_r], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._from_r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.send("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_w)
        os.close(self._from_r)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


def _open(b: Browser, url: str) -> tuple[str, str]:
    target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        b.send(f"{domain}.enable", session=s)
    b.send("Page.navigate", {"url": url}, session=s)
    return target, s


def _eval(b: Browser, session: str, expr: str) -> Any:
    r = b.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session)
    if "exceptionDetails" in r:
        raise AssertionError(f"page script failed: {r['exceptionDetails']}")
    return r["result"].get("value")


DRAWN = """(() => { const figs = [...document.querySelectorAll('.plotly-graph-div')];
  return figs.map(f => [f.id, f.querySelectorAll('svg.main-svg').length]); })()"""


def _wait_drawn(b: Browser, session: str, timeout: float = 30.0) -> list[list]:
    deadline = time.monotonic() + timeout
    figs: list[list] = []
    while time.monotonic() < deadline:
        if _eval(b, session, "document.readyState") == "complete":
            figs = _eval(b, session, DRAWN) or []
            if figs and all(n > 0 for _, n in figs):
                return figs
        time.sleep(0.2)
    return figs


def _problems(events: list[dict[str, Any]], session: str) -> list[str]:
    out = []
    for e in events:
        if e.get("sessionId") != session:
            continue
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"exception: {d.get('exception', {}).get('description') or d['text']}")
        elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            out.append(f"console.{p['type']}: {[a.get('value') for a in p['args']]}")
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            url = p["request"]["url"]
            if not url.startswith(LOCAL_SCHEMES):
                out.append(f"network request: {url}")
        elif method == "Network.loadingFailed":
            out.append(f"load failed: {p.get('errorText')}")
    return out


def _prediction(gpu: str, scale: float = 1.0) -> Any:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
    from test_html_report import synthetic  # the hand-made prediction of the unit tests

    return synthetic(gpu, scale)


@needs_chromium
def test_single_gpu_report_draws_offline_without_errors(browser, tmp_path):
    p = _prediction("h100-sxm5-80gb")
    measured = pd.DataFrame({"name": ["L0/attn/qkv", "L1/attn/qkv"], "measured_ms": [5.0, 5.0]})
    path = write_report(p, tmp_path / "one.html", measured=measured)
    _, s = _open(browser, path.resolve().as_uri())
    figs = _wait_drawn(browser, s)
    ids = [f for f, _ in figs]
    assert ids == ["fig-roofline", "fig-step", "fig-kind", "fig-position", "fig-memory"], figs
    assert all(n > 0 for _, n in figs), f"plotly did not draw: {figs}"
    assert _problems(browser.events, s) == []
    # the inline sort script: click "predicted (ms)" of the folded table twice -> ascending
    order = _eval(browser, s, """(() => {
        const t = document.getElementById('ops-0');
        const th = [...t.tHead.rows[0].cells].find(c => c.textContent === 'predicted (ms)');
        th.click(); th.click();
        const col = th.cellIndex;
        return [...t.tBodies[0].rows].map(r => parseFloat(r.cells[col].dataset.v));
    })()""")  # fmt: skip
    assert order == sorted(order) and len(order) == 4


@needs_chromium
def test_several_gpus_report_draws_and_switches(browser, tmp_path):
    preds = [_prediction("h100-sxm5-80gb"), _prediction("a100-sxm4-80gb", 2.0)]
    path = write_report(preds, tmp_path / "cmp.html")
    _, s = _open(browser, path.resolve().as_uri())
    figs = _wait_drawn(browser, s)
    assert "fig-compare" in [f for f, _ in figs] and all(n > 0 for _, n in figs), figs
    # the roofline's GPU buttons: press the second, the A100's bf16 ceiling shows
    clicked = _eval(browser, s, """(() => {
        const buttons = document.querySelectorAll('#fig-roofline .updatemenu-button');
        buttons[1].dispatchEvent(new MouseEvent('click', {bubbles: true}));
        return buttons.length;
    })()""")  # fmt: skip
    assert clicked == 2
    time.sleep(0.5)
    shown = _eval(browser, s, """document.getElementById('fig-roofline').data
        .filter(t => t.visible === true).map(t => t.name)""")  # fmt: skip
    assert "bf16 312 TFLOP/s" in shown and "bf16 989 TFLOP/s" not in shown
    assert _problems(browser.events, s) == []


@needs_chromium
def test_serve_pages_draw_offline_without_errors(browser, tmp_path):
    """gpuperf serve's pages: a run (batch and KV cache over time, latency distributions) and an
    SLO plan (the Pareto frontier) draw every figure offline, with no error."""
    from gpuperf import api
    from gpuperf.reports.html_serve import write_run_report, write_serve_report

    rep = api.serve("llama3.2-1b", gpu="h100", rate=20.0, requests=80)
    plan = api.serve_plan("llama3.2-1b", "ttft=2s,tpot=100ms", gpu="h100", gpus=2, requests=40)
    for path, want in (
        (write_run_report(rep, tmp_path / "run.html"), ["fig-time", "fig-latency"]),
        (write_serve_report(plan, tmp_path / "plan.html"), ["fig-frontier"]),
    ):
        _, s = _open(browser, path.resolve().as_uri())
        figs = _wait_drawn(browser, s)
        assert [f for f, _ in figs] == want and all(n > 0 for _, n in figs), figs
        assert _problems(browser.events, s) == []


@needs_chromium
def test_problems_are_seen(browser, tmp_path):
    """The checks above can fail: a page with an error and a remote image is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<img src="https://example.invalid/x.png"><script>nope();</script>')
    _, s = _open(browser, bad.resolve().as_uri())
    deadline = time.monotonic() + 15
    found = ""
    while time.monotonic() < deadline and not ("nope" in found and "example.invalid" in found):
        _eval(browser, s, "1")  # pumps the event queue
        time.sleep(0.2)
        found = " ".join(_problems(browser.events, s))
    assert "nope is not defined" in found and "example.invalid" in found


def test_the_browser_found_runs():
    """Says in the test log whether the browser tests ran (CI may lack Chromium), and that the
    browser found is one that starts (a broken install would skip nothing and fail obscurely)."""
    if CHROMIUM is None:
        pytest.skip("headless Chromium not installed: browser tests skipped")
    out = subprocess.run([CHROMIUM, "--headless=new", "--version"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and re.search(r"Chrom\w* \d+\.", out.stdout), out
