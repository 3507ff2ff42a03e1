"""kvcalc's web page, built by scripts/build_site.py and driven in a real browser.

Headless Chromium (Debian's package) loads the built site from a static server on 127.0.0.1, with
every request off that host refused and recorded, through Playwright for Python. The page's figures
are read from what it displays (each figure's text, and the exact integer it carries) and checked
against ``kvcalc ... --json`` run here for the same inputs, for every preset under every engine at
a few workloads; a link is checked to restore its view; the page must work with nothing outside
127.0.0.1 (the Pyodide it runs is vendored into the site).

Where Chromium, Playwright or npm is missing the module skips, except under CI (``CI`` set), where
.ci/run installs them and a skip would hide a broken page.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvcalc.cli import main
from tests.helpers.fake_hub import CONFIG_PATH, FakeHub, Reply
from tests.helpers.paths import FIXTURES
from tests.helpers.scripts import load_script

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _missing() -> str | None:
    if CHROMIUM is None:
        return "no chromium on PATH (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install '.[test]')"
    if shutil.which("npm") is None:
        return "no npm on PATH: the site vendors Pyodide from the npm registry"
    return None


if (_why := _missing()) is not None:
    if os.environ.get("CI"):
        raise RuntimeError(f"the web page's tests cannot run under CI: {_why}")
    pytest.skip(_why, allow_module_level=True)

from playwright.sync_api import Browser, Page, Request, Route, sync_playwright  # noqa: E402

build_site = load_script("build_site")


def cli(*argv: str) -> tuple[int, str, str]:
    """``kvcalc ARGV`` here, in CPython, as a terminal runs it at 80 columns: (exit, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


class Site:
    """The built site served on 127.0.0.1, the browser, and every request made off that host."""

    def __init__(self, root: Path, browser: Browser) -> None:
        self.root = root
        self.server = build_site.serve(root)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.browser = browser
        self.off_host: list[str] = []
        self.allowed: set[str] = {self.origin}

    def page(self, query: str = "", **options: Any) -> Page:
        context = self.browser.new_context(**options)
        context.route("**/*", self._guard)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{self.origin}/{query}")
        page.wait_for_function("document.body.dataset.renders >= 1 || document.body.dataset.failed", timeout=90_000)
        assert errors == [], errors
        assert page.evaluate("document.body.dataset.failed") is None, page.inner_text("#status")
        return page

    def _guard(self, route: Route, request: Request) -> None:
        origin = re.match(r"^[a-z]+://[^/]+", request.url)
        if origin is None or origin.group(0) in self.allowed or request.url.startswith("data:"):
            route.continue_()
        else:
            self.off_host.append(request.url)
            route.abort()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    # .ci/run builds the site once and names it here (KVCALC_SITE): the tests check that build.
    built = os.environ.get("KVCALC_SITE")
    root = Path(built) if built else tmp_path_factory.mktemp("site")
    if not built:
        build_site.build(root)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        served = Site(root, browser)
        try:
            yield served
        finally:
            browser.close()
            served.server.shutdown()


@pytest.fixture(scope="module")
def page(site: Site) -> Page:
    """One page, loaded once; each test sets its state as a user would and waits for the figures."""
    return site.page(viewport={"width": 1280, "height": 900})


def show(page: Page, **state: str) -> None:
    page.evaluate("(state) => window.kvcalcPage.show(state)", state)


def figures(page: Page, section: str) -> dict[str, str]:
    """Each figure a section displays: its exact value (the integer the text shows)."""
    return dict(
        page.evaluate(f"""() => Object.fromEntries([...document.querySelectorAll(
        '#{section}-body [data-figure]')].map((n) => [n.dataset.figure, n.dataset.value ?? n.textContent]))""")
    )


def error_line(page: Page, section: str) -> str | None:
    node = page.query_selector(f"#{section}-body .error")
    return None if node is None else node.inner_text()


# --- the seed example, by hand ----------------------------------------------------------------------


def test_the_seed_example_is_on_the_first_screen(site: Site) -> None:
    # The study notes' example: Llama 3.1 8B (32 layers, 8 KV heads of 128) at 2,048 tokens in bf16:
    # 2 x 32 x 1 x 2,048 x 8 x 128 x 2 = 268,435,456 bytes = 256 MiB.
    page = site.page()
    total = page.locator("#estimate-body [data-figure=total_bytes]")
    assert total.get_attribute("data-value") == "268435456"
    assert total.inner_text() == "268,435,456 bytes = 256 MiB = 268.44 MB"
    assert "2 x 32 x 1 x 2,048 x 8 x 128 x 2 = 268,435,456 bytes" in page.inner_text("#explain-body")
    page.context.close()


# --- every preset under every engine, the page against the CLI ------------------------------------------

PRESETS = [p["name"] for p in json.loads(cli("presets", "--json")[1])]
ENGINES = [e["name"] for e in json.loads(cli("engines", "--json")[1])]
# (tokens, users, GPU, tensor parallel): the default, a long shared context on two GPUs, a Mac.
WORKLOADS = [("2048", "1", "h100-sxm", "1"), ("32k", "8", "h200", "2"), ("8k", "4", "m4-max-64gb", "1")]
FIT_FIGURES = ("kv_budget_bytes", "max_tokens", "max_concurrency", "max_context")


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def _check(page: Page, preset: str, engine: str, workload: tuple[str, str, str, str]) -> None:
    tokens, users, gpu, tp = workload
    show(page, model=preset, engine=engine, tokens=tokens, users=users, gpu=gpu, tp=tp)
    flags = ["--engine", engine, "--tokens", tokens, "--batch", users, *(["--tp", tp] if tp != "1" else [])]
    code, out, err = cli("estimate", preset, *flags, "--json")
    if code:
        assert error_line(page, "estimate") == _last_line(err)
    else:
        expected = json.loads(out)
        shown = figures(page, "estimate")
        for name in ("total_bytes", "per_sequence_bytes", "per_token_bytes"):
            assert int(shown[name]) == expected[name], name
    code, out, err = cli("fit", preset, *flags, "--gpu", gpu, "--json")
    if code:
        assert error_line(page, "fit") == _last_line(err)
        return
    expected = json.loads(out)
    shown = figures(page, "fit")
    for name in FIT_FIGURES:
        assert shown[name] == json.dumps(expected[name]), name  # null: unbounded
    assert shown["fits"] == json.dumps(expected["verdict"]["fits"])
    assert shown.get("command") == (expected["command"] or {}).get("text")


@pytest.mark.parametrize("engine", ENGINES)
def test_every_preset_gives_the_clis_figures(page: Page, engine: str) -> None:
    for preset in PRESETS:
        for workload in WORKLOADS:
            try:
                _check(page, preset, engine, workload)
            except AssertionError as exc:
                raise AssertionError(f"{preset} under {engine} at {workload}: {exc}") from exc


def test_the_compare_chart_holds_the_clis_sweep(page: Page) -> None:
    show(page, model="gpt-oss-20b", engine="vllm", tokens="32k", users="2")
    expected = json.loads(cli("compare", "gpt-oss-20b", "--engine", "vllm", "--tokens", "1k,4k,16k,64k,256k,32k",
                              "--batch", "2", "--json")[1])  # fmt: skip
    shown = dict(
        page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('[data-compare]')]
        .map((n) => [n.dataset.compare, n.dataset.value]))""")
    )
    assert {f"{r['label']}@{r['tokens']}": str(r["total_bytes"]) for r in expected["rows"]} == shown
    assert len(shown) == 3 * 6  # MHA, the model's own GQA, MQA at six lengths
    assert page.locator("#compare-body svg path.series").count() == 3


def test_the_choices_are_kvcalcs_own(page: Page) -> None:
    from kvcalc.dtypes import DTYPES, GROUP_QUANTIZED_BITS

    options = "(id) => [...document.querySelectorAll(`#${id} option`)].map((o) => o.value)"
    assert page.evaluate(options, "model") == PRESETS
    assert page.evaluate(options, "engine") == ENGINES
    assert page.evaluate(options, "kv") == ["auto", *DTYPES, *GROUP_QUANTIZED_BITS]
    assert {"auto", "bf16", "fp8", "q8_0", "q4_0", "int4"} <= set(page.evaluate(options, "kv"))
    assert len(page.evaluate(options, "gpu")) == len(json.loads(cli("gpus", "--json")[1]))
    engines = {e["name"]: e["versions"] for e in json.loads(cli("engines", "--json")[1])}
    show(page, engine="vllm")
    assert page.evaluate(options, "release-list") == engines["vllm"]
    assert "0.19" in engines["vllm"]
    show(page, engine="theoretical")
    assert page.evaluate(options, "release-list") == []


def test_a_link_may_name_an_alias_and_kvcalc_reads_it(site: Site) -> None:
    # gpus.yaml lists h100 as an alias of h100-sxm: a link saying gpu=h100 keeps it (not another
    # GPU the select falls back to), and an unknown one is kvcalc's own refusal.
    page = site.page("?gpu=h100&engine=vllm&tokens=32k&users=8")
    assert page.evaluate("window.kvcalcPage.state().gpu") == "h100"
    expected = json.loads(cli("fit", "llama-3.1-8b", "--engine", "vllm", "--tokens", "32k", "--batch", "8",
                              "--gpu", "h100", "--json")[1])  # fmt: skip
    assert int(figures(page, "fit")["kv_budget_bytes"]) == expected["kv_budget_bytes"]
    show(page, gpu="h1000")
    code, _, err = cli("fit", "llama-3.1-8b", "--engine", "theoretical", "--tokens", "2048", "--gpu", "h1000", "--json")
    assert code == 2
    assert error_line(page, "fit") == _last_line(err)
    page.context.close()


def test_the_slider_follows_the_tokens_typed(page: Page) -> None:
    # Powers of two from 2^8 = 256 to 2^20 = 1M: 512 is 2^9, 32k is 2^15; 100 is below the slider's range.
    for typed, exponent in (("512", "9"), ("32k", "15"), ("100", "8")):
        show(page, tokens=typed)
        assert page.input_value("#tokens-slider") == exponent, typed
    page.fill("#tokens-slider", "12")  # the slider moved: the text box says 4k (2^12 = 4,096)
    assert page.input_value("#tokens") == "4k"


def test_a_refusal_is_kvcalcs_own_line(page: Page) -> None:
    show(page, tokens="32 tokens")
    code, _, err = cli("estimate", "llama-3.1-8b", "--tokens", "32 tokens", "--json")
    assert code == 2
    assert error_line(page, "estimate") == _last_line(err)
    assert page.locator("#estimate-body .error").get_attribute("data-exit") == "2"


# --- the state in the URL -----------------------------------------------------------------------------


def test_a_link_restores_the_view(site: Site) -> None:
    page = site.page()
    page.select_option("#model", "qwen3-32b")
    page.select_option("#engine", "sglang")
    page.fill("#tokens", "16k")
    page.fill("#users", "6")
    page.select_option("#gpu", "h200")
    page.fill("#tp", "2")
    page.select_option("#kv", "fp8")
    page.select_option("#theme", "dark")
    page.wait_for_function("document.body.dataset.renders >= 2 && document.body.dataset.busy === 'false'")
    page.wait_for_function("location.search.includes('tp=2')")
    link, before = page.url, figures(page, "fit") | figures(page, "estimate")
    said = ("model=qwen3-32b", "engine=sglang", "tokens=16k", "users=6", "gpu=h200", "tp=2", "kv=fp8", "theme=dark")
    assert [key for key in said if key not in link] == []
    page.context.close()

    again = site.page(link[len(site.origin) + 1 :])
    assert again.evaluate("window.kvcalcPage.state()") | {} == {
        "source": "preset", "model": "qwen3-32b", "config": "", "hub": "", "engine": "sglang", "release": "",
        "kv": "fp8", "gpu": "h200", "tp": "2", "pp": "1", "dp": "1", "tokens": "16k", "users": "6", "theme": "dark",
    }  # fmt: skip
    assert figures(again, "fit") | figures(again, "estimate") == before
    assert again.evaluate("document.documentElement.dataset.theme") == "dark"
    again.context.close()


def test_a_pasted_config_travels_in_the_link(site: Site) -> None:
    config = (FIXTURES / "Llama-3.1-8B.json").read_text(encoding="utf-8")
    page = site.page()
    page.check("input[name=source][value=config]")
    page.fill("#config", config)
    page.wait_for_function("location.search.includes('config=') && document.body.dataset.busy === 'false'")
    page.wait_for_function(
        "document.querySelector('#estimate-body [data-figure=total_bytes]')?.dataset.value === '268435456'"
    )
    link = page.url
    page.context.close()
    assert len(link) < 2000  # compressed: a link any browser and chat keeps whole

    again = site.page(link[len(site.origin) + 1 :])
    assert json.loads(again.evaluate("window.kvcalcPage.state().config")) == json.loads(config)
    expected = json.loads(cli("estimate", str(FIXTURES / "Llama-3.1-8B.json"), "--json")[1])
    assert int(figures(again, "estimate")["total_bytes"]) == expected["total_bytes"] == 268_435_456
    again.context.close()


def test_a_hub_id_is_fetched_from_the_hub_it_names(site: Site, hub: FakeHub) -> None:
    body = (FIXTURES / "Llama-3.1-8B.json").read_bytes()
    hub.replies[CONFIG_PATH] = Reply(200, {"Content-Type": "text/plain", "Access-Control-Allow-Origin": "*"}, body)
    site.allowed.add(hub.endpoint)
    try:
        page = site.page(f"?source=hub&hub=org/name&hub_endpoint={hub.endpoint}")
        assert int(figures(page, "estimate")["total_bytes"]) == 268_435_456
        assert ("GET", CONFIG_PATH) in hub.seen()
        hub.replies["/org/missing/resolve/main/config.json"] = Reply(404, {"Access-Control-Allow-Origin": "*"})
        show(page, source="hub", hub="org/missing")
        assert error_line(page, "estimate") == (
            f"kvcalc: error: {hub.endpoint}/org/missing/resolve/main/config.json answered HTTP 404"
        )
        show(page, source="hub", hub="org/closed")  # the fake Hub's own 404, without CORS: the browser refuses it
        closed = f"could not fetch {hub.endpoint}/org/closed/resolve/main/config.json"
        assert error_line(page, "estimate") == f"kvcalc: error: {closed} (offline, or the host refuses this page)"
        page.context.close()
    finally:
        site.allowed.discard(hub.endpoint)


# --- offline, accessible, phone, light and dark --------------------------------------------------------


def test_nothing_is_fetched_off_the_pages_host(site: Site, page: Page) -> None:
    # Every test's page ran through the same guard, which refuses and records any other host.
    show(page, model="deepseek-v3", engine="vllm", tokens="128k")
    assert site.off_host == []
    sizes = json.loads((site.root / "build.json").read_text(encoding="utf-8"))
    assert "pyodide/pyodide.asm.wasm" in sizes["bytes"]  # the runtime is in the site, not on a CDN


def test_every_control_has_a_label_and_a_key(page: Page) -> None:
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea, button')]
        .filter((n) => !(n.labels?.length || n.getAttribute('aria-label') || n.textContent.trim()))
        .map((n) => n.id || n.name)""")
    assert unlabelled == []
    page.focus("#model")
    reached = set()
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("document.activeElement.id || document.activeElement.name"))
    assert {"engine", "release", "kv", "gpu", "tp", "tokens", "tokens-slider", "users", "theme", "share"} <= reached


