"""llama.cpp's GPU/CPU split (kvcalc.calc.offload, fit --gpu-layers): layer placement as
src/llama-model.cpp load_tensors does it, and what each device holds, derived by hand."""

from __future__ import annotations

import json

import pytest

from kvcalc import api
from kvcalc.calc.offload import CPU, LayerWeights, largest_fitting, layer_devices, place, split_points

# Llama 3.1 8B at 32,768 tokens: each layer's K and V are 32,768 x 2 x 8 x 128 x 2 B = 134,217,728 B.
KV_LAYER = 134_217_728
# Weights by layer from the 16,060,522,496 B checkpoint: embeddings 128,256 x 4,096 x 2 B = 1,050,673,152
# (the input on the CPU, and again as the untied output head), the rest in 32 equal layers:
# (16,060,522,496 - 2 x 1,050,673,152) / 32 = 436,224,256.
EMBED, LAYER = 1_050_673_152, 436_224_256


def test_output_layer_counts_as_one_more() -> None:
    # i_gpu_start = max(n_layer + 1 - ngl, 0): -ngl 33 offloads all 32 layers and the output layer,
    # -ngl 32 leaves layer 0 on the CPU, -ngl 1 only the output layer, -ngl 0 nothing.
    one = [1.0]
    assert layer_devices(32, 33, one) == [0] * 33
    assert layer_devices(32, 99, one) == [0] * 33
    assert layer_devices(32, 32, one) == [CPU] + [0] * 32
    assert layer_devices(32, 1, one) == [CPU] * 32 + [0]
    assert layer_devices(32, 0, one) == [CPU] * 33
    assert layer_devices(32, 33, []) == [CPU] * 33  # no GPU at all


def test_tensor_split_points() -> None:
    # -ts 3,1 over 2 GPUs: split points 0.75 and 1.0; slot s of 33 goes to the first point above s / 33:
    # slots 0-24 (24 / 33 = 0.727) to GPU0, 25-32 (25 / 33 = 0.758) to GPU1.
    points = split_points([3, 1], 2)
    assert points == [0.75, 1.0]
    devices = layer_devices(32, 33, points)
    assert devices.count(0) == 25 and devices.count(1) == 8 and devices[24] == 0 and devices[25] == 1
    assert split_points([], 4) == [0.25, 0.5, 0.75, 1.0]
    with pytest.raises(ValueError):
        split_points([1, 0], 3)


def test_place_by_hand() -> None:
    weights = LayerWeights(EMBED, (LAYER,) * 32, EMBED)
    kv = [KV_LAYER] * 32
    # -ngl 20: layers 13-31 and the output layer on the GPU.
    gpu, cpu = place(weights, kv, n_gpu_layers=20, gpus=1, compute=279_447_552)
    assert gpu.weights == 19 * LAYER + EMBED == 9_338_934_016
    assert gpu.kv_cache == 19 * KV_LAYER == 2_550_136_832
    assert cpu.weights == EMBED + 13 * LAYER and cpu.kv_cache == 13 * KV_LAYER
    assert gpu.compute == cpu.compute == 279_447_552
    # --no-kv-offload: every cache on the CPU.
    gpu, cpu = place(weights, kv, n_gpu_layers=33, gpus=1, kv_offload=False, compute=1)
    assert gpu.kv_cache == 0 and cpu.kv_cache == 32 * KV_LAYER
    assert gpu.weights == 32 * LAYER + EMBED and cpu.weights == EMBED


def test_largest_fitting() -> None:
    assert largest_fitting(lambda n: n <= 20, 32) == 20
    assert largest_fitting(lambda n: True, 32) == 33
    assert largest_fitting(lambda n: n == 0, 32) == 0


def test_fit_offload_llama_on_a_4090() -> None:
    # RTX 4090: 25,756,172,288 B, less 536,870,912 B assumed for the CUDA context = 25,219,301,376.
    # Everything offloaded: 32 x 436,224,256 + 1,050,673,152 + 32 x 134,217,728 + 279,447,552 (compute,
    # the output head of a 512-token ubatch: 4 x 512 x (128,256 + 8,192) + 2,048) = 19,584,264,192.
    report = api.fit_offload("llama-3.1-8b", gpu_layers="auto", gpu="rtx-4090", tokens=32_768)
    assert report.gpu_layers == 33
    gpu = report.devices[0]
    assert gpu.total == 32 * LAYER + EMBED + 32 * KV_LAYER + 279_447_552 == 19_584_264_192
    assert report.fits is True
    # At 131,072 tokens the cache is 4 x larger (17,179,869,184 B): all 33 slots no longer fit. Each
    # layer moved off takes 436,224,256 + 536,870,912 = 973,095,168 B with it.
    long = api.fit_offload("llama-3.1-8b", gpu_layers="auto", gpu="rtx-4090", tokens=131_072)
    room = 25_219_301_376
    full = 32 * LAYER + EMBED + 32 * 4 * KV_LAYER + 279_447_552
    assert full > room
    moved = -(-(full - room) // (LAYER + 4 * KV_LAYER))  # layers that must go back to the CPU
    assert long.gpu_layers == 33 - moved
    assert long.devices[0].total <= room


def test_fit_offload_cli(run_cli) -> None:
    data = json.loads(
        run_cli("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-4090", "-ngl", "20", "-t", "32k",
                "--json").stdout
    )  # fmt: skip
    assert data["gpu_layers"] == 20
    gpu, cpu = data["devices"]
    assert gpu["kv_cache_bytes"] == 2_550_136_832 and cpu["kv_cache_bytes"] == 13 * KV_LAYER
    text = run_cli("fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "rtx-4090", "-ngl", "auto").stdout
    flat = " ".join(text.split())  # notes wrap at the terminal's width
    assert "verdict fits" in flat and "a GGUF file gives them exactly" in flat


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--gpu", "h100", "--gpu-layers", "10"), "--gpu-layers is llama.cpp's"),
        (("--engine", "llama.cpp", "--gpu-layers", "auto"), "needs the GPU's memory"),
        (("--engine", "llama.cpp", "--gpu", "h100", "--gpus", "2", "-ngl", "9", "--tensor-split", "1"), "2 non-neg"),
        (("--engine", "llama.cpp", "--gpu", "h100", "-ngl", "9", "--tensor-split", "a,b"), "numbers separated"),
        (("--gpu", "h100", "--no-kv-offload"), "go with --gpu-layers"),
    ],
)
def test_offload_errors(run_cli, args: tuple[str, ...], message: str) -> None:
    result = run_cli("fit", "llama-3.1-8b", *args)
    assert result.exit_code == 2 and message in result.stderr
