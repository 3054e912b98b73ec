"""A job id given twice is the loader's problem, named with both rows, not one the
replay finds later without a file or row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces import load_trace
from gpufleet.sim.traces.pai import load_pai

ROOT = Path(__file__).parents[3]
PAI = ROOT / "examples" / "traces" / "pai"
FIXTURES = Path(__file__).parent / "fixtures"


def test_history(tmp_path: Path) -> None:
    line = '{"id": "a", "submit_time": 0, "duration_s": 5, "request": {"gpus": 1}}\n'
    path = tmp_path / "past.jsonl"
    path.write_text(line + "\n" + line, encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_trace(f"history:{path}")
    assert str(err.value) == f"{path}, row 3: id: 'a' appears twice, first on row 1"


def test_swf(tmp_path: Path) -> None:
    text = (FIXTURES / "tiny.swf").read_text(encoding="utf-8")
    path = tmp_path / "twice.swf"
    path.write_text(text + text.splitlines()[3] + "\n", encoding="utf-8")
    row = len(text.splitlines()) + 1
    with pytest.raises(TraceError) as err:
        load_trace(f"swf:{path}")
    assert str(err.value) == f"{path}, row {row}: job_number: '1' appears twice, first on row 4"


def test_tiresias(tmp_path: Path) -> None:
    text = (FIXTURES / "tiresias.csv").read_text(encoding="utf-8")
    path = tmp_path / "twice.csv"
    path.write_text(text + "0,1,9,606,vgg19,164,30\n", encoding="utf-8")
    row = len(text.splitlines()) + 1
    with pytest.raises(TraceError) as err:
        load_trace(f"tiresias:{path}")
    assert str(err.value) == f"{path}, row {row}: job_id: '0' appears twice, first on row 2"


def test_pai_with_the_other_problems(tmp_path: Path) -> None:
    shutil.copy(PAI / "pai_task_table.csv", tmp_path / "pai_task_table.csv")
    lines = (PAI / "pai_job_table.csv").read_text(encoding="utf-8").splitlines()
    bad = lines[1].replace(",1000120.0,", ",soon,")
    path = tmp_path / "pai_job_table.csv"
    path.write_text("\n".join([*lines, lines[0], bad]) + "\n", encoding="utf-8")
    name = lines[0].split(",")[0]
    with pytest.raises(TraceError) as err:
        load_pai(path)
    assert str(err.value) == (
        f"{path}, row 7: job_name: '{name}' appears twice, first on row 1; "
        f"{path}, row 8: start_time: 'soon' is not a number"
    )


def test_pai_job_without_a_submit_time_is_submitted_by_its_first_task(tmp_path: Path) -> None:
    """The job table's submit cell is empty, yet its tasks ran: the job was submitted
    by the time the first of them started (6f2ab2's at 1000020, 20 s after the origin)."""
    shutil.copy(PAI / "pai_task_table.csv", tmp_path / "pai_task_table.csv")
    text = (PAI / "pai_job_table.csv").read_text(encoding="utf-8")
    path = tmp_path / "pai_job_table.csv"
    path.write_text(text.replace(",1000000.0,1003620.0", ",,1003620.0"), encoding="utf-8")
    jobs = {j.id[:6]: j for j in load_pai(path)}
    assert len(jobs) == 5
    # The origin is now 6f2ab2's first task start (1000020), b1e8c7's 1000120 is 100 s on.
    assert (jobs["6f2ab2"].submit_time, jobs["b1e8c7"].submit_time) == (0, 100)
