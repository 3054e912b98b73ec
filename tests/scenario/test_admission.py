"""Limits and pending reasons: a QoS limit holds, and every waiting job says why."""

from __future__ import annotations

import pytest

from builders import node
from gpufleet.core.job import Partition, QoS
from scenario.harness import QueuedJobBuilder, Scenario, qjob


def scenario(qos: QoS, partition: Partition | None = None) -> Scenario:
    return Scenario(
        [node("a").gpus(8), node("b").gpus(8)],
        now=10,
        qos=[qos],
        partitions=[partition or Partition("main")],
    )


@pytest.mark.parametrize(
    ("qos", "jobs", "starts", "reasons"),
    [
        pytest.param(
            QoS("normal", max_gpus_per_user=8),
            # alice: 4 + 4 = 8 <= 8 starts; then 8 + 1 > 8 waits; bob is not limited by alice.
            [
                qjob("a1").gpus(4),
                qjob("a2").gpus(4),
                qjob("a3").gpus(1),
                qjob("b1").gpus(1).user("bob"),
            ],
            {"a1", "a2", "b1"},
            {"a3": "QOSMaxGPUsPerUserLimit"},
            id="max-gpus-per-user",
        ),
        pytest.param(
            QoS("normal", max_gpus_per_user=1),
            # Fractions count their share: 500 + 500 = 1000 milli <= 1 GPU; a third does not fit.
            [qjob("f1").fraction(500), qjob("f2").fraction(500), qjob("f3").fraction(500)],
            {"f1", "f2"},
            {"f3": "QOSMaxGPUsPerUserLimit"},
            id="fractions-count-their-share",
        ),
        pytest.param(
            QoS("normal", max_jobs_per_user=2),
            [qjob("j1").gpus(1), qjob("j2").gpus(1), qjob("j3").gpus(1)],
            {"j1", "j2"},
            {"j3": "QOSMaxJobsPerUserLimit"},
            id="max-jobs-per-user",
        ),
        pytest.param(
            QoS("normal", max_gpus_per_account=4),
            # alice and bob share the account: 2 + 2 = 4, then 4 + 2 > 4.
            [qjob("x").gpus(2), qjob("y").gpus(2).user("bob"), qjob("z").gpus(2).user("carol")],
            {"x", "y"},
            {"z": "QOSMaxGPUsPerAccountLimit"},
            id="max-gpus-per-account",
        ),
        pytest.param(
            QoS("normal", group_gpus=10),
            # 8 + 2 = 10 <= 10, then 10 + 1 > 10 for anyone.
            [
                qjob("g1").gpus(8),
                qjob("g2").gpus(2).user("bob"),
                qjob("g3").gpus(1).user("eve", "ops"),
            ],
            {"g1", "g2"},
            {"g3": "QOSGrpGPULimit"},
            id="group-gpus",
        ),
        pytest.param(
            QoS("normal", max_wall_s=3600),
            [qjob("ok").gpus(1).limit(3600), qjob("long").gpus(1).limit(3601)],
            {"ok"},
            {"long": "QOSMaxWallDurationPerJobLimit"},
            id="max-wall",
        ),
    ],
)
def test_a_qos_limit_holds(
    qos: QoS, jobs: list[QueuedJobBuilder], starts: set[str], reasons: dict[str, str]
) -> None:
    out = scenario(qos).submit(*(j.submit(i) for i, j in enumerate(jobs))).cycle()
    assert set(out.starts) == starts
    assert out.reasons == reasons


def test_running_jobs_count_against_the_limit() -> None:
    sc = scenario(QoS("normal", max_gpus_per_user=8))
    sc.run(qjob("r").gpus(6), start=0, on="a")
    out = sc.submit(qjob("p").gpus(4)).cycle()  # 6 running + 4 > 8
    assert out.reasons == {"p": "QOSMaxGPUsPerUserLimit"}


@pytest.mark.parametrize(
    ("partition", "job", "reason"),
    [
        (Partition("main", max_time_s=600), qjob("j").gpus(1).limit(601), "PartitionTimeLimit"),
        (Partition("main", allowed_accounts=("ops",)), qjob("j").gpus(1), "AccountNotAllowed"),
        (Partition("main", allowed_qos=("high",)), qjob("j").gpus(1), "QOSNotAllowed"),
        # Only node b is in the partition, and it has 8 GPUs: 16 can never fit.
        (Partition("main", nodes=("b",)), qjob("j").gpus(8).gang(2), "ReqNodeNotAvail"),
    ],
)
def test_partition_limits(partition: Partition, job: QueuedJobBuilder, reason: str) -> None:
    out = scenario(QoS("normal"), partition).submit(job).cycle()
    assert out.reasons == {"j": reason}


def test_pending_reasons_for_held_dependent_and_invalid_jobs() -> None:
    sc = scenario(QoS("normal"))
    sc.run(qjob("running").gpus(8), start=0, on="a")
    out = sc.submit(
        qjob("held").gpus(1).with_(hold=True),
        qjob("after-running").gpus(1).with_(dependencies=("running",)),
        qjob("after-held").gpus(1).with_(dependencies=("held",)),
        qjob("after-done").gpus(1).with_(dependencies=("finished-long-ago",)),
        qjob("bad-qos").gpus(1).qos("gold"),
        qjob("bad-partition").gpus(1).partition("nowhere"),
    ).cycle()
    assert out.starts == {"after-done": ["b"]}
    assert out.reasons == {
        "held": "JobHeldUser",
        "after-running": "Dependency",
        "after-held": "Dependency",
        "bad-qos": "InvalidQOS",
        "bad-partition": "InvalidPartition",
    }


def test_every_pending_job_gets_exactly_one_reason() -> None:
    sc = scenario(QoS("normal", max_jobs_per_user=3))
    sc.submit(*(qjob(f"j{i}").gpus(4).submit(i) for i in range(8)))
    out = sc.cycle()
    # 3 start (the per-user cap: 3 jobs x 4 GPUs fit in 16), the other 5 wait on the cap.
    assert len(out.starts) == 3
    assert set(out.starts) | set(out.reasons) == {f"j{i}" for i in range(8)}
    assert set(out.reasons.values()) == {"QOSMaxJobsPerUserLimit"}
