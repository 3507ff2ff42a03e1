"""A scheduler run step by step with a stub step time of 1 s (so times are step counts), and
what each step fed: the engine scheduler tests' common harness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kvcalc.calc.simulate import Batch, Done, Live, Request, Run, Scheduler, simulate


@dataclass
class StepLog:
    """A scheduler, wrapped: ``steps[k]`` is step k + 1's feed, request id -> tokens fed."""

    inner: Scheduler
    steps: list[dict[int, int]] = field(default_factory=list)

    @property
    def pool_units(self) -> int:
        return self.inner.pool_units

    @property
    def unit_tokens(self) -> int:
        return self.inner.unit_tokens

    @property
    def preemptions(self) -> int:
        return self.inner.preemptions

    def admit(self, live: Live) -> None:
        self.inner.admit(live)

    def schedule(self) -> tuple[Batch, str | None]:
        batch, stall = self.inner.schedule()
        if batch:
            self.steps.append({live.request.id: n for live, n in batch})
        return batch, stall

    def release(self, live: Live) -> None:
        self.inner.release(live)

    def running(self) -> int:
        return self.inner.running()

    def waiting(self) -> int:
        return self.inner.waiting()

    def used_units(self) -> int:
        return self.inner.used_units()

    def refused(self, request: Request) -> str | None:
        return self.inner.refused(request)


def run_steps(scheduler: Scheduler, requests: Sequence[tuple[float, int, int]],
              prefixes: Sequence[tuple[int, int]] = ()) -> tuple[Run, StepLog, dict[int, Done]]:  # fmt: skip
    """Run (arrival s, prompt, output) requests, ids in order, one second a step; ``prefixes``: each
    request's (shared prefix group, its length), where given."""
    log = StepLog(scheduler)
    groups = list(prefixes) or [(-1, 0)] * len(requests)
    arrivals = [Request(i, at, prompt, output, *groups[i]) for i, (at, prompt, output) in enumerate(requests)]
    run = simulate(arrivals, log, lambda shape: 1.0)
    return run, log, {d.request.id: d for d in run.done}
