"""The report a person opens offline: reports/index.html (every ledger row, its per-seed values, no network) and
`make plots` (DVC's plots page with the Vega libraries from vl-convert-python instead of a CDN), checked in headless
Chromium with every host name unresolvable: every chart drawn, nothing requested outside file://, a screenshot
that is not blank."""
import csv
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from itervision.reporting.html_report import build, seeds_svg

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (make setup installs the Debian "
                                                              "package where apt-get runs as root)")


class Claims(HTMLParser):
    """The report's ledger rows: test id -> {field: text}."""

    def __init__(self):
        super().__init__()
        self.rows, self.current, self.dt, self.field = {}, None, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "details" and "data-test" in attrs:
            self.current = self.rows.setdefault(attrs["data-test"], {"svg": 0})
        elif tag == "svg" and self.current is not None:
            self.current["svg"] += 1
        elif tag in ("dt", "dd"):
            self.field = tag

    def handle_endtag(self, tag):
        if tag == "details":
            self.current = None
        if tag in ("dt", "dd"):
            self.field = None

    def handle_data(self, data):
        if self.current is None or self.field is None:
            return
        if self.field == "dt":
            self.dt = data
        else:
            self.current[self.dt] = self.current.get(self.dt, "") + data


def test_a_claims_chart_draws_its_seeds_interval_and_published_value():
    svg = seeds_svg({"per_seed": [-1.0, -0.5, 0.2], "mean": -0.43, "half_width": 0.9, "published": [0.2, 0.7],
                     "null": 0.0, "unit": "points"})
    assert svg.count('class="seed"') == 3 and svg.count('class="published"') == 3  # a band and two lines
    assert 'class="interval"' in svg and 'class="mean"' in svg
    xs = [float(x) for x in re.findall(r'class="seed" cx="([\d.]+)"', svg)]
    assert xs == sorted(xs) and 10 <= min(xs) and max(xs) <= 350  # in order, inside the plot


def test_the_report_is_one_file_that_names_what_it_reports(tmp_path):
    """A page from fixed inputs: header fields, one row per ledger entry, the environments with a warning when they
    differ, no reference to anything outside the page but relative links to local tables."""
    from datetime import datetime, timezone

    entry = {"test_id": "t1", "claim": "A beats B", "reference": "x/y/z", "source": "s", "fidelity": "proxy",
             "claimed_setting": "c", "tested_setting": "t", "published": "1", "estimate": "0.5 ± 0.1 (n 5)",
             "per_seed": "0.4 0.5 0.6", "test": "direction", "p_holm": "0.01", "p_size_holm": "", "indicators": "",
             "verdict": "holds at the proxy", "outcome": "holds", "group": "decided", "reason": "r",
             "seeds_needed_80pct": "", "where": "metrics/x.md",
             "plot": {"per_seed": [0.4, 0.5, 0.6], "mean": 0.5, "half_width": 0.1, "published": [1.0], "null": 0.0}}
    ledger = {"documents": {"doc": {"family": {"t1": {"p": 0.005, "p_holm": 0.01, "family": "Holm over 1"}},
                                    "entries": [entry, {**entry, "test_id": "t2", "plot": None}]}}}
    envs = [{"torch": "2.14.1", "runs": ["a"]}, {"torch": "2.15.0", "runs": ["b"]}]
    page = build(tmp_path, "cpu", ledger, {"doc": {"proxy": {"tests": 2, "claims": 2, "holds at the proxy": 2}}},
                 {"doc": {"environments": envs}}, now=datetime(2026, 12, 5, tzinfo=timezone.utc))
    parsed = Claims()
    parsed.feed(page)
    assert set(parsed.rows) == {"t1", "t2"} and parsed.rows["t1"]["svg"] == 1 and parsed.rows["t2"]["svg"] == 0
    assert parsed.rows["t1"]["per seed"] == "0.4 0.5 0.6" and parsed.rows["t1"]["family"] == "Holm over 1"
    assert "Scale</b> cpu" in page and "2026-12-05 00:00 UTC" in page and "dvc.lock digest" in page
    assert "come from 2 different environments" in page
    assert not re.search(r"""(src|href)=["']https?://""", page) and 'href="#table-metrics-x"' in page
    assert re.search(r'data-test="t1" data-group="decided"[^>]*><summary>[^<]*<span class="verdict g-decided-holds"',
                     page) and 'id="hide-untestable"' in page  # the row's colour; the filter
    assert page.index("<h2>Findings</h2>") < page.index("<h2>Claims ledger</h2>") and "<code>t1</code>" in page


