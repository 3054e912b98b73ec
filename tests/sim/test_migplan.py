"""MIG re-partitioning in replays: a re-cut GPU takes no work for ``reconfigure_s``,
then serves with its new layout; the changes are counted."""

from __future__ import annotations

import pytest

from builders import node
from gpufleet.core.model import Request
from gpufleet.sim.metrics import summarize
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob

SEVEN_1G = ",".join(["1g.10gb"] * 7)


def mig_job(job_id: str, profile: str, submit: int, duration: int) -> TraceJob:
    return TraceJob(
        id=job_id,
        submit_time=submit,
        duration_s=duration,
        request=Request(mig_profile=profile, mig_count=1),
        time_limit_s=duration,
    )


def profile(**mig: object) -> dict[str, object]:
    return {"ordering": {"plugin": "fifo"}, "sim": {"interval_s": 60}, "mig": mig}


@pytest.mark.parametrize("reconfigure_s", [0, 300, 900])
def test_a_recut_gpu_takes_work_only_after_reconfigure_s(reconfigure_s: int) -> None:
    # One GPU cut 7 x 1g; a 7g job at 100 s: the first cycle re-cuts the GPU, which
    # has its 7g instance reconfigure_s later, when the job starts.
    nodes = [node("a").gpus(1).mig(SEVEN_1G).build()]
    jobs = [mig_job("big", "7g.80gb", 100, 500)]
    p = profile(repartition=True, reconfigure_s=reconfigure_s, min_interval_s=0)
    result = replay(nodes, jobs, profile_from_dict(p, "migplan"))
    (rec,) = result.jobs
    assert rec.first_start == 100 + reconfigure_s
    assert rec.state == "completed"
    assert result.reconfigurations == 1
    assert summarize(result)["reconfigurations"] == 1


def test_without_the_planner_a_profile_no_gpu_is_cut_for_never_runs() -> None:
    nodes = [node("a").gpus(1).mig(SEVEN_1G).build()]
    jobs = [mig_job("big", "7g.80gb", 100, 500)]
    result = replay(nodes, jobs, profile_from_dict(profile(), "static"))
    assert result.jobs[0].state == "unschedulable"
    assert result.reconfigurations == 0


def test_a_busy_gpu_drains_then_changes_and_the_shift_back_waits_out_the_interval() -> None:
    # 1g jobs hold the GPU until 1000 s; a 7g job waits from 200 s. The GPU drains (no new
    # 1g job lands: the one at 300 s waits), is re-cut at 1000 s, ready at 1060 s. The 1g
    # job waiting then gets its slice back only once the 7g job ends (1060 + 400) and the
    # GPU's last change (taken on at 200 s) is min_interval_s = 1800 s old: at 2000 s,
    # ready 60 s later.
    nodes = [node("a").gpus(1).mig(SEVEN_1G).build()]
    jobs = [
        mig_job("small", "1g.10gb", 0, 1000),
        mig_job("big", "7g.80gb", 200, 400),
        mig_job("late", "1g.10gb", 300, 100),
    ]
    p = profile(repartition=True, reconfigure_s=60, min_interval_s=1800, drain=True)
    result = replay(nodes, jobs, profile_from_dict(p, "migplan"))
    starts = {r.trace.id: r.first_start for r in result.jobs}
    assert starts == {"small": 0, "big": 1060, "late": 2060}
    assert result.reconfigurations == 2
