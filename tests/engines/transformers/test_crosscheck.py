"""A transformers probe's result checked against the estimate (kvcalc.engines.transformers.crosscheck):
matches, mismatches, and tampered or partial --from-result files."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult, assert_one_line_error


@pytest.fixture(scope="module")
def llama_result() -> tuple[dict[str, Any], dict[str, Any]]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # The request as `kvcalc probe --print-request` writes it, built in-process.
    import contextlib
    import io

    from kvcalc.cli import main
    from kvcalc.engines.transformers.torch_probe import run

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
        main(["probe", "llama-3.2-1b", "--tokens", "40", "--device", "cpu", "--print-request"])
    request = json.loads(buffer.getvalue())
    return request, run(request)


def _from_result(run_cli, tmp_path: Path, result: Any, *extra: str) -> CliResult:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    return run_cli("probe", "llama-3.2-1b", "--tokens", "40", "--device", "cpu", "--from-result", str(path), *extra)


def test_probe_result_that_matches_exits_0(run_cli, tmp_path, llama_result) -> None:
    _request, result = llama_result
    assert _from_result(run_cli, tmp_path, result).exit_code == 0


def test_probe_mismatch_exits_1(run_cli, tmp_path, llama_result) -> None:
    # llama-3.2-1b in bf16: 16 layers x 2 x 8 KV heads x 64 dims x 2 B = 32,768 B per token, so 40
    # tokens are 1,310,720 B; one measured layer 4,096 B larger is 16 x 4,096 = 65,536 B more (+5%).
    _request, result = llama_result
    tampered = copy.deepcopy(result)
    tampered["layers"][0]["tensor_bytes"] += 4096
    found = _from_result(run_cli, tmp_path, tampered, "--json")
    assert found.exit_code == 1
    data = found.json()
    assert data["match"] is False
    assert data["estimated_bytes"] == 40 * 32_768 == 1_310_720
    assert data["measured_bytes"] - data["estimated_bytes"] == 16 * 4096
    # Within a tolerance that covers the difference, the same result passes.
    assert _from_result(run_cli, tmp_path, tampered, "--tolerance", "5%").exit_code == 0
    assert _from_result(run_cli, tmp_path, tampered, "--tolerance", "4.9%").exit_code == 1


def _drop(path: list[Any]):
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


def _set(path: list[Any], value: Any):
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


TAMPERED = {
    "no layers": (_drop(["layers"]), "layers"),
    "no layer_kinds": (_drop(["layer_kinds"]), "layer_kinds"),
    "no tensor_bytes": (_drop(["layers", 0, "tensor_bytes"]), "tensor_bytes"),
    "no storage_bytes": (_drop(["layers", 0, "storage_bytes"]), "storage_bytes"),
    "no peak": (_drop(["peak"]), "peak"),
    "no device": (_drop(["device"]), "device"),
    "no prefill_seconds": (_drop(["prefill_seconds"]), "prefill_seconds"),
    "layers not a list": (_set(["layers"], {"a": 1}), "layers"),
    "layer not an object": (_set(["layers", 0], 7), "layers[0]"),
    "tensor_bytes text": (_set(["layers", 0, "tensor_bytes"], "1000"), "tensor_bytes"),
    "tensor_bytes negative": (_set(["layers", 0, "tensor_bytes"], -5), "tensor_bytes"),
    "tensor_bytes 10**400": (_set(["layers", 0, "tensor_bytes"], 10**400), "tensor_bytes"),
    "tensor_bytes float": (_set(["layers", 0, "tensor_bytes"], 1.5), "tensor_bytes"),
    "tensor_bytes bool": (_set(["layers", 0, "tensor_bytes"], True), "tensor_bytes"),
    "unknown kind": (_set(["layer_kinds", 0], "warp_attention"), "warp_attention"),
    "kind not text": (_set(["layer_kinds", 0], 3), "layer_kinds[0]"),
    "peak a list": (_set(["peak"], [1, 2]), "peak"),
    "peak bytes text": (_set(["peak", "transient_bytes"], "x"), "transient_bytes"),
    "notes not text": (_set(["notes"], [1]), "notes"),
    "seconds negative": (_set(["prefill_seconds"], -1), "prefill_seconds"),
    "seconds infinite": (_set(["prefill_seconds"], float("inf")), "prefill_seconds"),
    "not an object": (None, "object"),
    # A result for another workload must not be compared with this one.
    "other batch": (_set(["batch"], 2), "batch"),
    "other prompt": (_set(["prompt_tokens"], 999), "prompt_tokens"),
    "other decode": (_set(["decode_tokens"], 5), "decode_tokens"),
    "other dtype": (_set(["dtype"], "float32"), "dtype"),
    "other model": (_set(["model_type"], "mistral"), "model_type"),
    "raw result for model": (_set(["mode"], "raw"), "raw"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_result_is_one_line(run_cli, tmp_path, llama_result, case: str) -> None:
    change, needle = TAMPERED[case]
    _request, result = llama_result
    if change is None:
        tampered: Any = [result]
    else:
        tampered = copy.deepcopy(result)
        change(tampered)
    path = tmp_path / "result.json"
    # allow_nan: Python writes Infinity, which its own reader accepts; a hostile file could too.
    path.write_text(json.dumps(tampered, allow_nan=True))
    found = run_cli("probe", "llama-3.2-1b", "--tokens", "40", "--device", "cpu", "--from-result", str(path))
    assert_one_line_error(found, needle)
    assert found.exit_code == 2


def test_escape_sequences_in_results_are_not_printed(run_cli, tmp_path, llama_result) -> None:
    _request, result = llama_result
    tampered = copy.deepcopy(result)
    tampered["notes"] = ["\x1b[2J\x1b[31mred\x07"]
    tampered["device"] = "cpu\x1b]0;title\x07"
    found = _from_result(run_cli, tmp_path, tampered)
    assert found.exit_code == 0
    assert "\x1b" not in found.stdout and "\x07" not in found.stdout
    assert "?[2J?[31mred?" in found.stdout


def test_raw_result_must_answer_the_request(run_cli, tmp_path) -> None:
    # llama-3.2-1b raw (theoretical): 16 layers of one [T, bytes/token] tensor each.
    path = tmp_path / "raw.json"
    path.write_text(json.dumps({"mode": "raw", "device": "cpu", "dtype": "uint8", "tensors": 3, "tensor_bytes": 1}))
    found = run_cli("probe", "llama-3.2-1b", "--raw", "--tokens", "40", "--from-result", str(path))
    assert_one_line_error(found, "tensors", "16")
