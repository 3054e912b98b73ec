"""A gang task's environment under torchrun's and MPI's names, seen by a real Python job."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent.support import Launches, wait_ended
from gpufleet.agent.runner import Runner, job_environment, rank_environment

NAMES = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "NCCL_IB_HCA",
]


def test_a_gang_task_knows_its_rank_and_the_rendezvous(runner: Runner, launch: Launches) -> None:
    code = f"import json, os; print(json.dumps({{n: os.environ.get(n) for n in {NAMES!r}}}))"
    gang = launch(
        "40",
        argv=[sys.executable, "-c", code],
        node_rank=1,
        node_list=["gpu-a", "n1", "gpu-c"],
        env={"NCCL_IB_HCA": "mlx5_0", "RANK": "stale"},
    )
    runner.start(gang)
    wait_ended(runner)
    seen = json.loads(launch.output("40"))
    port = seen.pop("MASTER_PORT")
    assert seen == {
        "RANK": "1",  # the scheduler's value wins over a stale submitted one
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "gpu-a",
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "3",
        "PMI_RANK": "1",
        "PMI_SIZE": "3",
        "SLURM_PROCID": "1",
        "NCCL_IB_HCA": "mlx5_0",  # the partition's NCCL settings arrive in the env
    }
    # Every node derives the same port from the job id, below the ephemeral range.
    other = rank_environment(gang.model_copy(update={"node_rank": 2}), "gpu-c")
    assert other["MASTER_PORT"] == port and 20000 <= int(port) < 30000
    single = rank_environment(launch("41", argv=["true"]), "n1")
    assert (single["RANK"], single["WORLD_SIZE"], single["MASTER_ADDR"]) == ("0", "1", "n1")


def test_a_container_template_wraps_the_command(launch: Launches, tmp_path: Path) -> None:
    # env(1) stands in for a container runtime: it sets what the template says, then execs.
    template = ("env", "IMAGE={image}", "WHERE={workdir}")
    runner = Runner(tmp_path / "boxed", "n1", same_user=True, container=template)
    try:
        code = "import os; print(os.environ['IMAGE'], os.environ['WHERE'])"
        runner.start(launch("50", argv=[sys.executable, "-c", code], container="pytorch:24.05"))
        assert wait_ended(runner)["50"].exit_code == 0
        assert launch.output("50") == f"pytorch:24.05 {tmp_path}\n"
    finally:
        runner.close()


def test_an_image_on_a_node_without_a_template_fails_to_start(
    runner: Runner, launch: Launches
) -> None:
    runner.start(launch("51", argv=["true"], container="pytorch:24.05"))
    report = wait_ended(runner)["51"]
    assert (report.state, report.message) == (
        "failed_to_start",
        "container: node n1 runs no containers",
    )


def test_a_fractional_run_gets_its_share_for_mps(launch: Launches) -> None:
    share = launch("60", argv=["true"], gpu_uuids=["GPU-a"], gpu_milli=250, gpu_memory_mib=4096)
    env = job_environment(share, "n1")
    assert {k: v for k, v in env.items() if k.startswith(("CUDA_", "GPUFLEET_GPU_"))} == {
        "GPUFLEET_GPU_MILLI": "250",
        "GPUFLEET_GPU_MEMORY_MIB": "4096",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
        "CUDA_VISIBLE_DEVICES": "GPU-a",
    }
    whole = job_environment(launch("61", argv=["true"], gpu_uuids=["GPU-a"]), "n1")
    assert not any("MPS" in k or "GPU_MILLI" in k for k in whole)
