"""Print the tables of kvcalc/engines/mlx/releases.py from mlx-lm's own source.

Run with the Python of the MLX environment (``.venv-mlx/bin/python scripts/mlx_tables.py``). For
each module of ``mlx_lm.models`` with a ``Model`` class it says which cache classes the
``make_cache`` that class has (its own or inherited) builds: none means ``make_prompt_cache``
gives every layer a KVCache, or a RotatingKVCache under max_kv_size. It also says which modules
cache MLA as K and V expanded per head, which keep a recurrent state from the float32 kernels, and
prints mlx-lm's model-type remapping.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

CLASSES = ("KVCache", "RotatingKVCache", "ChunkedKVCache", "ArraysCache", "CacheList")


def cache_classes(model: type) -> tuple[str, ...] | None:
    """The cache classes the model's make_cache names, following a wrapper's delegation to its
    language model; None when it has no make_cache."""
    make_cache = getattr(model, "make_cache", None)
    if make_cache is None:
        return None
    source = inspect.getsource(make_cache)
    found = {name for name in CLASSES if re.search(rf"\b{name}\(", source)}
    if not found and "language_model.make_cache" in source:
        return ("delegates",)
    return tuple(sorted(found))


def main() -> int:
    import mlx_lm
    from mlx_lm import utils

    root = Path(mlx_lm.__file__).parent / "models"
    plain, own, expanded, fp32_state, failed = [], {}, [], [], []
    for path in sorted(root.glob("*.py")):
        if path.stem in ("base", "cache") or "class Model" not in path.read_text():
            continue
        try:
            module = importlib.import_module(f"mlx_lm.models.{path.stem}")
        except (Exception, SystemExit) as exc:  # a module that needs an optional package (olmo exits)
            failed.append(f"{path.stem}: {exc}")
            continue
        classes = cache_classes(module.Model)
        if classes is None:
            plain.append(path.stem)
        else:
            own[path.stem] = classes
        text = path.read_text()
        if "kv_lora_rank" in text and "kv_b_proj(" in text and "kv_latent" not in text:
            expanded.append(path.stem)
        if re.search(r"from \.(ssm|gated_delta) import", text):
            fp32_state.append(path.stem)
    print(f"# mlx-lm {mlx_lm.__version__}")
    print("PLAIN_MODULES =", plain)
    for kind in (*CLASSES, "delegates"):
        print(f"{kind}:", sorted(m for m, c in own.items() if kind in c))
    print("no cache class named:", sorted(m for m, c in own.items() if not c))
    print("EXPANDED_MLA =", expanded)
    print("FP32_STATE (ssm.py / gated_delta.py kernels) =", fp32_state)
    print("MODEL_REMAPPING =", utils.MODEL_REMAPPING)
    print("not imported:", failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
