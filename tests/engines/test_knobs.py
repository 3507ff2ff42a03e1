"""Each engine's knobs are typed, self-validating fields of its Options (kvcalc.engines.knobs), in a
light module of the engine's own package: the API validates through them, the CLI builds its flags
from them, and an engine is one package plus a registry line (the toy engine below proves it)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from kvcalc import api
from kvcalc.calc.step_cost import StepOverhead
from kvcalc.dtypes import DType
from kvcalc.engines import REGISTRY, Engine, EngineOptions, EnginePlugin, Target, engine_class, every_knob, pad
from kvcalc.engines.knobs import knob
from kvcalc.engines.theoretical import THEORETICAL
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache
from tests.conftest import assert_one_line_error

# --- bounds: every knob refuses what its engine would, in the words the API has always used ------------


@pytest.mark.parametrize(
    ("engine", "options", "message"),
    [
        ("vllm", {"block_size": 0}, "block_size must be positive, got 0"),
        ("vllm", {"max_batched_tokens": -5}, "max_batched_tokens must be positive, got -5"),
        ("llama.cpp", {"ubatch": True}, "ubatch must be positive, got True"),
        ("vllm", {"block_size": "16"}, "block_size must be positive, got 16"),
        # 0 is a value for these two (mlx-lm quantizes from the first token; no generated tokens)
        ("mlx", {"quantized_kv_start": -1}, "quantized_kv_start must not be negative, got -1"),
        ("mlx", {"max_tokens": -2}, "max_tokens must not be negative, got -2"),
        # a block or quantization group is at most a row's length (2^24), a bit width at most 64
        ("vllm", {"block_size": 2**24 + 1}, "block_size is implausibly large: 1.68e+07 (at most 16,777,216)"),
        ("mlx", {"kv_bits": 65}, "kv_bits is implausibly large: 65 (at most 64)"),
        ("llama.cpp", {"n_batch": 2**50 + 1}, "n_batch is implausibly large: 1.13e+15 (at most 1,125,899,906,842,624)"),
        ("llama.cpp", {"kv_unified": 1}, "kv_unified is a flag (True or False), got 1"),
        ("vllm", {"enforce_eager": "yes"}, "enforce_eager is a flag (True or False), got 'yes'"),
    ],
)
def test_a_knob_refuses_a_value_out_of_its_bounds(engine: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        api.estimate("llama-3.1-8b", serving=api.Serving(engine, options=options))  # type: ignore[arg-type]
    assert str(info.value) == message
    assert info.value.params == tuple(options)


def test_a_knob_of_another_engine_is_checked_before_it_is_refused() -> None:
    # ubatch is llama.cpp's: a bad value is named as such even under vLLM, then a good one refused.
    with pytest.raises(UsageError, match="ubatch must be positive"):
        api.estimate("llama-3.1-8b", serving=api.Serving("vllm", options={"ubatch": 0}))
    with pytest.raises(UsageError, match="ubatch changes nothing under the vllm engine"):
        api.estimate("llama-3.1-8b", serving=api.Serving("vllm", options={"ubatch": 64}))


def test_an_unknown_knob_names_every_known_one() -> None:
    with pytest.raises(UsageError) as info:
        api.estimate("llama-3.1-8b", serving=api.Serving("vllm", options={"page_size": 16}))
    message = str(info.value)
    assert message.startswith("page_size is no engine option kvcalc knows; they are ")
    assert all(name in message for name in every_knob())


def test_options_parse_checks_and_keeps_what_is_given() -> None:
    options = engine_class("vllm").options_type
    assert options.check({"block_size": 32, "enforce_eager": False, "max_num_seqs": None}) == {"block_size": 32}
    with pytest.raises(UsageError, match="no engine option"):
        options.parse({"ubatch": 64})


@pytest.mark.parametrize("name", list(REGISTRY))
def test_the_plugin_and_the_rules_name_the_same_options(name: str) -> None:
    plugin = REGISTRY[name]
    assert plugin.load().options_type is plugin.options
    assert all(k.flag.startswith("--") and k.engine_flag and k.help for k in plugin.options.knobs())


def test_a_shared_knob_has_one_flag() -> None:
    # vLLM's --block-size and SGLang's --page-size are kvcalc's one --block-size
    flags = {REGISTRY[n].options.knobs()[0].engine_flag for n in ("vllm", "sglang")}
    assert flags == {"--block-size", "--page-size"}
    assert [k.flag for k in every_knob().values()].count("--block-size") == 1


def test_every_engines_plugin_loads_no_rules() -> None:
    # In a fresh interpreter: the registry and every engine package's plugin, and no engine's rules.
    code = (
        "import json, sys\nimport kvcalc.engines\n"
        "for p in kvcalc.engines.REGISTRY.values(): p.options.knobs()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kvcalc.engines.'))))\n"
    )
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       timeout=120).stdout)  # fmt: skip
    packages = ("transformers", "vllm", "sglang", "mlx", "llamacpp")
    assert {f"kvcalc.engines.{p}" for p in packages} <= set(loaded)
    # one module an engine: its package's light __init__, nothing under it
    assert not [m for m in loaded if m.count(".") > 2]


# --- a new engine is one package plus a registry line -----------------------------------------------------


class ToyOptions(EngineOptions):
    """The toy engine's one knob."""

    toy_pad: int | None = knob(flag="--toy-pad", engine_flag="--pad-to", default="1",
                               help="toy: tokens held are padded to a multiple of N.")  # fmt: skip