def _luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_colour_meets_wcag_aa(page: Page, theme: str) -> None:
    page.evaluate("(t) => { document.documentElement.dataset.theme = t; }", theme)
    colours = page.evaluate("""() => Object.fromEntries(['bg', 'panel', 'fg', 'muted', 'accent', 'ok', 'bad', 'warn',
        's0', 's1', 's2', 's3', 's4', 's5'].map((v) => [v,
        getComputedStyle(document.documentElement).getPropertyValue('--' + v).trim()]))""")
    for text in ("fg", "muted", "accent", "ok", "bad", "warn", "s0", "s1", "s2", "s3", "s4", "s5"):
        for background in ("bg", "panel"):
            ratio = _contrast(colours[text], colours[background])
            assert ratio >= 4.5, f"{theme}: {text} on {background} is {ratio:.2f}:1"
    page.evaluate("() => { delete document.documentElement.dataset.theme; }")


def test_dark_follows_the_system_unless_told(site: Site) -> None:
    page = site.page(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    show(page, theme="light")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert (dark, light) == ("rgb(13, 17, 23)", "rgb(255, 255, 255)")
    page.context.close()


def test_a_phone_gets_one_column_and_no_sideways_scroll(site: Site) -> None:
    phone = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
    page = site.page("?model=deepseek-v3&engine=sglang&tokens=128k&gpu=h200&tp=8", **phone)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    form, results = page.locator("#form").bounding_box(), page.locator("#results").bounding_box()
    assert form is not None and results is not None and results["y"] >= form["y"] + form["height"]
    page.context.close()
