"""The controller's side of the checkpoint contract: one directory per job across its
runs, and checkpoint reports that reach preemption's cost model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.harness import ADMIN, ANA, Cluster, spec
from gpufleet.api.agent_schemas import AgentSync, Checkpointed, RunRef
from gpufleet.core.job import Partition
from store.databases import Database


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    c = Cluster(db, partitions={"gpu": Partition("gpu", checkpoint_dir="/shared/ckpt")})
    c.register()
    yield c
    c.ctl.stop()


def test_a_requeued_job_keeps_its_directory(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec(checkpoint_s=600)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    (first,) = cluster.sync(node).jobs_to_start
    assert first.checkpoint_dir == f"/shared/ckpt/ana/{job}"
    cluster.ctl.requeue_job(principal=ADMIN, job_id=job)
    cluster.sync(node)  # the kill
    cluster.exit(node, job, 1, code=143)
    cluster.ctl.run_cycle_now()
    (second,) = cluster.sync(cluster.where(job)).jobs_to_start
    assert (second.run, second.checkpoint_dir) == (2, first.checkpoint_dir)


def test_without_partition_storage_the_directory_is_under_the_workdir(db: Database) -> None:
    c = Cluster(db)
    c.register()
    try:
        job = c.ctl.submit(principal=ANA, spec=spec(workdir="/home/ana/run")).job_id
        c.ctl.run_cycle_now()
        (launch,) = c.sync(c.where(job)).jobs_to_start
        assert launch.checkpoint_dir == f"/home/ana/run/.gpufleet/checkpoints/{job}"
    finally:
        c.ctl.stop()


def test_checkpoint_reports_reach_the_cost_model(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec(checkpoint_s=600)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    running = cluster.ctl.book.running
    assert running[job].job.checkpoint_interval_s == 600
    assert running[job].job.last_checkpoint is None
    now = cluster.clock.advance(300)

    def report(at: float, run: int = 1) -> None:
        body = AgentSync(
            running=[RunRef(job_id=job, run=1)],
            checkpoints=[Checkpointed(job_id=job, run=run, at=at)],
        )
        cluster.ctl.sync_agent(principal=ADMIN, node=node, body=body)

    report(now - 10)
    assert running[job].job.last_checkpoint == int(now - 10)
    report(now - 100)  # an older mark changes nothing
    report(now + 3600)  # a node clock ahead counts as now
    assert running[job].job.last_checkpoint == int(now)
    report(now + 1, run=2)  # not this run's
    assert running[job].job.last_checkpoint == int(now)


def test_the_partitions_nccl_settings_reach_the_launch(db: Database) -> None:
    nccl = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5"}
    c = Cluster(db, partitions={"gpu": Partition("gpu", nccl=nccl)})  # type: ignore[arg-type]
    c.register()
    try:
        env = {"NCCL_IB_HCA": "mlx5_1", "MINE": "x"}
        job = c.ctl.submit(principal=ANA, spec=spec(env=env)).job_id
        c.ctl.run_cycle_now()
        (launch,) = c.sync(c.where(job)).jobs_to_start
        # The job's own environment wins over the partition's defaults.
        assert launch.env == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_1", "MINE": "x"}
    finally:
        c.ctl.stop()


def test_the_image_reaches_the_launch(cluster: Cluster) -> None:
    boxed = cluster.ctl.submit(principal=ANA, spec=spec(container="pytorch:24.05")).job_id
    plain = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.run_cycle_now()
    launches = {
        launch.job_id: launch.container
        for node in ("n1", "n2")
        for launch in cluster.sync(node).jobs_to_start
    }
    assert launches == {boxed: "pytorch:24.05", plain: None}


def test_a_shares_gpu_memory_reaches_the_launch(cluster: Cluster) -> None:
    share = spec(gpus_per_node=0, gpu_milli=250, gpu_memory_mib=4096)
    job = cluster.ctl.submit(principal=ANA, spec=share).job_id
    cluster.ctl.run_cycle_now()
    (launch,) = cluster.sync(cluster.where(job)).jobs_to_start
    assert (launch.gpu_milli, launch.gpu_memory_mib, len(launch.gpu_uuids)) == (250, 4096, 1)
