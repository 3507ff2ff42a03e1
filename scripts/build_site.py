"""Build kvcalc's web page: a static site that runs kvcalc itself in the browser (Pyodide).

    python scripts/build_site.py [OUT]            # default OUT: site/
    python scripts/build_site.py OUT --serve 8000 # then serve it on 127.0.0.1:8000 (Ctrl-C stops)
    python scripts/build_site.py OUT --screenshot docs/web.png   # the README's picture (Chromium)

What OUT holds, and where each part comes from:

- ``index.html``, ``app.js``, ``style.css``: the page, from web/;
- ``pyodide/``: Pyodide's core (its WebAssembly Python, the standard library and the lock file it
  reads at start), from the ``pyodide`` package of the npm registry at the version web/package.json
  pins (``npm ci`` against web/package-lock.json, into web/node_modules/): nothing is fetched from
  a CDN when the page runs, so it works offline from any static host;
- ``kvcalc.zip``: what the page unpacks into Pyodide's file system: the kvcalc wheel built from
  this checkout (presets pre-parsed, as pip installs it), the pure-Python packages its command line
  imports, taken from this Python's own installation (typer, rich and theirs, PyYAML without its C
  extension), and web/bridge.py. huggingface-hub is left out: in the browser the page fetches
  a Hub config itself, where the network allows, and hands kvcalc the file. Its Python is compiled
  to bytecode by the very Pyodide the page runs (in node, at build time; the sources are left out
  but bridge.py's), which spares the page's first answer ~0.4 s of compiling on every visit;
- ``build.json``: the versions and sizes, and a hash the page adds to kvcalc.zip's address so a
  new build is never read from a stale cache.

Needs node and npm, and hatchling (``pip install '.[web]'``); about 15 s. Exit 1, with one line on
stderr, when a part cannot be had.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
PAGE_FILES = ("index.html", "app.js", "style.css")
# What Pyodide's loader reads at start (pyodide.mjs imports pyodide.asm.mjs, which compiles the
# .wasm; the standard library and the lock file are fetched beside it). Its console pages and
# type declarations are not the page's.
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
# The distributions kvcalc's command line needs that the browser can run, found from kvcalc's own
# requirements; huggingface-hub (and what only it needs) is for the network, which the page does
# itself, and Windows-only markers never apply.
LEFT_OUT = {"huggingface-hub"}


class BuildError(Exception):
    """A part of the site could not be had; the message says which and why."""


def _name(requirement: str) -> str:
    for stop in " ;<>=!~[(":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower().replace("_", "-")


def runtime_distributions() -> list[str]:
    """kvcalc's runtime requirements and theirs, as installed here, less LEFT_OUT."""
    seen: set[str] = set()
    todo = [_name(r) for r in metadata.requires("kvcalc") or [] if "extra ==" not in r]
    while todo:
        name = todo.pop()
        if name in seen or name in LEFT_OUT:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError as exc:
            raise BuildError(f"{name} is not installed in this Python ({sys.executable})") from exc
        todo += [_name(r) for r in requires if "extra ==" not in r and "platform_system" not in r]
    return sorted(seen)


def _pure_files(distribution: str) -> list[tuple[Path, str]]:
    """(file, path in the zip) for a distribution's importable files: its Python and data, never a
    compiled extension (PyYAML falls back to its pure-Python reader without one)."""
    files = metadata.files(distribution) or []
    out = []
    for file in files:
        parts = Path(str(file)).parts
        if not parts or parts[0].endswith((".dist-info", ".data")) or parts[0] in ("..", "bin"):
            continue
        if "__pycache__" in parts or file.suffix in (".so", ".pyd", ".pyc", ".dll", ".dylib"):
            continue
        out.append((Path(str(file.locate())), "/".join(parts)))
    return out


