"""``StateCache``'s conv history: kernel - 1 past inputs, or the whole kernel where the engine keeps it
or where the model's own code does (``whole_kernel``: mamba_ssm's ``allocate_inference_cache``)."""

from __future__ import annotations

from kvcalc.calc.estimate import Workload
from kvcalc.engines import make_engine
from kvcalc.spec import ModelSpec, StateCache
from tests.helpers.theoretical import estimate


def test_conv_history_is_kernel_minus_one_unless_someone_keeps_the_whole_kernel() -> None:
    lean = StateCache("mamba", 10, 4, 100)
    whole = StateCache("mamba", 10, 4, 100, whole_kernel=True)
    # 10 channels x (4 - 1) = 30 past inputs; x 4 = 40 where the whole kernel is kept.
    assert lean.conv_elements == 30 and lean.state_elements(whole_kernel=False) == (30, 100)
    assert lean.state_elements(whole_kernel=True) == (40, 100)
    # The model keeps the whole kernel: 40 whatever the engine asks.
    assert whole.conv_elements == 40 and whole.total_state_elements == 140
    assert whole.state_elements(whole_kernel=False) == whole.state_elements(whole_kernel=True) == (40, 100)
    assert whole.fields() == {"conv_elements": 40, "recurrent_elements": 100}


def test_theoretical_sizes_the_whole_kernel_the_model_keeps() -> None:
    spec = ModelSpec("m", (StateCache("mamba", 10, 4, 100, whole_kernel=True),), 1, None, "test", None)
    # (10 x 4 + 100) elements x 2 B (fp16, the spec names no dtype) x 3 sequences = 840.
    est = estimate(spec, Workload(tokens=50, batch=3), engine=make_engine("theoretical")[0])
    assert est.total_bytes == 140 * 2 * 3 == 840
