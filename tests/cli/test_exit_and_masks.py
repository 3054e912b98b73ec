"""What ``show`` prints as ExitCode and ``nodes`` as a node's reason, from the API's
objects (a stand-in client: no server needed)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gpufleet.api.schemas import JobOut
from gpufleet.cli import cluster, jobs
from gpufleet.controller.views import GpuOut, NodeOut


def job(**fields: Any) -> JobOut:
    values: dict[str, Any] = {
        "job_id": "16",
        "name": "scav",
        "user": "ada",
        "account": "lab",
        "partition": "gpu",
        "qos": "scavenger",
        "state": "FAILED",
        "nodes": 1,
        "gpus_per_node": 1,
        "gpu_milli": 1000,
        "cpus_per_task": 1,
        "mem_mib": 0,
        "time_limit_s": 60,
        "submit_time": 0.0,
        "workdir": "/tmp",
        "stdout_path": "/tmp/out",
        "stderr_path": "/tmp/out",
    }
    values.update(fields)
    return JobOut(**values)


class Stub:
    def __init__(self, found: object) -> None:
        self.found = found

    def job(self, job_id: str) -> object:
        return self.found

    def nodes(self) -> object:
        return self.found


def serve(monkeypatch: pytest.MonkeyPatch, module: Any, found: object) -> None:
    @contextmanager
    def connect() -> Iterator[Stub]:
        yield Stub(found)

    monkeypatch.setattr(module, "connect", connect)


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"signal": 9}, "0:9"),  # killed by SIGKILL, as Slurm's ExitCode=0:9
        ({"exit_code": 3}, "3:0"),
        ({"state": "CANCELLED"}, "0:0"),  # cancelled before it ran: nothing ended
        ({"state": "RUNNING"}, "0:0"),
    ],
)
def test_show_prints_the_exit_as_slurm_does(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    shown: str,
) -> None:
    serve(monkeypatch, jobs, job(**fields))
    jobs.show("16")
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["ExitCode", shown] in lines


def test_nodes_names_masked_gpus_in_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = [
        GpuOut(index=0, model="L4", memory_mib=24576),
        GpuOut(index=1, model="L4", memory_mib=24576, used_milli=1000, masked="xid 48"),
    ]
    nodes = [
        NodeOut(name="a", state="idle", cpu_milli=8000, memory_mib=1024, gpus=gpus),
        NodeOut(name="b", state="drain", reason="fans", cpu_milli=8000, memory_mib=1024, gpus=gpus),
        NodeOut(name="c", state="idle", cpu_milli=8000, memory_mib=1024),
    ]
    serve(monkeypatch, cluster, nodes)
    cluster.nodes()
    rows = capsys.readouterr().out.splitlines()[1:]
    reasons = [row.split("  ")[-1].strip() for row in rows]
    assert reasons == ["gpu 1 masked: xid 48", "fans; gpu 1 masked: xid 48", "-"]
