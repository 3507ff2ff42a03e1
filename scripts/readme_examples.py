"""Re-run every ``$ kvcalc ...`` example in README.md and write its real output back.

    python scripts/readme_examples.py           # rewrite the README's example outputs
    python scripts/readme_examples.py --check   # exit 1 if any is stale (tests/test_readme.py too)

Each example runs as tests/test_readme.py runs it: ``kvcalc.cli.main`` in this process, from the
repository root, in a terminal of WIDTH columns with no colour. Probe examples need the probe
extra (torch, transformers); their timings and library versions differ run to run, so a check
ignores those, as the test does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
WIDTH = 80  # the terminal the README shows: what a default terminal window prints
EXAMPLE = re.compile(r"(```console\n\$ kvcalc (?P<args>[^\n]*)\n)(?P<output>.*?)(```)", re.S)


def run(args: str) -> str:
    """What ``kvcalc ARGS`` prints on stdout at WIDTH columns (an example must succeed)."""
    from kvcalc.cli import main

    os.environ.update({"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"})
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.chdir(ROOT):
        try:
            main(shlex.split(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    if code != 0:
        raise SystemExit(f"kvcalc {args}: exit status {code}")
    return "".join(line.rstrip() + "\n" for line in out.getvalue().rstrip().splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale; write nothing")
    check = parser.parse_args().check
    text = README.read_text()
    stale: list[str] = []

    def fresh(m: re.Match[str]) -> str:
        output = run(m["args"])
        if output != m["output"]:
            stale.append(m["args"])
        return m[1] + output + m[4]

    updated = EXAMPLE.sub(fresh, text)
    if check:
        for args in stale:
            print(f"stale: kvcalc {args}", file=sys.stderr)
        return 1 if stale else 0
    README.write_text(updated)
    print(f"{len(stale)} example(s) rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
