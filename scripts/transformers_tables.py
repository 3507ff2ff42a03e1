"""Write kvcalc/inputs/hf/reads.py: for every model type transformers registers, the config
fields its own code reads that the guard could warn about (kvcalc.inputs.hf.guard).

Run it with the Python that has the pinned transformers installed (the project's test extra):
``python scripts/transformers_tables.py`` rewrites the table; ``--check`` exits 1 when the
checked-in table differs (tests/inputs/hf/test_reads.py runs the same comparison).

What counts as read. For a model type, the code is its folder ``models/<module>/`` (the module
name as transformers' ``model_type_to_module_name`` gives it): every ``modeling_*.py`` and
``configuration_*.py`` there, the modeling files of other models they import
(``from ..llama.modeling_llama import ...``), and ``cache_utils.py`` (the cache every model
builds). In that code a field is read when it appears as

- an attribute of a config object: ``config.X``, ``self.config.X``, ``text_config.X`` (any name
  ending in ``config``), or ``getattr(<config>, "X")`` / ``hasattr(<config>, "X")``;
- ``self.X`` loaded inside the config class's methods (``__post_init__`` derivations, such as a
  ``layer_types`` derived from ``sliding_window_pattern``), or ``kwargs.pop("X")``;
- a string key of a config or of a config class's ``kwargs``: ``config["X"]``,
  ``attn_config.get("X")``;
- a field of the config class whose name starts with a prefix the modeling code picks fields by
  (``param.startswith("t2u_")``: SeamlessM4T renames its ``t2u_*`` fields for a sub-model).

Fields nested in an object (``attn_config.kv_n_heads``) are not listed: the object is (it is read
as one: ``config.attn_config.X``, ``config.attn_config["X"]``, or named ``*_config``), and the guard
judges its fields by name when the model's code reads the object, since code often reads such an
object whole (``**attn_config``, a loop over its items).

Only model types whose own code takes a cache (``past_key_values``) are listed; the guard judges
the others' fields by name alone, and says so.

A quantization_config's fields are decided by its ``quant_method``: the config class
``AUTO_QUANTIZATION_CONFIG_MAPPING`` names (its ``__init__`` parameters, which ``from_dict``
fills, and its attribute reads), the quantizer ``AUTO_QUANTIZER_MAPPING`` names, and the
``integrations`` modules that quantizer imports.

Only fields the guard's name rule could name are kept (``shaping_reason`` is not None, or the name
spells a quantity in ``ALIASES``), and objects: the others are never warned about, whoever reads
them.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvcalc.inputs.hf.guard import ALIASES, shaping_reason  # noqa: E402

TABLE = ROOT / "src" / "kvcalc" / "inputs" / "hf" / "reads.py"
_ALIAS_NAMES = frozenset(n for names in ALIASES.values() for n in names)


def package_root() -> Path:
    spec = importlib.util.find_spec("transformers")
    if spec is None or spec.origin is None:
        raise SystemExit("transformers is not installed")
    return Path(spec.origin).parent


def _literal_dicts(path: Path, names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Module-level dicts of ``path`` built from literals: ``X = OrderedDict({...})`` / ``{...}``
    and ``X.update({...})``, in order."""
    found: dict[str, dict[str, str]] = {}
    wanted = set(names)
    for node in ast.parse(path.read_text()).body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "update"
            and isinstance(node.value.func.value, ast.Name)
        ):
            target, value = node.value.func.value.id, node.value.args[0] if node.value.args else None
        if target not in wanted or value is None:
            continue
        entries = _dict_entries(value)
        if entries is not None:
            found.setdefault(target, {}).update(entries)
    return found


