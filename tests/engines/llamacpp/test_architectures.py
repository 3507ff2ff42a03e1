"""One home for what kvcalc knows of llama.cpp's architectures: kvcalc.engines.llamacpp.architectures.

The GGUF reader (kvcalc.inputs.gguf), the llama.cpp engine (kvcalc.engines.llamacpp) and the llama.cpp probe
(kvcalc.engines.llamacpp.probe) each read the table instead of keeping lists of their own. These tests keep it
so: no architecture's name is spelled in those modules, and the table's records agree with themselves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvcalc.engines.llamacpp import architectures as table
from kvcalc.engines.llamacpp.architectures import ARCHITECTURES, Indexer, Layout, Ssm, Window, architecture, converted
from kvcalc.engines.sglang.releases import HYBRID_SWA_MODEL_TYPES, MULTIMODAL_MODEL_TYPES
from kvcalc.errors import SourceError
from kvcalc.inputs import gguf
from kvcalc.inputs.gguf import config as gguf_mapping
from kvcalc.inputs.gguf.header import GgufHeader
from tests.helpers.paths import SRC

TABLE = SRC / "engines" / "llamacpp" / "architectures.py"
NAMES = frozenset(a.name for a in ARCHITECTURES)
HF_TYPES = frozenset(t for a in ARCHITECTURES for t in (*a.hf_types, a.reads_as) if t is not None)


def _readers() -> list[Path]:
    """The modules that read llama.cpp architectures: the GGUF reader package, the llama.cpp engine
    package and the probe."""
    return sorted([*(SRC / "inputs" / "gguf").rglob("*.py"), *(SRC / "engines" / "llamacpp").rglob("*.py")])


def _spelled(path: Path, names: frozenset[str]) -> set[str]:
    """The names of ``names`` that are a string constant in the module at ``path`` (a whole literal or
    a whole literal part of an f-string: ``f"{arch}.attention"`` spells no name, ``"llama"`` does)."""
    tree = ast.parse(path.read_text(), str(path))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)} & names


def test_every_architecture_name_is_spelled_in_the_table_only() -> None:
    """Every llama.cpp architecture name (the table's, "llama", "gemma3", "qwen3next", "deepseek2",
    "glm4moe", "t5" ... all of them) is a string literal in exactly one of the modules that read
    architectures: the table.

    The scan covers the GGUF reader package (src/kvcalc/inputs/gguf/), the llama.cpp engine package
    (src/kvcalc/engines/llamacpp/, its probe included), with the ``ast`` module (comments
    and longer strings do not count). It is scoped so because many architecture names are also the
    text of HF model types ("llama", "t5", "mamba", "gemma2" ...), which the HF side of kvcalc
    (src/kvcalc/families/, src/kvcalc/configs.py, the other engines) spells as model types, as it
    should; the next test covers the names that are llama.cpp's alone across all of src/kvcalc."""
    where: dict[str, list[str]] = {name: [] for name in NAMES}
    for path in _readers():
        for name in _spelled(path, NAMES):
            where[name].append(str(path.relative_to(SRC)))
    table_module = str(TABLE.relative_to(SRC))
    assert {name: modules for name, modules in where.items() if modules != [table_module]} == {}


def test_llama_cpp_only_names_are_spelled_nowhere_else_in_kvcalc() -> None:
    """An architecture name that is no HF model type of the table ("deepseek2", "qwen3next", "gpt-oss",
    "glm4moe", "falcon-h1" ...) is a string literal in no module of src/kvcalc but the table."""
    # SGLang's tables are transformers model types by construction (scripts/sglang_tables.py reads
    # them off transformers' CONFIG_MAPPING), so a name there is an HF type even where the table
    # has no row for it ("mistral3").
    only = NAMES - HF_TYPES - HYBRID_SWA_MODEL_TYPES - MULTIMODAL_MODEL_TYPES
    assert {"deepseek2", "qwen3next", "gpt-oss", "glm4moe", "glm-dsa", "t5encoder"} <= only
    found = {str(p.relative_to(SRC)): _spelled(p, only) for p in SRC.rglob("*.py") if p not in (TABLE, *OWN_COPIES)}
    assert {module: names for module, names in found.items() if names} == {}


