"""The table of what transformers' code reads (kvcalc.inputs.hf.reads) is what
scripts/transformers_tables.py makes of the pinned transformers, and names what the guard needs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.inputs.hf import reads
from kvcalc.inputs.hf.guard import model_reads, quantization_reads

ROOT = Path(__file__).resolve().parents[3]


def test_the_table_matches_the_installed_transformers() -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    version = importlib.metadata.version("transformers")
    if version != reads.TRANSFORMERS_VERSION:
        pytest.skip(f"the table is of transformers {reads.TRANSFORMERS_VERSION}, {version} is installed")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "transformers_tables.py"), "--check"],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_model_types_resolve_through_their_folder() -> None:
    # gemma3_text is Gemma3TextConfig's type; its code is models/gemma3 (modeling_gemma3.py, which
    # derives layer_types from sliding_window_pattern in configuration_gemma3.py).
    assert reads.MODULES["gemma3_text"] == "gemma3"
    assert model_reads("gemma3_text") == model_reads("gemma3")
    assert {"sliding_window", "sliding_window_pattern", "num_key_value_heads"} <= (model_reads("gemma3_text") or set())
    # cache_utils.py reads these for every model.
    assert {"layer_types", "sliding_window", "attention_chunk_size"} <= (model_reads("llama") or set())
    assert model_reads("no_such_model") is None


def test_quantizers_are_found_by_quant_method() -> None:
    # CompressedTensorsConfig takes kv_cache_scheme (utils/quantization_config.py); the BitNet
    # quantizer's linear_class is read but can shape nothing, so it is not listed.
    assert "kv_cache_scheme" in (quantization_reads("compressed-tensors") or set())
    assert quantization_reads("bitnet") == frozenset()
    assert quantization_reads("bitsandbytes") == quantization_reads("bitsandbytes_4bit") | (
        quantization_reads("bitsandbytes_8bit") or frozenset()
    )
    assert quantization_reads("no_such_method") is None


def test_fields_read_under_another_name_are_listed() -> None:
    # SeamlessM4TForTextToSpeech copies every t2u_* field onto its text-to-unit model's config
    # without the prefix (modeling_seamless_m4t.py, `param.startswith("t2u_")`): its decoder's layer
    # count is t2u_decoder_layers, though no code spells config.t2u_decoder_layers.
    assert {"t2u_decoder_layers", "t2u_decoder_attention_heads"} <= (model_reads("seamless_m4t") or set())
