"""llama.cpp's GPU/CPU split: which layers, caches and buffers land on which device.

llama.cpp (src/llama-model.cpp load_tensors, commit 0c1e570 and current) counts the output layer
as one more layer after the repeating ones: with ``n_gpu_layers`` (``-ngl``) N, the layers from
``i_gpu_start = max(n_layer + 1 - N, 0)`` on go to the GPUs, the output layer (index n_layer)
among them, and ``min(N, n_layer + 1)`` slots are split over the GPUs at the cumulative, normalised
``tensor_split`` points (the device of slot s is the first whose split point exceeds
s / offloaded slots). The input layer (token embeddings) always stays on the CPU. Each layer's KV
cache lives with the layer (src/llama-kv-cache.cpp: ``model.dev_layer(il)``) unless
``--no-kv-offload``, which keeps every cache on the CPU. Pure: integers in, integers out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

CPU = -1


@dataclass(frozen=True)
class LayerWeights:
    """Weights by llama.cpp layer: the input layer (token embeddings), each repeating layer, and
    the output layer (final norm and head; a copy of the embeddings when the head is tied).
    ``exact`` is False when the per-layer split is an estimate (a config, not a GGUF). The last
    ``nextn`` layers are NextN (MTP) blocks that llama.cpp counts in -ngl but neither loads nor
    caches (0 bytes here; kvcalc.inputs.gguf.nextn_layers)."""

    input: int
    layers: tuple[int, ...]
    output: int
    exact: bool = True
    nextn: int = 0

    @property
    def total(self) -> int:
        return self.input + sum(self.layers) + self.output


@dataclass(frozen=True)
class Device:
    name: str
    weights: int
    kv_cache: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute


def split_points(tensor_split: Sequence[float], gpus: int) -> list[float]:
    """llama.cpp's cumulative, normalised split points (equal shares when none are given)."""
    shares = list(tensor_split) if tensor_split else [1.0] * gpus
    if len(shares) != gpus or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ValueError("tensor_split needs one non-negative share per GPU, not all zero")
    total, points = 0.0, []
    for share in shares:
        total += share
        points.append(total)
    return [p / total for p in points]


def layer_devices(n_layer: int, n_gpu_layers: int, points: Sequence[float]) -> list[int]:
    """The device of each layer slot 0..n_layer (the last is the output layer): a GPU index or CPU."""
    start = max(n_layer + 1 - n_gpu_layers, 0)
    offloaded = min(n_gpu_layers, n_layer + 1) if points else 0
    devices = []
    for il in range(n_layer + 1):
        if il < start or il - start >= offloaded:
            devices.append(CPU)
            continue
        where = (il - start) / offloaded
        # std::upper_bound: the first split point greater than ``where``.
        devices.append(next((i for i, p in enumerate(points) if p > where), len(points) - 1))
    return devices


def place(
    weights: LayerWeights,
    kv_per_layer: Sequence[int],
    *,
    n_gpu_layers: int,
    gpus: int,
    tensor_split: Sequence[float] = (),
    kv_offload: bool = True,
    compute: int = 0,
) -> tuple[Device, ...]:
    """What each GPU and the CPU hold: weights, KV cache and compute buffer. Every backend that
    holds a layer reserves a compute buffer; ``compute`` (the whole graph's largest stage) is
    taken for each, an upper bound when layers are split."""
    n_layer = len(weights.layers)
    if len(kv_per_layer) != n_layer:
        raise ValueError("one KV cache size per layer")
    slots = layer_devices(n_layer, n_gpu_layers, split_points(tensor_split, gpus) if gpus else [])
    held: dict[int, list[int]] = {d: [0, 0] for d in [*range(gpus), CPU]}
    held[CPU][0] += weights.input
    for il, device in enumerate(slots[:n_layer]):
        held[device][0] += weights.layers[il]
        held[device if kv_offload else CPU][1] += kv_per_layer[il]
    held[slots[n_layer]][0] += weights.output
    used = {d for d in slots} | {CPU}
    order = [*range(gpus), CPU]
    return tuple(
        Device("CPU" if d == CPU else f"GPU{d}", held[d][0], held[d][1], compute if d in used else 0) for d in order
    )


def largest_fitting(fits: Callable[[int], bool], n_layer: int) -> int:
    """The largest -ngl in 0..n_layer + 1 for which ``fits`` holds (0 if none); more layers on the
    GPUs only ever adds to them, so capacity's bisection finds it (shifted by one: it searches 1..)."""
    from kvcalc.calc.fit import largest

    found = largest(lambda n: fits(n - 1), n_layer + 2)
    return n_layer + 1 if found is None else max(found - 1, 0)