@pytest.mark.slow
def test_the_built_report_lists_every_ledger_row_with_its_per_seed_values(built_repo):
    page = (built_repo / "reports/index.html").read_text()
    parsed = Claims()
    parsed.feed(page)
    with open(built_repo / "metrics/claims.csv") as f:
        ledger = list(csv.DictReader(f))
    assert set(parsed.rows) == {r["test_id"] for r in ledger}
    for r in ledger:
        # the CSV guards a text starting with '-' with an apostrophe (reporting/escape.csv_cell); the page shows it bare
        assert parsed.rows[r["test_id"]].get("per seed", "") == r["per_seed"].removeprefix("'"), r["test_id"]
        assert (parsed.rows[r["test_id"]]["svg"] == 1) == (r["kind"] == "statistical")


def chromium(url: str, tmp_path, *extra) -> tuple[str, dict]:
    """Headless Chromium with every host name unresolvable: (the DOM after the scripts ran, the net log)."""
    netlog = tmp_path / "net.json"
    r = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=15000",
                        f"--log-net-log={netlog}", "--net-log-capture-mode=Default", *extra, url],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, json.loads(netlog.read_text()) if netlog.exists() and netlog.stat().st_size else {}


def requested_urls(netlog: dict) -> set:
    """Every URL the page asked the network stack for. The browser's own requests (clock sync, component updates,
    the spelling dictionary) start with no initiator origin ("not an origin"); a file:// page's requests carry its
    opaque origin ("null"). file:// loads themselves never reach the network stack."""
    kinds = {v: k for k, v in netlog.get("constants", {}).get("logEventTypes", {}).items()}
    return {e["params"]["url"] for e in netlog.get("events", [])
            if kinds.get(e["type"]) == "URL_REQUEST_START_JOB" and "url" in (e.get("params") or {})
            and e["params"].get("initiator") != "not an origin"}


@needs_chromium
def test_the_network_check_sees_what_a_page_requests_and_not_the_browsers_own_traffic(tmp_path):
    """The control of the offline test below: a page that loads an image and a script from the network is caught,
    and the same page without them requests nothing."""
    online, offline = tmp_path / "online.html", tmp_path / "offline.html"
    online.write_text('<img src="http://example.com/x.png"><script src="https://cdn.example.org/vega.js"></script>')
    offline.write_text("<p>nothing to fetch</p>")
    assert requested_urls(chromium(online.as_uri(), tmp_path, "--dump-dom")[1]) == {
        "http://example.com/x.png", "https://cdn.example.org/vega.js"}
    assert requested_urls(chromium(offline.as_uri(), tmp_path, "--dump-dom")[1]) == set()


def not_blank(png) -> float:
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("L"), dtype=np.float64)
    return float(pixels.std())