# Modules that hold another program's own copy of some of these names, as data about that program:
# Ollama's lists of the architectures it turns flash attention on for (fs/ggml/ggml.go, by release)
# are Ollama's vocabulary, read from its source; they are matched through the table (converted()).
OWN_COPIES = (SRC / "engines" / "ollama" / "releases.py",)


def test_the_table_spells_every_name() -> None:
    assert _spelled(TABLE, NAMES) == NAMES


def test_names_and_model_types_are_unique() -> None:
    names = [a.name for a in ARCHITECTURES]
    assert len(names) == len(set(names))
    hf_types = [t for a in ARCHITECTURES for t in a.hf_types]
    assert len(hf_types) == len(set(hf_types))
    for a in ARCHITECTURES:
        assert architecture(a.name) is a
        assert all(converted(t) is a for t in a.hf_types)
        # what a GGUF reads as converts back to it, but for an HF type shared by two architectures
        # (Nemotron-H's model_type nemotron_h for nemotron_h and nemotron_h_moe)
        assert a.reads_as is None or a.reads_as in a.hf_types or converted(a.reads_as) is not None
    assert architecture(None) is None and architecture(["llama"]) is None and converted("zamba2") is None


def test_records_agree_with_themselves() -> None:
    for a in ARCHITECTURES:
        assert (a.window is Window.DROPPED) == bool(a.dropped_windows), a.name
        assert {t for t, _ in a.dropped_windows} <= set(a.hf_types), a.name
        assert (a.layout is Layout.HYBRID) == (a.layer_types is not None), a.name
        recurrent = {Layout.SSM, Layout.HYBRID, Layout.NEMOTRON_H, Layout.NEMOTRON_H_MOE, Layout.GATED_DELTA_NET,
                     Layout.FALCON_H1, Layout.KIMI_LINEAR}  # fmt: skip
        assert (a.ssm is not None) == (a.layout in recurrent), a.name
        assert (a.layout is Layout.GATED_DELTA_NET) == (a.ssm is Ssm.GATED_DELTA_NET), a.name
        assert (a.indexer is not None) == (a.layout in {Layout.SPARSE_MLA, Layout.MINIMAX_M3}), a.name
        assert (a.refused is not None) == (a.reads_as is None), a.name
        assert a.swa_layers is None or a.window is Window.KEPT, a.name
        assert a.chunk is None or a.window is None, a.name
        if a.probe:  # the probe builds it from kvcalc's layers of an HF model type
            assert a.hf_types, a.name
    assert [a.name for a in ARCHITECTURES if a.chunk is not None] == ["llama4"]
    assert architecture("llama4").chunk == 8192  # type: ignore[union-attr]
    assert architecture("glm-dsa").indexer is Indexer.TYPED  # type: ignore[union-attr]


def test_the_gguf_reader_maps_every_layout() -> None:
    """Each layout is read by a mapping of its own or by the attention mapping, whose hooks name the rest."""
    own = set(gguf_mapping._MAPPINGS)
    hooked = set(gguf_mapping._KV_HEADS) | set(gguf_mapping._AFTER_ATTENTION)
    assert not own & hooked
    assert own | hooked | {Layout.ATTENTION} == set(Layout)


def test_the_reader_reads_what_the_table_says() -> None:
    assert table.readable() == gguf.ARCH_TYPES
    assert "t5encoder" not in gguf.ARCH_TYPES
    header = GgufHeader(3, {"general.architecture": "t5encoder"}, ())
    with pytest.raises(SourceError, match="'t5encoder' is not supported: an encoder-only T5"):
        gguf.gguf_config(header, "x.gguf")
    header = GgufHeader(3, {"general.architecture": "bert"}, ())
    with pytest.raises(SourceError, match=r"'bert' is not supported \(kvcalc reads arcee, cohere2, "):
        gguf.gguf_config(header, "x.gguf")


def test_the_probe_builds_what_the_table_says() -> None:
    builds = table.probe_types()
    assert builds == sorted(builds)
    assert {"llama", "mistral", "mixtral", "gemma3", "gemma3_text", "deepseek_v3", "qwen3_next"} <= set(builds)
    assert "qwen2_moe" not in builds and "nemotron_h" in builds
    assert converted("mistral").name == "llama"  # type: ignore[union-attr]
