"""kvcalc probe's command (kvcalc.cli.probe): its progress line."""

from __future__ import annotations


def test_probe_progress_states_the_expected_time(capsys) -> None:
    # Passes of 2,048 tokens, each taking 5 s (a fake clock): after the second of 16 passes the
    # remaining 14 x 2,048 tokens take 14 x 5 = 70 s.
    from kvcalc.cli.probe import _ProbeProgress

    clock = iter(float(t) for t in range(0, 1000, 5))
    with _ProbeProgress(raw=False, device="cpu") as progress:
        progress._time = lambda: next(clock)
        for done in range(2048, 32768 + 1, 2048):
            progress("prefill", done, 32768)
        progress("decode", 1, 2)
    err = capsys.readouterr().err
    assert "kvcalc probe: building a shrunk model" in err
    assert "about 70 s more to prefill 32,768 tokens" in " ".join(err.split())
