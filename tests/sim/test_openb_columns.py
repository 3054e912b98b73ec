"""openb pod lists: optional columns take the published format's default, required ones
stop ``sim fill`` with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.core.model import Request
from gpufleet.sim.openb import load_pods

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_pod_list_of_the_required_columns_only_loads_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
        "share,2000,8192,1,500\n"
        "whole,8000,32768,2,1000\n"
        "cpu,4000,1024,0,0\n"
    )
    pods = load_pods(path)
    assert [p.request for p in pods] == [
        Request(cpu_milli=2000, memory_mib=8192, gpu_milli=500),  # any GPU model
        Request(cpu_milli=8000, memory_mib=32768, gpus=2),
        Request(cpu_milli=4000, memory_mib=1024),
    ]
    assert [(p.qos, p.creation_time, p.deletion_time) for p in pods] == [("", 0, 0)] * 3


def test_sim_fill_runs_on_a_pod_list_without_gpu_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (FIXTURES / "pods.csv").read_text().splitlines()
    # Keep name..gpu_milli and qos: gpu_spec (column 6) and the times are gone.
    kept = [",".join(line.split(",")[:5] + line.split(",")[6:7]) for line in lines]
    pods = tmp_path / "pods.csv"
    pods.write_text("\n".join(kept) + "\n")
    args = ["sim", "fill", "--nodes", str(FIXTURES / "nodes.csv"), "--pods", str(pods)]
    assert main([*args, "--policy", "best-fit", "--workers", "1", "--json"]) == 0
    assert '"best-fit"' in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("column", ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])
def test_a_missing_required_column_is_one_line(
    column: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (FIXTURES / "pods.csv").read_text().splitlines()
    drop = lines[0].split(",").index(column)
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "\n".join(",".join(ln.split(",")[:drop] + ln.split(",")[drop + 1 :]) for ln in lines) + "\n"
    )
    args = ["sim", "fill", "--nodes", str(FIXTURES / "nodes.csv"), "--pods", str(pods)]
    assert main([*args, "--workers", "1"]) == 2
    reason = "column missing from the header"
    assert capsys.readouterr().err == f"error: {pods}, row 1: {column}: {reason}\n"


def test_a_row_short_of_an_optional_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\nshare,2000,8192,1,500\n")
    with pytest.raises(ValueError, match=r"row 2: wrong number of fields"):
        load_pods(path)
