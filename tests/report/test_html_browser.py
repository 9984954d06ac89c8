"""The HTML report opened in a real browser (headless Chromium), offline.

Checks that the page logs nothing to the console (no script error), that every chart drew an
SVG with content (a line, marker or bar), and takes a screenshot (kept under the test's tmp
folder).  Skipped where Chromium is not installed (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

pytest.importorskip("plotly")

from report_fixtures import report_inputs  # noqa: E402, F401 (a fixture)
from servesim.report.html import write_report  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0",
         # offline for real: no name resolves and every connection goes to a closed local port, so a
         # page that fetched anything (a CDN script, a font) would log a failed load to the console
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>")


def open_in_chromium(page, tmp_path, screenshot):
    """Load ``page`` (file://), let its scripts run, and return (DOM after scripts, stderr log)."""
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000",
           "--window-size=1400,2400", f"--screenshot={screenshot}", "--dump-dom", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def chart_segments(dom: str) -> dict[str, str]:
    """Each Plotly chart's DOM, by div id."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div id="([^"]+)" class="plotly-graph-div', dom)]
    ends = [s for s, _ in starts[1:]] + [len(dom)]
    return {name: dom[s:e] for (s, name), e in zip(starts, ends)}


def has_content(segment: str) -> bool:
    """An SVG chart with at least one drawn line, marker or bar."""
    if 'class="main-svg"' not in segment:
        return False
    line = re.search(r'<path class="js-line" d="M[^"]{3,}"', segment)
    marker = re.search(r'<path class="point" [^>]*d="M[^"]{3,}"', segment) or re.search(
        r'<path class="point" d="M[^"]{3,}"', segment)
    bar = re.search(r'<g class="point"><path d="M[^"]*[VH][^"]*"', segment)  # a bar of non-zero size
    return bool(line or marker or bar)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_report_renders_in_chromium_offline(report_inputs, tmp_path):
    page = write_report([report_inputs["sglang"], report_inputs["vllm"], report_inputs["sweep"]],
                        tmp_path / "report.html")
    expected = re.findall(r'<div id="([^"]+)" class="plotly-graph-div', page.read_text())
    assert len(expected) >= 18  # comparison, sweep, and both runs' charts
    shot = tmp_path / "report.png"
    dom, log = open_in_chromium(page, tmp_path, shot)

    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert console == [], console[:5]  # no script error, no warning
    errors = re.search(r"<div id=\"script-errors\"[^>]*>(.*?)</div>", dom, re.S)
    assert errors is not None and errors.group(1).strip() == ""

    charts = chart_segments(dom)
    assert sorted(charts) == sorted(expected)
    empty = [name for name, seg in charts.items() if not has_content(seg)]
    assert empty == [], f"charts drawn without content: {empty}"

    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
