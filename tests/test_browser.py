"""The HTML report in a real browser: headless Chromium renders every part, runs the script, fetches nothing.

For each sample: the report is written to disk and loaded from file:// with name resolution
disabled and a network log. The DOM after scripts ran (``--dump-dom``) must hold the charts and
the ranked fixes, and the network log must show no request made by the page. A screenshot per
sample lands in ``artifacts/`` (gitignored) for a person to look at.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_report_html import hostile  # noqa: E402
from test_report_json import ALL_SAMPLES, capture_analysis  # noqa: E402
from xladiag.api import build_report  # noqa: E402
from xladiag.report.html import render_html  # noqa: E402
from xladiag.report.model import Report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
     if shutil.which(n)),
    None,
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not found on PATH (Debian: apt-get install chromium)"
)

_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing resolves: a stray fetch cannot leave the machine
)


def chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked for (not file://), from a Chromium net log.

    Chromium's own background traffic (update checks, time sync) is started by the browser,
    whose requests carry the initiator 'not an origin'; a page's requests carry the page's origin
    ('null' for file://).
    """
    text = netlog.read_text(errors="replace").rstrip()
    if not text.endswith("}"):  # a log cut short by the browser's exit: close it
        text = text.rstrip(",") + "]}"
    log = json.loads(text)
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        url = params.get("url")  # only the job's begin event carries it
        if event["type"] == start_job and url and params.get("initiator") != "not an origin":
            if not url.startswith("file:"):
                urls.append(url)
    return urls


def test_the_network_check_catches_a_page_that_fetches(tmp_path):
    """The check below can fail: a page with an external image and stylesheet is caught."""
    page = tmp_path / "fetches.html"
    page.write_text('<!doctype html><img src="http://example.invalid/x.png">'
                    '<link rel="stylesheet" href="https://cdn.example.invalid/a.css"><p id="ok">x</p>')
    log = tmp_path / "net.json"
    result = chromium(page, tmp_path, f"--log-net-log={log}", "--dump-dom")
    assert 'id="ok"' in result.stdout
    assert sorted(page_requests(log)) == ["http://example.invalid/x.png", "https://cdn.example.invalid/a.css"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_SAMPLES)
def test_report_renders_in_chromium_offline(name, tmp_path):
    report = build_report(capture_analysis(name))
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(report), encoding="utf-8")
    log = tmp_path / "net.json"
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report_{name}.png"
    shot.unlink(missing_ok=True)

    # One browser run: the DOM after scripts, the network log and the screenshot.
    result = chromium(page, tmp_path, f"--log-net-log={log}", "--dump-dom", f"--screenshot={shot}",
                      "--window-size=1280,2200", "--hide-scrollbars")
    dom = result.stdout
    assert "</html>" in dom, result.stderr[-2000:]
    assert page_requests(log) == []

    # The pictures and the verdict.
    assert re.search(r'<svg id="breakdown-bar" class="chart breakdown-bar"', dom)
    assert re.search(r'<svg id="roofline" class="chart roofline"', dom)
    assert 'class="roof"' in dom and 'class="ridge"' in dom
    if report.analysis.measured:
        assert re.search(r'<svg id="timeline" class="chart timeline"', dom)
        assert dom.count('class="lane"') >= report.analysis.num_devices
    else:
        assert 'id="predicted-banner"' in dom and 'id="timeline-missing"' in dom
    # The ranked fixes, one list item per fix, in rank order; the notes (nothing to save) listed apart.
    fixes = [f for f in report.findings if f.severity != "info"]
    notes = [f for f in report.findings if f.severity == "info"]
    if fixes:
        items = re.findall(r'<li class="fix sev-(\w+)" id="fix-(\d+)" data-rule="([^"]*)"', dom)
        assert [int(i) for _, i, _ in items] == list(range(1, len(fixes) + 1))
        assert [r for _, _, r in items] == [f.rule for f in fixes]
        assert [s for s, _, _ in items] == [f.severity for f in fixes]
    else:
        assert 'id="no-findings"' in dom
    assert ('id="notes"' in dom) == bool(notes) and dom.count("<li><b>") >= len(notes)
    # The inline script ran: it wrote the filter count into the page.
    n_rows = dom.count('<tr class="in-step"') + dom.count('<tr class="other-program"')
    assert f"{n_rows} of {n_rows} ops shown" in dom

    assert shot.is_file(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one



def test_markup_in_op_names_does_not_run(tmp_path):
    """An op named like a script stays text in the browser: the page keeps its title and one script."""
    a = hostile(capture_analysis("cpu_jax_train_step"))
    base = build_report(a)
    report = Report(analysis=a, findings=base.findings, headline="<script>document.title='pwned'</script>")
    page = tmp_path / "hostile.html"
    page.write_text(render_html(report), encoding="utf-8")
    dom = chromium(page, tmp_path, "--dump-dom").stdout
    assert "<title>xladiag report: 2000_01_01_00_00_00</title>" in dom
    assert dom.count("<script") == 1
    assert "&lt;script&gt;alert(\"op\")&lt;/script&gt;|x\ny" in dom  # the op name, as text
