"""kvcalc.dtypes: the public parser and DType refuse what would make a byte count a float."""

from __future__ import annotations

import pytest

import kvcalc
from kvcalc import DType, UsageError


@pytest.mark.parametrize(
    ("call", "param"),
    [
        # A fractional group made a DType whose block was 1.5: estimate's total_bytes came out a
        # float (2076160.0 for llama-3.1-8b at 10 tokens).
        (lambda: kvcalc.parse_dtype("int4", quant_group=1.5), "quant_group"),
        (lambda: kvcalc.parse_dtype("int4", quant_group=True), "quant_group"),
        (lambda: kvcalc.parse_dtype("int4", quant_group=0), "quant_group"),
        # Not a name: AttributeError ('NoneType' object has no attribute 'strip') before.
        (lambda: kvcalc.parse_dtype(None), "text"),
        (lambda: kvcalc.parse_dtype(8), "text"),
        # A format built by hand.
        (lambda: DType("q3", 4.5, "half a bit more"), "bits"),
        (lambda: DType("q3", 4, "blocks of a float", block=1.5), "block"),
        (lambda: DType("q3", 4, "negative scales", block=32, meta_bytes=-2), "meta_bytes"),
    ],
)
def test_bad_formats_are_usage_errors_naming_the_parameter(call, param: str) -> None:
    with pytest.raises(UsageError) as raised:
        call()
    assert raised.value.params == (param,)


def test_a_group_quantized_format_keeps_bytes_whole() -> None:
    # int4 in groups of 32: a 1,024-element row is 32 groups x (32 x 4 bits = 16 B + 4 B of fp16
    # scale and zero) = 640 B; llama-3.1-8b's rows are 8 heads x 128 = 1,024 elements, K and V in
    # 32 layers at 10 tokens: 640 x 2 x 32 x 10 = 409,600 B.
    int4 = kvcalc.parse_dtype("int4", quant_group=32)
    assert int4.row_bytes(1024) == (512, 128)
    total = kvcalc.estimate("llama-3.1-8b", tokens=10, kv_dtype=int4).total_bytes
    assert type(total) is int and total == 409_600
