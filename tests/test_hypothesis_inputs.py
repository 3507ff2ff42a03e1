"""Property tests for files kvcalc reads besides configs: probe results (--from-result) and request
mixes (--lengths). Whatever a file holds, kvcalc answers or refuses with a KvcalcError; it never
raises anything else, and a result it accepts is one it can print."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcalc.calc.requests import parse_lengths
from kvcalc.engines.transformers.crosscheck import check_model, validate_result
from kvcalc.errors import KvcalcError

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 1, 2**60, 2**60 + 1, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["full_attention", "sliding_attention", "model", "raw", "bfloat16", "float32", "llama"])
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a JSON value, so a mutation can land at any depth."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*prefix, index))
    return found


@pytest.fixture(scope="module")
def llama_case() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A real request and the real probe's result for llama-3.2-1b at 40 tokens on CPU."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvcalc.api import load_model
    from kvcalc.calc.estimate import Workload
    from kvcalc.dtypes import BF16
    from kvcalc.engines import make_engine
    from kvcalc.engines.transformers.crosscheck import model_request
    from kvcalc.engines.transformers.torch_probe import run
    from kvcalc.inputs.presets import get_preset
    from tests.helpers.theoretical import estimate

    spec = load_model("llama-3.2-1b")
    est = estimate(spec, Workload(tokens=40, kv_dtype=BF16), engine=make_engine("transformers")[0])
    request = model_request(get_preset("llama-3.2-1b").config, est, decode=2, device="cpu")
    return (spec, est), request, run(request)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_results_are_accepted_or_refused_cleanly(llama_case, data) -> None:
    (spec, est), request, result = llama_case
    mutated = copy.deepcopy(result)
    paths = _paths(mutated)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(paths))
        target = mutated
        for key in path[:-1]:
            if not isinstance(target, dict | list):
                break
            try:
                target = target[key]
            except (KeyError, IndexError, TypeError):
                break
        else:
            action = data.draw(st.sampled_from(["replace", "delete"]))
            try:
                if action == "delete":
                    del target[path[-1]]
                else:
                    target[path[-1]] = data.draw(values)
            except (KeyError, IndexError, TypeError):
                pass
    # Through JSON as a file would carry it (non-finite floats and all).
    reread = json.loads(json.dumps(mutated, allow_nan=True))
    try:
        checked = validate_result(reread, request, where="result.json", model_types=(spec.model_type,))
    except KvcalcError:
        return
    # Accepted: the comparison and its printing must work.
    from kvcalc.engines.transformers.probe_report import probe_items, probe_json

    check = check_model(spec, est, checked)
    probe_items(spec.name, check, checked, 0)
    json.dumps(probe_json(check, checked, 0, []))


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.lists(
            st.lists(
                st.one_of(st.text(max_size=6), st.integers(-5, 10**20).map(str), st.sampled_from(["²", "①", "٣"])),
                min_size=1,
                max_size=3,
            ),
            max_size=5,
        ).map(lambda rows: "prompt,output\n" + "\n".join(",".join(r) for r in rows)),
        st.lists(values, max_size=4).map(lambda items: "\n".join(json.dumps(i, allow_nan=True) for i in items)),
    ),
    bom=st.booleans(),
)
def test_lengths_files_parse_or_refuse_cleanly(text: str, bom: bool) -> None:
    try:
        mix = parse_lengths(("\ufeff" if bom else "") + text, name="mix")
    except KvcalcError:
        return
    assert mix.requests == sum(mix.counts.values()) > 0 and all(t > 0 for t in mix.counts)
    assert mix.prompt_tokens >= 0 and mix.output_tokens >= 0
    assert mix.prompt_tokens + mix.output_tokens == sum(t * n for t, n in mix.counts.items())