def _build_wheel(work: Path) -> Path:
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    proc = subprocess.run([*pip, "-w", str(work), str(ROOT)], capture_output=True, text=True, check=False)
    wheels = sorted(work.glob("kvcalc-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise BuildError(f"the kvcalc wheel did not build (is hatchling installed? pip install '.[web]'): {tail[0]}")
    return wheels[0]


def build_zip(out: Path, work: Path) -> list[str]:
    """Write kvcalc.zip; return the distributions it carries (kvcalc first)."""
    wheel = _build_wheel(work)
    distributions = runtime_distributions()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with zipfile.ZipFile(wheel) as source:
            for info in source.infolist():
                if not info.filename.split("/", 1)[0].endswith(".dist-info"):
                    archive.writestr(info.filename, source.read(info))
        for distribution in distributions:
            for path, name in _pure_files(distribution):
                archive.write(path, name)
        archive.write(WEB / "bridge.py", "bridge.py")
    version = wheel.name.split("-")[1]  # the checkout's, as built: kvcalc-VERSION-py3-none-any.whl
    return [f"kvcalc {version}", *(f"{d} {metadata.version(d)}" for d in distributions)]


def pyodide_files(out: Path) -> str:
    """Copy Pyodide's core from the npm package web/package-lock.json pins; return its version."""
    npm = shutil.which("npm")
    if npm is None:
        raise BuildError("npm is not on PATH: the page vendors Pyodide from the npm registry (apt-get install npm)")
    proc = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                          cwd=WEB, capture_output=True, text=True, check=False)  # fmt: skip
    package = WEB / "node_modules" / "pyodide"
    if proc.returncode != 0 or not package.is_dir():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no package"]
        raise BuildError(f"npm ci in web/ failed: {tail[0]}")
    out.mkdir(parents=True, exist_ok=True)
    for name in PYODIDE_FILES:
        shutil.copy2(package / name, out / name)
    return str(json.loads((package / "package.json").read_text(encoding="utf-8"))["version"])


# Run by node at build time: the site's own Pyodide unpacks kvcalc.zip, compiles every module to
# its bytecode (beside its source, checked by no timestamp: the archive's files carry none the
# page could trust) and packs the bytecode alone, bridge.py aside, which the page imports by name.
COMPILE_MJS = """
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const [pyodideDir, zipIn, zipOut] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(`${pyodideDir}/pyodide.mjs`).href);
const pyodide = await loadPyodide({ indexURL: `${pyodideDir}/` });
pyodide.unpackArchive(new Uint8Array(readFileSync(zipIn)).buffer, "zip", { extractDir: "/site" });
pyodide.runPython(`
import compileall, os, py_compile, zipfile
unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
assert compileall.compile_dir("/site", quiet=1, legacy=True, invalidation_mode=unchecked)
with zipfile.ZipFile("/out.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
    for root, dirs, files in os.walk("/site"):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py") and name != "bridge.py":
                continue
            path = os.path.join(root, name)
            archive.write(path, os.path.relpath(path, "/site"))
`);
writeFileSync(zipOut, pyodide.FS.readFile("/out.zip"));
"""


def compile_zip(archive: Path, pyodide: Path, work: Path) -> None:
    """Replace ARCHIVE's Python sources with the bytecode PYODIDE compiles them to (node runs it)."""
    node = shutil.which("node")
    if node is None:
        raise BuildError("node is not on PATH: the site's Python is compiled by its own Pyodide, in node")
    script, compiled = work / "compile.mjs", work / "compiled.zip"
    script.write_text(COMPILE_MJS, encoding="utf-8")
    proc = subprocess.run([node, str(script), str(pyodide.resolve()), str(archive.resolve()), str(compiled)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode != 0 or not compiled.is_file():
        tail = [line for line in (proc.stderr or proc.stdout).splitlines() if "Error" in line][-1:] or ["no output"]
        raise BuildError(f"compiling the site's Python in Pyodide failed: {tail[0][:200]}")
    shutil.move(compiled, archive)


def build(out: Path) -> dict[str, object]:
    """Build the site into OUT (emptied first) and return what build.json records."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name in PAGE_FILES:
        shutil.copy2(WEB / name, out / name)
    pyodide_version = pyodide_files(out / "pyodide")
    with tempfile.TemporaryDirectory() as work:
        carried = build_zip(out / "kvcalc.zip", Path(work))
        compile_zip(out / "kvcalc.zip", out / "pyodide", Path(work))
    digest = hashlib.sha256((out / "kvcalc.zip").read_bytes()).hexdigest()[:16]
    sizes = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    manifest: dict[str, object] = {"kvcalc_zip": f"kvcalc.zip?v={digest}", "pyodide": pyodide_version,
                                   "python_packages": carried, "bytes": sizes}  # fmt: skip
    (out / "build.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site with the types browsers insist on: a module script must be JavaScript and
    Pyodide compiles its .wasm while it streams only when it is served as application/wasm."""

    extensions_map = {  # noqa: RUF012  (the base class's own attribute, replaced whole)
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json",
    }  # fmt: skip

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(directory: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A static server for DIRECTORY on 127.0.0.1 (port 0: one the OS picks), not yet started."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", port), functools.partial(SiteHandler, directory=str(directory))
    )
    server.daemon_threads = True
    return server


# The README's picture: a question people bring (Llama 3.1 8B on vLLM, 8 users of 32k on an H100).
SCREENSHOT_VIEW = "?engine=vllm&tokens=32k&users=8"


def screenshot(site: Path, path: Path, view: str = SCREENSHOT_VIEW) -> None:
    """Take the page's picture at VIEW in headless Chromium (Playwright), 1280 x 1100."""
    import threading

    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise BuildError("no chromium on PATH for the screenshot (apt-get install chromium)")
    server = serve(site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 1100}, color_scheme="light")
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/{view}")
            page.wait_for_function("document.body.dataset.renders >= 1", timeout=120_000)
            path.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(path))
            browser.close()
    finally:
        server.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="site", help="the site's folder (emptied first; default site/)")
    parser.add_argument("--serve", type=int, metavar="PORT", help="then serve it on 127.0.0.1:PORT until Ctrl-C")
    parser.add_argument("--screenshot", type=Path, metavar="PNG", help="then take the page's picture (Chromium)")
    args = parser.parse_args()
    try:
        manifest = build(Path(args.out))
        if args.screenshot is not None:
            screenshot(Path(args.out), args.screenshot)
    except BuildError as exc:
        print(f"build_site: {exc}", file=sys.stderr)
        return 1
    total = sum(manifest["bytes"].values())  # type: ignore[attr-defined]
    print(f"built {args.out}/: Pyodide {manifest['pyodide']}, {len(manifest['python_packages'])} Python "  # type: ignore[arg-type]
          f"packages, {total / 2**20:.1f} MiB in all")  # fmt: skip
    if args.serve is not None:
        server = serve(Path(args.out), args.serve)
        print(f"serving http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)")
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
