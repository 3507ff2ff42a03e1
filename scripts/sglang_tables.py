"""Print, for every model_type transformers registers, the architecture SGLang would build and
whether SGLang serves it with its hybrid sliding-window pool or as a multimodal model: the tables
``kvcalc.engines.sglang.releases`` holds. Run it with SGLang's own Python (the environment .ci/run
builds): ``.venv-sglang/bin/python scripts/sglang_tables.py``. It uses the probe's import of
SGLang, so the same stand-ins apply."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "kvcalc" / "engines" / "sglang"))

import sglang_probe

EXTRA = {"mimo_v2": "MiMoV2ForCausalLM", "minimax_m3_vl_text": "MiniMaxM3SparseForCausalLM"}


def main() -> None:
    sg = sglang_probe._import_sglang()
    from sglang.version import __version__
    from transformers import CONFIG_MAPPING

    config = sg["model_config"]
    hybrid, multimodal = [], []
    pairs = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            pairs.append((model_type, sglang_probe._architecture({"model_type": model_type}, sg["registry"])))
        except sglang_probe.ProbeError:
            continue
    # Model types kvcalc reads that this transformers does not register, with the class their
    # checkpoints name.
    pairs += [(model_type, arch) for model_type, arch in EXTRA.items() if model_type not in CONFIG_MAPPING]
    for model_type, arch in sorted(pairs):
        if config.is_hybrid_swa_model([arch]):
            hybrid.append(model_type)
        if config.is_multimodal_model([arch]):
            multimodal.append(model_type)
    tables = {"hybrid_swa": sorted(set(hybrid)), "multimodal": sorted(set(multimodal))}
    print(json.dumps({"sglang_version": __version__, **tables}, indent=1))


if __name__ == "__main__":
    main()
