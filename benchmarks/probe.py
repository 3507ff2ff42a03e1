"""Time ``kvcalc probe`` on bundled presets (the issue's goal: any preset at --tokens 4096
--batch 1 in under 60 s on a 2-core CPU machine).

Run: ``python benchmarks/probe.py`` (all presets) or ``python benchmarks/probe.py llama-3.1-8b
deepseek-v3``. Each probe runs in its own process, as a user would run it; the table shows the
whole-process wall time, whether measured bytes matched the estimate, the shrunk model's cache
(one layer of each kind) and the largest transient the cache's growth causes on CPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def presets() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "kvcalc", "presets", "--json"], capture_output=True, text=True, check=True
    )
    return [row["name"] for row in json.loads(out.stdout)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="*", help="presets to probe (default: all)")
    parser.add_argument("--tokens", default="4096")
    parser.add_argument("--batch", default="1")
    args = parser.parse_args()
    names = args.presets or presets()
    print(f"{'preset':<22} {'seconds':>8}  {'result':<10} {'shrunk cache B':>15} {'transient B':>12}")
    worst = 0.0
    for name in names:
        cmd = [sys.executable, "-m", "kvcalc", "probe", name, "--tokens", args.tokens, "--batch", args.batch,
               "--device", "cpu", "--json"]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        if proc.stdout.strip().startswith("{"):
            data = json.loads(proc.stdout)
            shrunk = sum(layer["tensor_bytes"] for layer in data["shrunk_layers"])
            transient = data["peak"].get("transient_bytes", data["peak"].get("decode_bytes", 0))
            result = "match" if data["match"] else "MISMATCH"
            worst = max(worst, seconds)
            print(f"{name:<22} {seconds:8.1f}  {result:<10} {shrunk:>15,} {transient:>12,}")
        else:
            reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output"
            print(f"{name:<22} {seconds:8.1f}  skipped    {reason}")
    print(f"slowest probed preset: {worst:.1f} s (goal: under 60 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