@needs_chromium
@pytest.mark.slow
def test_dvc_plots_and_the_report_draw_everything_offline(built_repo, tmp_path):
    # the tiny repository has no venv of its own: VENV= points make at this checkout's (else `make plots` would
    # build a second venv there, from the network, before it draws anything)
    subprocess.run(["make", "plots", f"VENV={Path(sys.executable).parent.parent}"], cwd=built_repo, check=True,
                   capture_output=True)
    page = built_repo / "dvc_plots/index.html"
    charts = page.read_text().count("vegaEmbed(")
    dom, netlog = chromium(page.as_uri(), tmp_path, "--dump-dom")
    drawn = len(re.findall(r'<(svg|canvas)[^>]*class="marks"', dom))
    assert charts >= 8 and drawn == charts, (charts, drawn)
    assert not requested_urls(netlog), sorted(requested_urls(netlog))[:5]
    shot = tmp_path / "plots.png"
    chromium(page.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=1200,1600")
    assert not_blank(shot) > 10

    report = built_repo / "reports/index.html"
    dom, netlog = chromium(report.as_uri(), tmp_path, "--dump-dom")
    rows = len(json.loads((built_repo / "metrics/ledger.json").read_text())["documents"]["recursive"]["entries"])
    assert dom.count('<details class="claim"') >= rows and dom.count("<img") >= 4
    assert not requested_urls(netlog), sorted(requested_urls(netlog))[:5]
    shot = tmp_path / "report.png"
    chromium(report.as_uri(), tmp_path, f"--screenshot={shot}", "--window-size=412,900")  # a phone's width
    assert not_blank(shot) > 10


@needs_chromium
@pytest.mark.slow
def test_the_report_reads_at_a_glance_in_a_browser(built_repo, tmp_path):
    """Headless Chromium at a phone's width (412 px): verdict colours and their legend, the filter hides the rows
    not testable at this scale (state from the link's fragment), a figure opens full size, and nothing overflows
    sideways (the page records its laid-out width)."""
    report = built_repo / "reports/index.html"
    url = report.as_uri() + "#hide-untestable-open-figure-1"
    dom, _ = chromium(url, tmp_path, "--dump-dom", "--window-size=1200,900")
    rows = re.findall(r'<details class="claim"[^>]*>', dom)
    untestable = [r for r in rows if 'data-group="untestable"' in r]
    assert untestable and all(" hidden" in r for r in untestable)
    assert any(" hidden" not in r for r in rows)  # the others stay
    assert re.search(r'class="verdict g-(decided|inconclusive|not_exercised)', dom) and 'class="legend"' in dom
    assert re.search(r'<figure id="figure-1" class="full"', dom)
    assert dom.index(">Findings<") < dom.index(">Claims ledger<")
    # headless Chromium opens no window narrower than 500 px: the page goes in a 412 px frame, whose laid-out
    # width the page records on its <html> and the harness copies out
    harness = built_repo / "reports" / "phone.html"
    harness.write_text('<!DOCTYPE html><html><body style="margin:0"><iframe id="f" src="index.html" width="412" '
                       'height="900" style="border:0"></iframe><pre id="w"></pre><script>document.getElementById("f")'
                       '.addEventListener("load", e => { const d = e.target.contentDocument.documentElement.dataset; '
                       'document.getElementById("w").textContent = d.scrollWidth + " " + d.viewWidth; });</script>'
                       "</body></html>")
    try:
        dom, _ = chromium(harness.as_uri(), tmp_path, "--dump-dom", "--allow-file-access-from-files")
    finally:
        harness.unlink()
    widths = re.search(r'<pre id="w">(\d+) (\d+)</pre>', dom)
    assert widths and int(widths.group(1)) <= int(widths.group(2)) == 412, widths and widths.groups()


@pytest.mark.slow
def test_table2_time_ratios_come_from_the_interleaved_measurement(built_repo):
    """Stage timing_recursive measured every main model in one process, round-robin in chunks; Table 2 prints its
    ratio per model (n = the rounds kept) beside the across-runs one, and says how each was measured."""
    timing = json.loads((built_repo / "metrics/recursive/timing_interleaved.json").read_text())
    agg = json.loads((built_repo / "metrics/recursive/aggregate.json").read_text())
    main = list(agg["efficiency"])
    assert set(timing["ratio"]) == set(main) - {timing["baseline"]}
    kept = timing["rounds"] - timing["skipped"]
    for m, r in timing["ratio"].items():
        assert r["n"] == kept == len(r["per_round"]) and all(v > 0 for v in r["per_round"])
        assert timing["seconds"][m][0] > 0 and len(timing["seconds"][m]) == timing["rounds"]
    with open(built_repo / "metrics/recursive/tables/table2_efficiency.csv") as f:
        rows = list(csv.DictReader(f))
    col = "time ratio to baseline, interleaved (n rounds)"
    assert col in rows[0] and all(r[col] for r in rows)
    text = (built_repo / "metrics/recursive/tables/table2_efficiency.md").read_text()
    assert "round-robin in one process" in text


@pytest.mark.slow
def test_table4_wall_clock_comes_from_the_interleaved_measurement(built_repo):
    """Stage timing_sparseformer timed every SparseFormer model's exits in one process, round-robin; the aggregate's
    latency per exit (Table 4 and the latency frontier) is that measurement's median, Table 4 prints each exit's
    latency over the target model's last exit per round (n = the rounds kept) and says how it was measured."""
    timing = json.loads((built_repo / "metrics/sparseformer/timing_interleaved.json").read_text())
    agg = json.loads((built_repo / "metrics/sparseformer/aggregate.json").read_text())
    d = agg["datasets"][timing["dataset"]]
    assert timing["kind"] == "inference" and set(timing["per_exit"]) == set(d["models"])
    kept = timing["rounds"] - timing["skipped"]
    base = timing["per_exit"][timing["baseline"]][-1]["latency_ratio"]
    assert base["per_round"] == [1.0] * kept  # the baseline's last exit over itself, every round
    for m, rows in timing["per_exit"].items():
        model = d["models"][m]
        assert model["timing_source"] == "interleaved" and len(rows) == len(model["top1"])
        assert model["latency_ms"] == [r["latency_ms"] for r in rows]
        assert all(r["latency_ratio"]["n"] == kept and r["latency_ms"] > 0 for r in rows)
        assert len(timing["per_round"][m]["latency_ms"]) == timing["rounds"]
    with open(built_repo / f"metrics/sparseformer/tables/table4_wallclock_{timing['dataset']}.csv") as f:
        rows = list(csv.DictReader(f))
    col = f"latency / {timing['baseline']} (mean ± 95% CI)"
    assert col in rows[0] and all(r[col] not in ("", "—") for r in rows)
    text = (built_repo / f"metrics/sparseformer/tables/table4_wallclock_{timing['dataset']}.md").read_text()
    assert "Inference measured as one (stage timing_sparseformer" in text
