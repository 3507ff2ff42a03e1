"""What each Ollama release bundles and defaults to (src/kvcalc/engines/ollama/releases.py), from
github.com/ollama/ollama's tags."""

from __future__ import annotations

from kvcalc.engines.ollama.releases import GIB, bundled_llama_cpp, default_num_ctx, one_slot


def test_the_default_context_by_release() -> None:
    # envconfig/config.go OLLAMA_CONTEXT_LENGTH: 2048 at v0.6.6, 4096 at v0.6.7 .. v0.15.4.
    assert default_num_ctx((0, 6, 6), None)[0] == 2048
    assert default_num_ctx((0, 6, 7), None)[0] == 4096
    assert default_num_ctx((0, 15, 4), 80 * GIB)[0] == 4096


def test_the_default_context_by_vram_tier() -> None:
    # server/routes.go v0.15.5 .. v0.32.15: >= 47 GiB 262144, >= 23 GiB 32768, else 4096.
    assert default_num_ctx((0, 32, 15), None)[0] is None
    assert default_num_ctx((0, 32, 15), 80 * GIB)[0] == 262144
    assert default_num_ctx((0, 15, 5), 24 * GIB)[0] == 32768
    assert default_num_ctx((0, 15, 5), 23 * GIB - 1)[0] == 4096
    assert default_num_ctx((0, 20, 0), 47 * GIB)[0] == 262144


def test_the_bundled_llama_cpp_build() -> None:
    # LLAMA_CPP_VERSION at v0.30.0 and v0.32.15; Makefile.sync FETCH_HEAD at v0.24.0.
    assert bundled_llama_cpp((0, 30, 0)) == "b9452"
    assert bundled_llama_cpp((0, 32, 15)) == "b10488"
    assert bundled_llama_cpp((0, 24, 0)) == "ec98e2002"
    assert bundled_llama_cpp((0, 5, 0)) is None


def test_the_architectures_run_with_one_slot() -> None:
    # server/sched.go ``numParallel = 1`` lists: mllama always; qwen3vl from v0.12.7 (not at v0.12.6);
    # lfm2 from v0.15.5; qwen35 and nemotron_h from v0.17.1; nemotron_h_omni from v0.22.0.
    assert one_slot((0, 5, 8), "mllama")
    assert not one_slot((0, 12, 6), "qwen3vl") and one_slot((0, 12, 7), "qwen3vl")
    assert not one_slot((0, 15, 4), "lfm2") and one_slot((0, 15, 5), "lfm2")
    assert not one_slot((0, 17, 0), "qwen35") and one_slot((0, 17, 1), "qwen35") and one_slot((0, 17, 1), "nemotron_h")
    assert not one_slot((0, 21, 0), "nemotron_h_omni") and one_slot((0, 32, 15), "nemotron_h_omni")
    assert not one_slot((0, 32, 15), "llama") and not one_slot((0, 32, 15), "qwen3")
