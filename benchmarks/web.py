"""The web page's load: from the navigation's start to kvcalc's first figures on screen, against
the bare Pyodide it runs on, in the same headless Chromium.

=========  ================================================================  =============  ======
label      what is timed (``performance.now()`` in the page, fresh context)  compared with  goal
=========  ================================================================  =============  ======
pyodide    a blank page that loads the site's Pyodide and runs ``1 + 1``     (floor)
page       the site's page until its first estimate, fit, formula and chart  pyodide        <= 1.4
=========  ================================================================  =============  ======

The floor is what any page built on Pyodide pays (fetching and compiling its 9.6 MB WebAssembly,
unpacking the standard library); the page adds kvcalc's archive, its imports, four commands and
the drawing. The issue's own goal, the first answer within a few seconds on this machine, is
reported beside it (``FIRST_ANSWER_GOAL_S``).

Each run opens a fresh browser context (an empty cache, as a first visit), served from 127.0.0.1;
after a warm-up of each the runs alternate (pyodide, page, pyodide, ...) so a slow spell of the
machine hits both alike; the report gives each one's median and minimum and the ratio of medians.

    python benchmarks/web.py                 # builds the site into a temporary folder, 7 runs each
    python benchmarks/web.py --site site --runs 15 --json

Needs what tests/test_web.py needs (Chromium, Playwright, npm). It always exits 0: a benchmark,
not a test.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
GOAL_RATIO = 1.4
FIRST_ANSWER_GOAL_S = 5.0
WARMUP_RUNS = 1
FLOOR_PAGE = """<!doctype html><meta charset="utf-8"><title>floor</title><body><script type="module">
import { loadPyodide } from "./pyodide/pyodide.mjs";
const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", location.href).href });
pyodide.runPython("1 + 1");
document.body.dataset.firstAnswerMs = String(Math.round(performance.now()));
</script></body>"""


def _builder() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))  # a script beside its kin, imported by name
    return importlib.import_module("build_site")


def measure(site: Path, runs: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    build_site = _builder()
    (site / "floor.html").write_text(FLOOR_PAGE, encoding="utf-8")
    server = build_site.serve(site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    pages = {"pyodide": f"{origin}/floor.html", "page": f"{origin}/"}
    times: dict[str, list[float]] = {label: [] for label in pages}
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            for run in range(WARMUP_RUNS + runs):
                for label, url in pages.items():
                    context = browser.new_context()
                    page = context.new_page()
                    page.goto(url)
                    page.wait_for_function("document.body.dataset.firstAnswerMs", timeout=120_000)
                    if run >= WARMUP_RUNS:
                        times[label].append(float(page.evaluate("document.body.dataset.firstAnswerMs")) / 1000)
                    context.close()
            browser.close()
    finally:
        server.shutdown()
        (site / "floor.html").unlink()
    return times


def summarise(times: dict[str, list[float]]) -> dict[str, object]:
    medians = {label: statistics.median(values) for label, values in times.items()}
    ratio = medians["page"] / medians["pyodide"]
    return {
        "median_s": medians,
        "min_s": {label: min(values) for label, values in times.items()},
        "runs": len(times["page"]),
        "ratio": ratio,
        "goal_ratio": GOAL_RATIO,
        "meets_ratio": ratio <= GOAL_RATIO,
        "first_answer_goal_s": FIRST_ANSWER_GOAL_S,
        "meets_first_answer": medians["page"] <= FIRST_ANSWER_GOAL_S,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--site", type=Path, help="a site built by scripts/build_site.py (default: build one)")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each page (default 7)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        site = args.site
        if site is None:
            site = Path(work) / "site"
            _builder().build(site)
        summary = summarise(measure(site, args.runs))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    medians, minima = summary["median_s"], summary["min_s"]
    assert isinstance(medians, dict) and isinstance(minima, dict)
    for label in ("pyodide", "page"):
        print(f"{label:8} median {medians[label]:.2f} s  min {minima[label]:.2f} s  ({summary['runs']} runs)")
    verdict = "meets" if summary["meets_ratio"] else "misses"
    print(f"page / pyodide {summary['ratio']:.2f} ({verdict} the goal <= {GOAL_RATIO}); first answer "
          f"{medians['page']:.2f} s (goal <= {FIRST_ANSWER_GOAL_S:.0f} s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
