"""The synthetic workload: deterministic, at the target load, with the documented mix."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from gpufleet.core.model import InvalidSpec
from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.synthetic import WorkloadShape, generate, generate_from_options


def test_same_seed_same_jobs_other_seed_other_jobs() -> None:
    assert generate(500, seed=3, gpus_total=256) == generate(500, seed=3, gpus_total=256)
    assert generate(500, seed=3, gpus_total=256) != generate(500, seed=4, gpus_total=256)


def test_hundred_thousand_jobs_at_the_target_load() -> None:
    start = time.perf_counter()
    jobs = generate(100_000, seed=11, gpus_total=8192, shape=WorkloadShape(load=0.9))
    elapsed = time.perf_counter() - start
    assert elapsed < 15, f"took {elapsed:.1f} s"  # about 2 s on a laptop core
    submits = np.array([j.submit_time for j in jobs])
    assert np.all(np.diff(submits) >= 0)
    # offered load = GPU-seconds asked / (GPUs x span of arrivals)
    load = sum(j.gpu_seconds for j in jobs) / (8192 * submits[-1])
    assert load == pytest.approx(0.9, rel=0.02)
    # sizes follow the default mix (1-GPU jobs are 45%), within sampling noise
    milli = Counter(j.request.total_gpu_milli for j in jobs)
    assert milli[1000] / len(jobs) == pytest.approx(0.45, abs=0.01)
    assert milli[64_000] / len(jobs) == pytest.approx(0.01, abs=0.002)
    # heavy tail: the p99 duration is tens of times the median
    durations = np.array([j.duration_s for j in jobs])
    assert np.percentile(durations, 99) > 20 * np.median(durations)
    # skewed users: the busiest user submits more than ten times the median user
    per_user = sorted(Counter(j.user for j in jobs).values())
    assert per_user[-1] > 10 * per_user[len(per_user) // 2]


def test_job_fields_follow_the_shape() -> None:
    shape = WorkloadShape(
        priority_mix={"low": 1.0},
        checkpoint_share=1.0,
        checkpoint_interval_s=60,
        users=3,
        accounts=2,
    )
    jobs = generate(300, seed=1, gpus_total=64, shape=shape)
    assert all(j.preemptible and j.qos == j.priority_class == "low" for j in jobs)
    assert {j.user for j in jobs} <= {"user0", "user1", "user2"}
    assert {j.account for j in jobs} <= {"acct0", "acct1"}
    for j in jobs:
        # each user stays in one account
        assert j.account == next(k.account for k in jobs if k.user == j.user)
        # the limit is at least the runtime and a whole number of hours
        assert j.time_limit_s is not None and j.time_limit_s >= j.duration_s
        assert j.time_limit_s % 3600 == 0
        assert j.checkpoint_interval_s == (60 if j.duration_s > 60 else None)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0.25, (0, 250, 1, 2000)),  # a quarter GPU: 250 milli, 8000 x 0.25 milli-CPU
        (4, (4, 0, 1, 32000)),  # 4 GPUs x 8000 milli-CPU
        (32, (8, 0, 4, 64000)),  # 32 / 8 = 4 nodes of 8 GPUs, 8 x 8000 per node
    ],
)
def test_sizes_become_requests(size: float, expected: tuple[int, int, int, int]) -> None:
    (job,) = generate(1, seed=0, gpus_total=64, shape=WorkloadShape(size_mix={size: 1.0}))
    r = job.request
    assert (r.gpus, r.gpu_milli, r.nodes, r.cpu_milli) == expected


def test_sizes_larger_than_the_cluster_are_left_out() -> None:
    jobs = generate(2000, seed=2, gpus_total=8)
    assert max(j.request.total_gpu_milli for j in jobs) == 8000


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"size_mix": {1.5: 1.0}}, "1.5 is neither a GPU fraction nor whole GPUs"),
        ({"size_mix": {12: 1.0}}, "12.0 GPUs is not whole 8-GPU nodes"),
        ({"priority_mix": {"urgent": 1.0}}, "priority_mix: urgent=1.0"),
        ({"min_duration_s": 100, "max_duration_s": 10}, "min_duration_s"),
        ({"load": 0}, "greater than 0"),
    ],
)
def test_shape_rejects(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        WorkloadShape.model_validate(kwargs)


@pytest.mark.parametrize(
    ("n_jobs", "gpus_total", "field"), [(0, 8, "n_jobs"), (5, 0, "gpus_total")]
)
def test_generate_rejects_counts(n_jobs: int, gpus_total: int, field: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        generate(n_jobs, seed=0, gpus_total=gpus_total)
    assert err.value.field == field


def test_options_text() -> None:
    jobs = generate_from_options("n_jobs=50, seed=9, gpus_total=32, load=0.5, users=4")
    assert jobs == generate(50, seed=9, gpus_total=32, shape=WorkloadShape(load=0.5, users=4))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n_jobs=5,seed=1", "synthetic: gpus_total: required"),
        ("n_jobs=five,seed=1,gpus_total=8", "synthetic: n_jobs: must be a whole number"),
        (
            "n_jobs=5,seed=1,gpus_total=8,users=-2",
            "synthetic: users: must be greater than 0",
        ),
        (
            "n_jobs=5,seed=1,gpus_total=8,colour=red",
            "synthetic: colour: unknown key (known: load, gpus_per_node, size_mix, "
            "duration_median_s, duration_sigma, size_duration_exponent, min_duration_s, "
            "max_duration_s, users, accounts, user_skew, priority_mix, limit_overestimate, "
            "limit_overestimate_min, limit_habits, limit_per_user, limit_per_job, "
            "limit_fixed_share, limit_default_h, scripts, "
            "script_jitter, fail_share, fail_burst, fail_within_s, think_max_s, "
            "checkpoint_interval_s, "
            "checkpoint_share, cpu_milli_per_gpu, memory_mib_per_gpu, "
            "partition, mig_share, mig_profile, daily_swing, peak_hour)",
        ),
        ("n_jobs=5,seed=1,gpus_total=8,load", "synthetic: load: expected key=value"),
        ("n_jobs=0,seed=1,gpus_total=8", "synthetic: n_jobs: must be more than zero, got 0"),
        (
            "n_jobs=5,seed=1,gpus_total=8,mig_share=0.5",
            "synthetic: mig_profile: required when mig_share is above 0",
        ),
        (
            "n_jobs=5,seed=1,gpus_total=8,mig_share=0.5,mig_profile=1g.10gb|2g.5gb",
            "synthetic: mig_profile: unknown MIG profile '2g.5gb' (known: 1g.10gb, 1g.18gb, "
            "1g.20gb, 1g.35gb, 1g.5gb, 2g.10gb, 2g.20gb, 2g.35gb, 3g.20gb, 3g.40gb, 3g.71gb, "
            "4g.20gb, 4g.40gb, 4g.71gb, 7g.141gb, 7g.40gb, 7g.80gb)",
        ),
    ],
)
def test_options_text_errors(text: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        generate_from_options(text)
    assert str(err.value) == message


def test_mig_share_emits_mig_requests_and_leaves_other_jobs_alone() -> None:
    text = "n_jobs=4000,seed=3,gpus_total=64,mig_share=0.25,mig_profile=1g.10gb|3g.40gb"
    jobs = generate_from_options(text)
    kinds = Counter(j.request.mig_profile for j in jobs)
    assert set(kinds) == {"", "1g.10gb", "3g.40gb"}
    assert 0.22 < (kinds["1g.10gb"] + kinds["3g.40gb"]) / len(jobs) < 0.28
    assert 0.8 < kinds["1g.10gb"] / kinds["3g.40gb"] < 1.25  # drawn equally often
    three = next(j.request for j in jobs if j.request.mig_profile == "3g.40gb")
    # One instance, with 3/7 of a GPU's CPU and memory, and nothing else.
    assert (three.mig_count, three.gpus, three.gpu_milli) == (1, 0, 0)
    assert (three.cpu_milli, three.memory_mib) == (8000 * 3 // 7, 64 * 1024 * 3 // 7)
    # Without mig_share the same seed draws the same jobs as before the option existed.
    assert generate_from_options("n_jobs=50,seed=3,gpus_total=64,mig_profile=1g.10gb") == (
        generate(50, seed=3, gpus_total=64)
    )