@dataclass(frozen=True)
class Toy(Engine):
    """Holds each layer's tokens padded to a multiple of ``pad_to``."""

    name: str = "toy"
    pad_to: int = 1
    options_type = ToyOptions

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, ToyOptions)
        return cls(pad_to=options.toy_pad or 1), []

    def check_dtype(self, dtype: DType) -> None:
        """Any format, as the theoretical engine (a required hook)."""

    def step_overhead(self) -> StepOverhead:
        return THEORETICAL.step_overhead()  # a required hook; the toy is never timed

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return pad(super().tokens_held(cache, tokens), self.pad_to)


TOY = EnginePlugin(name="toy", summary="a toy: tokens padded", rules=f"{__name__}:Toy", options=ToyOptions,
                   panel="Toy (--engine toy)")  # fmt: skip


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy's registry line, and estimate's flags built again as at start-up."""
    from kvcalc.cli import estimate as estimate_module
    from kvcalc.cli.knobs import engine_knobs

    monkeypatch.setitem(REGISTRY, "toy", TOY)
    monkeypatch.setattr(estimate_module, "estimate", engine_knobs()(estimate_module.estimate.__wrapped__))


@pytest.mark.usefixtures("toy_registered")
def test_a_registered_toy_engine_reaches_the_engine_through_the_api() -> None:
    # Llama 3.1 8B: 2 x 8 KV heads x 128 x 2 B = 4,096 B a token and layer; 1,000 tokens padded to 64s
    # hold 1,024, x 32 layers = 134,217,728 B.
    result = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving("toy", options={"toy_pad": 64}))
    assert result.total_bytes == 1024 * 4096 * 32 == 134_217_728
    with pytest.raises(UsageError, match=r"toy_pad must be positive, got 0"):
        api.estimate("llama-3.1-8b", serving=api.Serving("toy", options={"toy_pad": 0}))


@pytest.mark.usefixtures("toy_registered")
def test_a_registered_toy_engine_shows_its_flags_and_takes_them(run_cli) -> None:
    overview = run_cli("estimate", "--help").stdout  # one line per engine naming its flags
    assert "  Toy " in overview and "--toy-pad" in overview and "Toy (--engine toy)" not in overview
    help_text = run_cli("estimate", "--engine", "toy", "--help").stdout  # the engine's own panel
    assert "Toy (--engine toy):\n  --toy-pad N" in help_text
    data = run_cli("estimate", "llama-3.1-8b", "--engine", "toy", "--toy-pad", "64", "--tokens", "1000", "--json")
    assert data.exit_code == 0, data.stderr
    assert data.json()["total_bytes"] == 134_217_728
    refused = run_cli("estimate", "llama-3.1-8b", "--engine", "vllm", "--toy-pad", "64")
    assert refused.exit_code == 2
    assert_one_line_error(refused, "--toy-pad changes nothing under the vllm engine", "an option of toy")
    listed = run_cli("engines", "toy", "--json").json()
    assert [k["engine_flag"] for k in listed["knobs"]] == ["--pad-to"]


def test_estimate_help_shows_each_engines_knobs_in_its_panel(run_cli) -> None:
    help_text = run_cli("estimate", "--help").stdout
    for plugin in REGISTRY.values():
        if any(k.sizes_cache for k in plugin.options.knobs()):  # theoretical's one knob is simulate's alone
            # the overview names each engine's flags; --engine NAME --help shows its own panel
            assert all(k.flag in help_text for k in plugin.options.knobs() if k.sizes_cache)
            assert plugin.panel not in help_text
            assert f"{plugin.panel}:" in run_cli("estimate", "--engine", plugin.name, "--help").stdout
    # fit's runtime knobs are fit's alone: an estimate would not read them
    assert "--max-num-seqs" not in help_text
    assert "--max-num-seqs" in run_cli("fit", "--help").stdout
    assert "--max-num-tokens" not in help_text  # the ideal batcher's token budget: simulate's
    assert "Theoretical (--engine theoretical):" in run_cli("simulate", "--engine", "theoretical", "--help").stdout


def test_the_plugin_bundles_the_engine() -> None:
    # The one object an engine package exports leads to all of it: its knobs, its rules (with the
    # runtime, capacity and step-cost hooks) and its real probe, if it has one.
    vllm = REGISTRY["vllm"]
    assert vllm.prober is not None and vllm.prober.runs == "probe_vllm"
    assert {k.engine_flag for k in vllm.options.knobs()} >= {"--block-size", "--max-num-batched-tokens"}
    assert vllm.load().__name__ == "VLLM"
    assert REGISTRY["theoretical"].prober is None  # no probe of its own: kvcalc probe uses the model probe
    assert REGISTRY["llama-server"].prober is REGISTRY["llama.cpp"].prober  # one package, one probe
