"""Tiresias-style LAS: queues by attained GPU service, preemption at a quantum, and
the starvation guard.

One node of 4 GPUs; now is 600. A job running since 0 on all 4 GPUs has
attained 4 x 600 = 2400 GPU-seconds in this run. Thresholds [1000] make two
queues: below 1000 GPU-seconds (queue 0) and from 1000 on (queue 1).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from builders import node
from gpufleet.core.cycle import run_cycle
from gpufleet.policies.config import PolicyError, parse_policy
from gpufleet.policies.preemption import AttainedServiceVictims
from gpufleet.policies.priority import LasArgs, LeastAttainedService
from scenario.harness import Outcome, Scenario, qjob

NOW = 600


@pytest.mark.parametrize(
    ("thresholds", "starve", "attained", "waited", "level"),
    [
        # Continuous LAS: the attained service itself.
        ((), 0, [0, 50, 3000], [0, 0, 0], [0, 50, 3000]),
        # [100, 1000]: 0..99 -> 0, 100..999 -> 1, 1000.. -> 2.
        ((100, 1000), 0, [0, 99, 100, 999, 1000, 5000], [0] * 6, [0, 0, 1, 1, 2, 2]),
        # A 600 s starve limit: waited 600 -> first queue, waited 599 keeps queue 2.
        ((100, 1000), 600, [5000, 5000], [600, 599], [0, 2]),
    ],
)
def test_queue_levels(
    thresholds: tuple[float, ...],
    starve: int,
    attained: list[float],
    waited: list[float],
    level: list[float],
) -> None:
    args = LasArgs(thresholds_gpu_s=thresholds, starve_limit_s=starve)
    got = args.level(np.array(attained, dtype=float), np.array(waited, dtype=float))
    assert got.tolist() == level


def las_cycle(
    waiting: dict[str, object],
    *,
    quantum_s: int = 300,
    starve_limit_s: int = 0,
    checkpoint: int | None = 300,
) -> Outcome:
    sc = Scenario([node("a").gpus(4)], now=NOW, backfill="none", preemption=True)
    saved = {"checkpoint_interval_s": 300, "last_checkpoint": checkpoint}
    sc.run(qjob("long").gpus(4).limit(90_000).with_(**saved), start=0, on="a")
    sc.submit(qjob("new").gpus(4).submit(500).with_(**waiting))
    args = LasArgs(thresholds_gpu_s=(1000,), starve_limit_s=starve_limit_s)
    profile = replace(
        sc.profile(),
        ordering=LeastAttainedService(args),
        preemption=AttainedServiceVictims(args, quantum_s),
    )
    return sc._outcome(run_cycle(sc.snapshot(), profile))


@pytest.mark.parametrize(
    ("waiting", "quantum_s", "starve_limit_s", "preempted"),
    [
        # new has attained 0 (queue 0), long 2400 (queue 1), long ran 600 >= 300: preempt.
        ({}, 300, 0, {"long": "new"}),
        # The quantum not yet reached (600 < 900): long keeps running.
        ({}, 900, 0, {}),
        # new attained 1500 before a requeue: queue 1 like long, so no preemption.
        ({"gpu_seconds_attained": 1500.0, "requeued_at": 400}, 300, 0, {}),
        # Same, but it has waited 600 - 400 = 200 >= 150: starved, so queue 0 again.
        ({"gpu_seconds_attained": 1500.0, "requeued_at": 400}, 300, 150, {"long": "new"}),
    ],
)
def test_a_job_of_an_earlier_queue_preempts_at_the_quantum(
    waiting: dict[str, object], quantum_s: int, starve_limit_s: int, preempted: dict[str, str]
) -> None:
    out = las_cycle(waiting, quantum_s=quantum_s, starve_limit_s=starve_limit_s)
    assert out.preempted == preempted
    if preempted:
        assert out.starts == {"new": ["a"]}
    else:
        assert out.reasons == {"new": "Resources"}


def test_a_job_that_saved_no_checkpoint_in_this_run_is_not_stopped() -> None:
    # Stopped now it would resume from its start: preempted at every quantum, it
    # would never end (the replay of a 1800 s interval under a 300 s quantum).
    out = las_cycle({}, checkpoint=None)
    assert out.preempted == {}
    assert out.reasons == {"new": "Resources"}


def test_within_a_queue_jobs_keep_submission_order() -> None:
    sc = Scenario([node("a").gpus(4)], now=NOW, backfill="none")
    sc.submit(
        qjob("late-0").gpus(4).submit(300),  # queue 0
        qjob("early-1").gpus(4).submit(100).with_(gpu_seconds_attained=1200.0),  # queue 1
        qjob("early-0").gpus(4).submit(200).with_(gpu_seconds_attained=900.0),  # queue 0
    )
    profile = replace(
        sc.profile(), ordering=LeastAttainedService(LasArgs(thresholds_gpu_s=(1000,)))
    )
    out = sc._outcome(run_cycle(sc.snapshot(), profile))
    # Queue 0 first, by submission (early-0 at 200, then late-0), then queue 1.
    assert out.starts == {"early-0": ["a"]}
    assert out.reasons == {"late-0": "Resources", "early-1": "Priority"}


def test_las_preemption_needs_the_las_ordering() -> None:
    text = '[ordering]\nplugin = "fifo"\n[preemption]\nenabled = true\nplugin = "las"\n'
    with pytest.raises(PolicyError, match=r"preemption\.plugin: 'las' needs ordering\.plugin"):
        parse_policy(text, "p.toml")
    ok = parse_policy(text.replace('"fifo"', '"las"'), "p.toml").profile()
    assert isinstance(ok.preemption, AttainedServiceVictims)
