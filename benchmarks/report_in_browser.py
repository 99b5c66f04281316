"""Renders the HTML report of a records folder in a real headless browser (Debian's chromium)
in a 1400x1000 window, and checks with the browser's own layout that the page fits the window
(no horizontal scrolling), that every figure decodes, that the headline comes first, that it
opens with its forest plot before any table and that the plot fits the first screen whole (its
bottom within the window's height; without a plot, the headline's first table must), and that
no headline table scrolls inside its box.
Writes the page, a screenshot of the first screen and one of the whole page to look at.

    python benchmarks/report_in_browser.py [RECORDS] [--out DIR] [--chromium PATH]

RECORDS defaults to results/reference/runs. Prints what the browser measured and 'ok' (exit 0)
or what is wrong (exit 1); exit 2 when there is no browser or no records.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from parbench.results.html_report import write_report
from parbench.results.records import check_folder

WINDOW = (1400, 1000)
TALLEST = 16000  # px: a whole-page screenshot taller than this is cut (chromium's own limits)
# Written into the title once everything (the inline PNGs too) is laid out; --dump-dom shows it.
PROBE = """<script>
window.addEventListener("load", () => {
  const root = document.documentElement;
  const images = [...document.images];
  document.title = JSON.stringify({
    scrollWidth: root.scrollWidth, clientWidth: root.clientWidth,
    scrollHeight: root.scrollHeight, images: images.length,
    decoded: images.filter(i => i.complete && i.naturalWidth > 0).length,
    headings: [...document.querySelectorAll("h2")].map(h => h.textContent),
    headline: headlineBoxes("div.scroll").map(box => ({
      scrollWidth: box.scrollWidth, clientWidth: box.clientWidth,
      bottom: box.getBoundingClientRect().bottom + window.scrollY})),
    figures: headlineBoxes("figure").map(figure => ({
      bottom: figure.getBoundingClientRect().bottom + window.scrollY,
      beforeTables: headlineBoxes("div.scroll").every(box => after(figure, box))}))});
});
const after = (a, b) => a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING;
// the elements between the first h2 (the headline) and the next one
function headlineBoxes(selector) {
  const [start, end] = document.querySelectorAll("h2");
  return [...document.querySelectorAll(selector)].filter(
    box => start && after(start, box) && (!end || after(box, end)));
}
</script>"""


def chromium(binary: str, page: Path, *action: str, height: int = WINDOW[1]) -> str:
    """One headless chromium run on ``page`` with a fresh profile; its stdout."""
    with tempfile.TemporaryDirectory(prefix="parbench-chromium-") as profile:
        done = subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", f"--user-data-dir={profile}",
             f"--window-size={WINDOW[0]},{height}", *action, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        sys.exit(f"chromium failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def measure(binary: str, page: Path) -> dict:
    """What the browser laid out: widths, height, images decoded, the h2 headings in order."""
    probe = page.with_name(f"{page.stem}-probe.html")
    probe.write_text(page.read_text().replace("</body>", f"{PROBE}\n</body>"))
    try:
        dom = chromium(binary, probe, "--dump-dom")
    finally:
        probe.unlink()
    title = re.search(r"<title>(.*?)</title>", dom, re.S)
    try:
        return json.loads(html.unescape(title.group(1)))
    except (AttributeError, ValueError):
        sys.exit(f"the page's probe did not run; the title is {title and title.group(1)!r}")


def problems(found: dict) -> list[str]:
    wrong = []
    if found["scrollWidth"] > found["clientWidth"]:
        wrong.append(f"page is {found['scrollWidth']} px wide, wider than the "
                     f"{found['clientWidth']}-px window: it scrolls sideways")
    if found["decoded"] < found["images"]:
        wrong.append(f"only {found['decoded']} of {found['images']} figures decoded")
    if found["headings"][:1] != ["Headline"]:
        wrong.append(f"the page does not open with the headline: {found['headings'][:3]}")
    for i, box in enumerate(found["headline"], start=1):
        if box["scrollWidth"] > box["clientWidth"]:
            wrong.append(f"headline table {i} is {box['scrollWidth']} px wide in its "
                         f"{box['clientWidth']}-px box: it scrolls sideways")
    figures = found.get("figures", [])
    if figures and not figures[0]["beforeTables"]:
        wrong.append("the headline's forest plot does not come before its tables")
    # the answer on the first screen: the forest plot where there is one, else the table
    first, what = (figures[0], "forest plot") if figures else (
        found["headline"][0] if found["headline"] else None, "first table")
    if first and first["bottom"] > WINDOW[1]:
        wrong.append(f"the headline's {what} ends {first['bottom']:.0f} px down, below the "
                     f"first {WINDOW[1]}-px screen")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="?", default="results/reference/runs")
    parser.add_argument("--out", default=None, help="where the page and screenshots go "
                        "(default: a new temporary folder)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)
    if shutil.which(args.chromium) is None:
        print(f"no browser: {args.chromium} is not installed (apt-get install chromium)",
              file=sys.stderr)
        return 2
    records = check_folder(Path(args.records)).records
    if not records:
        print(f"no valid records under {args.records}", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="parbench-report-"))
    page = out / "report.html"
    write_report(records, "html", page)
    found = measure(args.chromium, page)
    chromium(args.chromium, page, f"--screenshot={(out / 'first-screen.png').resolve()}")
    chromium(args.chromium, page, f"--screenshot={(out / 'whole-page.png').resolve()}",
             height=min(found["scrollHeight"], TALLEST))
    wrong = problems(found)
    print(f"{page}: {found['scrollWidth']} px wide in a {found['clientWidth']}-px window, "
          f"{found['scrollHeight']} px tall, {found['decoded']}/{found['images']} figures "
          f"decoded, sections {found['headings']}; screenshots first-screen.png and "
          f"whole-page.png beside it: {'; '.join(wrong) or 'ok'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
