"""The HTML report in a real headless browser (Debian's chromium): benchmarks/report_in_browser.py
renders the page of a small records folder, with a failure whose error is one long unbroken
line, in a 1400-px window and checks with the browser's layout that it does not scroll
sideways, that every figure decodes, that the headline comes first and opens with its forest
plot before any table. Skipped, with its reason, where no chromium is installed."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_report import PNG_SIGNATURE, RECORDS, record
from test_report_intervals import seed_records
from test_utilisation import with_flops

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "report_in_browser.py"
CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium installed (Debian: apt-get install chromium)")
# a traceback's path: nothing to break the line at
LONG_ERROR = "exit code 1: /" + "very_long_folder_name/" * 40 + "worker.py"


def _script():
    spec = importlib.util.spec_from_file_location("report_in_browser", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about 15 s: three browser runs and eight figures
def test_the_report_fits_a_1400_px_window(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", tmp_path / "out"
    runs.mkdir()
    # the widest page: every ok record with the FLOP columns (utilisation and MFU) too
    records = [with_flops(copy.deepcopy(rec), 0.2, 0.3) if rec["status"] == "ok" else rec
               for rec in RECORDS]
    records.append(record("paddle-launch", "paddle", 2, status="failed", error=LONG_ERROR))
    # 3 seeds on CPU devices: the headline's shared cores and the change section show too
    records += seed_records()
    for i, rec in enumerate(records):
        (runs / f"{i}.json").write_text(json.dumps(rec))
    done = subprocess.run([sys.executable, str(SCRIPT), str(runs), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith(": ok"), done.stdout
    # 4 per spec, and a forest plot per spec whose headline has a row (spec B's has none)
    assert "24/24 figures decoded" in done.stdout
    page = (out / "report.html").read_text()
    forests = [i for i in range(len(page)) if page.startswith('alt="Headline: each', i)]
    assert len(forests) == 4 and forests[-1] < page.index("<table>")
    assert LONG_ERROR in page and "MFU %" in page and "closest to the limit" in page
    assert "<h2>Did N devices change the result</h2>" in page
    assert ">shared cores</th>" in page and ">vs 1-dev, same threads</th>" in page
    for shot in ("first-screen.png", "whole-page.png"):
        png = (out / shot).read_bytes()
        assert png.startswith(PNG_SIGNATURE)
        assert int.from_bytes(png[16:20], "big") == 1400  # the IHDR width: the window's


@pytest.mark.slow  # 15 s on 2 cores (measured): headless chromium renders and measures it
def test_the_check_sees_a_page_that_scrolls_sideways(tmp_path: Path) -> None:
    """Not a vacuous pass: the same probe measures a page 3000 px wide as too wide."""
    page = tmp_path / "wide.html"
    page.write_text("<!DOCTYPE html><html><head><title>t</title></head><body>"
                    "<h2>Headline</h2><div style='width: 3000px'>wide</div></body></html>")
    script = _script()
    found = script.measure(CHROMIUM, page)
    assert found["scrollWidth"] >= 3000 and found["clientWidth"] <= 1400
    assert script.problems(found) == [
        f"page is {found['scrollWidth']} px wide, wider than the {found['clientWidth']}-px "
        "window: it scrolls sideways"]


def test_the_check_sees_a_headline_table_that_scrolls_in_its_box_or_starts_too_low(
        tmp_path: Path) -> None:
    """The page itself fits, but the headline's table scrolls inside its box and ends below
    the first screen: both are named."""
    page = tmp_path / "low.html"
    page.write_text("<!DOCTYPE html><html><head><title>t</title></head><body>"
                    "<h2>Headline</h2><p style='height: 1200px'>long notes</p>"
                    "<div class='scroll' style='overflow-x: auto; max-width: 100%'>"
                    "<table><tr><td style='min-width: 3000px'>wide</td></tr></table></div>"
                    "<h2>Next</h2><div class='scroll'>not the headline's</div></body></html>")
    script = _script()
    found = script.measure(CHROMIUM, page)
    assert found["scrollWidth"] <= found["clientWidth"] and len(found["headline"]) == 1
    box = found["headline"][0]
    assert script.problems(found) == [
        f"headline table 1 is {box['scrollWidth']} px wide in its {box['clientWidth']}-px box: "
        "it scrolls sideways",
        f"the headline's first table ends {box['bottom']:.0f} px down, below the first "
        "1000-px screen"]


def test_the_check_sees_a_forest_plot_after_the_tables_or_below_the_first_screen(
        tmp_path: Path) -> None:
    """The headline's figure comes after its table and ends below the first screen: both are
    named, and the table's own position no longer is (the plot is the answer on screen)."""
    page = tmp_path / "late.html"
    page.write_text("<!DOCTYPE html><html><head><title>t</title></head><body>"
                    "<h2>Headline</h2><div class='scroll'><table><tr><td>1</td></tr></table>"
                    "</div><p style='height: 1200px'>long notes</p>"
                    "<figure style='height: 100px'>the forest</figure>"
                    "<h2>Next</h2><figure>not the headline's</figure></body></html>")
    script = _script()
    found = script.measure(CHROMIUM, page)
    assert len(found["figures"]) == 1 and len(found["headline"]) == 1
    assert script.problems(found) == [
        "the headline's forest plot does not come before its tables",
        f"the headline's forest plot ends {found['figures'][0]['bottom']:.0f} px down, below "
        "the first 1000-px screen"]
