"""The readers' shared helpers: cleaned log lines, Prometheus samples, printed sizes, and the
readers found beside each engine package."""

from __future__ import annotations

from kvcalc.engines.observing import Answer, clean_lines, printed_bytes, prometheus


def test_clean_lines_drop_colour_codes_and_progress_bars() -> None:
    text = "\x1b[32mINFO\x1b[0m ready  \nLoading 10%\rLoading 100%\r\n"
    assert clean_lines(text) == ["INFO ready", "Loading 100%"]


def test_prometheus_reads_labels_with_commas_quotes_and_escapes() -> None:
    # The exposition format (prometheus.io/docs/instrumenting/exposition_formats): labels in braces,
    # values escaped with backslashes, an optional timestamp after the value.
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",note="a, \\"b\\""} 1.0\n'
        'vllm:num_requests_running{model_name="m"} 3.0 1700000000000\n'
        "garbage line\n"
    )
    samples = prometheus(text)
    assert samples[0] == ("vllm:cache_config_info", {"block_size": "16", "cache_dtype": "auto", "note": 'a, "b"'}, 1.0)
    assert samples[1] == ("vllm:num_requests_running", {"model_name": "m"}, 3.0)
    assert len(samples) == 2


def test_printed_bytes_keep_binary_and_decimal_units_apart() -> None:
    assert printed_bytes("4.25", "GiB") == 4 * 2**30 + 2**28  # 4.25 x 2^30
    assert printed_bytes("160.63", "GB") == 160_630_000_000
    assert printed_bytes("1", "MiB") == 1_048_576


def test_an_answer_that_is_not_json_reads_as_none() -> None:
    assert Answer(200, '{"a": 1}').json() == {"a": 1}
    assert Answer(200, "<html>").json() is None
    assert Answer(404, '{"a": 1}').json() is None