def _dict_entries(node: ast.expr) -> dict[str, str] | None:
    if isinstance(node, ast.Dict):
        return {ast.literal_eval(k): _name_of(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.Call):  # OrderedDict({...}), OrderedDict([...]), OrderedDict(**{...}, **X)
        out: dict[str, str] = {}
        for arg in [*node.args, *(k.value for k in node.keywords if k.arg is None)]:
            if isinstance(arg, ast.Dict):
                out.update(_dict_entries(arg) or {})
            elif isinstance(arg, ast.List | ast.Tuple):
                for item in arg.elts:
                    if isinstance(item, ast.Tuple):
                        out[ast.literal_eval(item.elts[0])] = _name_of(item.elts[1])
        for keyword in node.keywords:
            if keyword.arg is not None:
                out[keyword.arg] = _name_of(keyword.value)
        return out
    return None


def _name_of(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else str(ast.literal_eval(node))


def model_types(root: Path) -> dict[str, str]:
    """Every registered model type with its module folder (configuration_auto.py, 5.x)."""
    auto = root / "models" / "auto"
    tables: dict[str, dict[str, str]] = {}
    for path in (auto / "auto_mappings.py", auto / "configuration_auto.py"):
        for name, entries in _literal_dicts(
            path, ("CONFIG_MAPPING_NAMES", "SPECIAL_MODEL_TYPE_TO_MODULE_NAME")
        ).items():
            tables.setdefault(name, {}).update(entries)
    special = tables.get("SPECIAL_MODEL_TYPE_TO_MODULE_NAME", {})
    return {t: special.get(t, t.replace("-", "_")) for t in sorted(tables["CONFIG_MAPPING_NAMES"])}


def _is_config(node: ast.expr) -> bool:
    """Whether an expression names a config object: ``config``, ``self.config``, ``text_config``."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith("config") or name == "cfg"


def _is_keyed(node: ast.expr) -> bool:
    """Whether a subscripted object holds config fields: a config (dict) or a config class's kwargs."""
    return _is_config(node) or (isinstance(node, ast.Name) and node.id in ("kwargs", "config_dict"))


def _string_arg(call: ast.Call, index: int) -> str | None:
    if (
        len(call.args) > index
        and isinstance(call.args[index], ast.Constant)
        and isinstance(call.args[index].value, str)
    ):
        return str(call.args[index].value)
    return None


def reads_in(tree: ast.AST, *, config_classes: bool) -> Iterator[str]:
    """The field names one parsed file reads (the module's docstring lists the forms); a field read
    as an object (``config.X.Y``, ``config.X["Y"]``, ``config.X.get(...)``) is given as ``X`` and
    again as ``{X}``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _is_config(node.value):
            yield node.attr
        if isinstance(node, ast.Attribute | ast.Subscript) and isinstance(node.value, ast.Attribute):
            inner = node.value
            if _is_config(inner.value):
                yield f"{{{inner.attr}}}"
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Name)
                and func.id in ("getattr", "hasattr")
                and node.args
                and _is_config(node.args[0])
            ):
                key = _string_arg(node, 1)
                if key:
                    yield key
            elif (
                isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") and _is_keyed(func.value)
            ):
                key = _string_arg(node, 0)
                if key:
                    yield key
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and _is_keyed(node.value):
            if isinstance(node.slice.value, str):
                yield node.slice.value
        elif config_classes and isinstance(node, ast.ClassDef):
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.ctx, ast.Load)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == "self"
                ):
                    yield inner.attr


_IMPORT = re.compile(r"from \.\.(\w+)\.(modeling_\w+) import")


def _files(root: Path, module: str) -> list[Path]:
    """A model's own modeling and configuration files, and the modeling files they import."""
    folder = root / "models" / module
    if not folder.is_dir():
        return []
    own = sorted([*folder.glob("modeling_*.py"), *folder.glob("configuration_*.py")])
    seen = {p.resolve() for p in own}
    queue = list(own)
    while queue:
        path = queue.pop()
        for other, stem in _IMPORT.findall(path.read_text()):
            target = root / "models" / other / f"{stem}.py"
            if target.is_file() and target.resolve() not in seen:
                seen.add(target.resolve())
                queue.append(target)
    return sorted(seen)


def _could_warn(name: str) -> bool:
    return name in _ALIAS_NAMES or shaping_reason(name) is not None


_TREES: dict[Path, frozenset[str]] = {}


def _file_reads(path: Path) -> frozenset[str]:
    """The fields one file reads that the guard could name, and the objects it reads (whose fields
    the guard judges by name)."""
    if path not in _TREES:
        tree = ast.parse(path.read_text())
        names = set(reads_in(tree, config_classes=path.name.startswith("configuration_")))
        objects = {n[1:-1] for n in names if n.startswith("{")}
        objects |= {n for n in names if n.endswith(("config", "configs", "cfg"))}  # sub-configs, read whole
        _TREES[path] = frozenset(n for n in names if not n.startswith("{") and (n in objects or _could_warn(n)))
    return _TREES[path]


def _renamed_fields(files: list[Path]) -> set[str]:
    """Fields the code reads under another name: those a ``name.startswith("t2u_")`` in the
    modeling code picks from the config class's fields (SeamlessM4T's text-to-unit model copies
    every ``t2u_*`` field onto its own config without the prefix)."""
    prefixes: set[str] = set()
    declared: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                path.name.startswith("modeling_")
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "startswith"
            ):
                prefix = _string_arg(node, 0)
                if prefix and prefix.endswith("_"):
                    prefixes.add(prefix)
            elif path.name.startswith("configuration_") and isinstance(node, ast.ClassDef):
                declared.update(
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                )
    return {f for f in declared if f.startswith(tuple(prefixes)) and _could_warn(f)} if prefixes else set()


def model_reads(root: Path) -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """The fields every model's cache code reads, each model type's module folder (where it is not
    the type's own name), and each folder's further reads; only models whose code takes a cache
    (``past_key_values``): the others are left to the guard's name rule."""
    common = sorted(_file_reads(root / "cache_utils.py"))
    modules: dict[str, str] = {}
    table: dict[str, list[str]] = {}
    for model_type, module in model_types(root).items():
        files = _files(root, module)
        if not any("past_key_values" in p.read_text() for p in files if p.parent.name == module):
            continue  # no cache: nothing kvcalc sizes (vision and audio encoders, ...)
        if module != model_type:
            modules[model_type] = module
        if module not in table:
            names = set().union(*(_file_reads(p) for p in files))
            names |= _renamed_fields(files)
            table[module] = sorted(n for n in names if n not in common)
    return common, modules, dict(sorted(table.items()))


def _quantizer_files(root: Path) -> dict[str, list[Path]]:
    """quant_method -> its quantizer's module and the integrations modules that module imports."""
    auto = root / "quantizers" / "auto.py"
    text = auto.read_text()
    modules = dict((cls, mod) for mod, cls in re.findall(r"from \.(quantizer_\w+) import (\w+)", text))
    mapping = _literal_dicts(auto, ("AUTO_QUANTIZER_MAPPING",))["AUTO_QUANTIZER_MAPPING"]
    out: dict[str, list[Path]] = {}
    for method, cls in mapping.items():
        module = modules.get(cls)
        if module is None:
            continue
        path = root / "quantizers" / f"{module}.py"
        integrations = re.findall(r"from \.\.integrations\.(\w+) import", path.read_text())
        out[method] = [path, *(root / "integrations" / f"{m}.py" for m in integrations)]
    return out


def _config_class_reads(root: Path) -> dict[str, set[str]]:
    """Config class name -> its __init__ parameters and the fields its methods read."""
    tree = ast.parse((root / "utils" / "quantization_config.py").read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    out: dict[str, set[str]] = {}
    for name, node in classes.items():
        names: set[str] = set(reads_in(node, config_classes=True))
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                names.update(a.arg for a in [*item.args.args, *item.args.kwonlyargs] if a.arg != "self")
        out[name] = names
    # A class reads what its bases in the file read.
    for name, node in classes.items():
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in out:
                out[name] |= out[base.id]
    return out


def quantization_reads(root: Path) -> dict[str, list[str]]:
    auto = root / "quantizers" / "auto.py"
    configs = _literal_dicts(auto, ("AUTO_QUANTIZATION_CONFIG_MAPPING",))["AUTO_QUANTIZATION_CONFIG_MAPPING"]
    class_reads = _config_class_reads(root)
    files = _quantizer_files(root)
    table: dict[str, list[str]] = {}
    for method in sorted(set(configs) | set(files)):
        names = set(class_reads.get(configs.get(method, ""), set()))
        names = names.union(*(_file_reads(p) for p in files.get(method, []) if p.is_file()))
        table[method] = sorted(n for n in names if _could_warn(n))  # what the guard could name
    # A bitsandbytes config says quant_method "bitsandbytes"; from_dict picks the _4bit or _8bit
    # class by its load_in_4bit / load_in_8bit (quantizers/auto.py): the base name reads either's.
    for method in [m for m in table if m.endswith(("_4bit", "_8bit"))]:
        base = method.rsplit("_", 1)[0]
        table[base] = sorted(set(table.get(base, [])) | set(table[method]))
    return dict(sorted(table.items()))


def render(
    version: str, models: tuple[list[str], dict[str, str], dict[str, list[str]]], quant: dict[str, list[str]]
) -> str:
    common, modules, reads = models

    def rows(table: dict[str, list[str]]) -> str:
        return "".join(f"    {json.dumps(key)}: {json.dumps(' '.join(names))},\n" for key, names in table.items())

    return (
        '"""What transformers\' own code reads of a config: the fields the guard may warn about.\n\n'
        "Generated by scripts/transformers_tables.py from the installed transformers (its docstring says\n"
        "what counts as read); do not edit. Only fields the guard's name rule could name are listed: a\n"
        "field no code of the model type reads cannot shape its cache. Values are space-separated\n"
        "names. Read lazily by kvcalc.inputs.hf.guard, only when a config holds a candidate field.\n"
        '"""\n\n'
        f"TRANSFORMERS_VERSION = {json.dumps(version)}\n\n"
        "# Read for every model type: cache_utils.py, which builds every model's cache.\n"
        f"COMMON_READS = {json.dumps(' '.join(common))}\n\n"
        "# model_type -> its folder under transformers/models, where that is not the type's own name.\n"
        "MODULES: dict[str, str] = {\n"
        + "".join(f"    {json.dumps(k)}: {json.dumps(v)},\n" for k, v in sorted(modules.items()))
        + "}\n\n"
        "# folder -> the further fields its modeling and configuration code reads.\n"
        "MODEL_READS: dict[str, str] = {\n"
        f"{rows(reads)}"
        "}\n\n"
        "# quantization_config.quant_method -> the fields its config class, quantizer and integrations read.\n"
        "QUANTIZATION_READS: dict[str, str] = {\n"
        f"{rows(quant)}"
        "}\n"
    )


def generate() -> str:
    root = package_root()
    return render(importlib.metadata.version("transformers"), model_reads(root), quantization_reads(root))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in table differs")
    args = parser.parse_args()
    text = generate()
    if args.check:
        if TABLE.read_text() != text:
            print(f"{TABLE.relative_to(ROOT)} is out of date: run scripts/transformers_tables.py", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
