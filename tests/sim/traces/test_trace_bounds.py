"""Times too large for the replay: every loader refuses them as a row problem, in
whatever unit the file writes them, instead of crashing or hanging the replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.core.model import MAX_AMOUNT
from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces import load_trace
from gpufleet.sim.traces.history import load_history
from gpufleet.sim.traces.pai import load_pai

ROOT = Path(__file__).parents[3]
PAI = ROOT / "examples" / "traces" / "pai"


def write(tmp_path: Path, text: str, name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("cell", "options", "expected"),
    [
        ("1e20", ",units.duration_s=min", f"at most {MAX_AMOUNT} s, got 1e20 min"),
        ("1e306", ",units.duration_s=d", f"at most {MAX_AMOUNT} s, got 1e306 d"),  # inf once in s
        (str(MAX_AMOUNT + 1), "", f"at most {MAX_AMOUNT}, got {MAX_AMOUNT + 1}"),
    ],
)
def test_a_converted_duration_is_bounded(
    tmp_path: Path, cell: str, options: str, expected: str
) -> None:
    path = write(tmp_path, f"id,submit_time,duration_s,gpus\na,0,{cell},1\n")
    with pytest.raises(TraceError) as err:
        load_trace(f"generic:{path}{options}")
    assert str(err.value) == f"{path}, row 2: duration_s: must be {expected}"


def test_every_converted_time_is_bounded_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "id,submit_time,duration_s,gpus,time_limit_s,checkpoint_interval_s,after,think_s,mem\n"
        "a,0,5,1,1e20,,,,1\n"
        "b,0,5,1,,1e20,a,1e20,1e308\n",
    )
    options = (
        ",units.time_limit_s=h,units.checkpoint_interval_s=h,units.think_s=h"
        ",columns.memory_mib=mem,units.memory_mib=TiB"
    )
    with pytest.raises(TraceError) as err:
        load_trace(f"generic:{path}{options}")
    assert str(err.value) == "; ".join(
        [
            f"{path}, row 2: time_limit_s: must be at most {MAX_AMOUNT} s, got 1e20 h",
            f"{path}, row 3: mem: must be at most {MAX_AMOUNT} once converted, got 1e308 TiB",
            f"{path}, row 3: checkpoint_interval_s: must be at most {MAX_AMOUNT} s, got 1e20 h",
            f"{path}, row 3: think_s: must be at most {MAX_AMOUNT} s, got 1e20 h",
        ]
    )


def test_a_submit_time_far_from_the_origin(tmp_path: Path) -> None:
    path = write(tmp_path, "id,submit_time,duration_s,gpus\na,0,5,1\nb,1e300,5,1\n")
    with pytest.raises(TraceError) as err:
        load_trace(f"generic:{path}")
    assert str(err.value) == (
        f"{path}, row 3: submit_time: more than {MAX_AMOUNT} s after the origin (0 s)"
    )


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"id":"1","submit_time":0,"duration_s":99999999999999999999,"request":{"gpus":1}}',
         "duration_s"),
        ('{"id":"1","submit_time":99999999999999999999,"duration_s":5,"request":{"gpus":1}}',
         "submit_time"),
        ('{"id":"1","submit_time":0,"duration_s":5,"request":{"gpus":1},'
         '"time_limit_s":99999999999999999999}', "time_limit_s"),
    ],
)  # fmt: skip
def test_history_times_are_bounded(tmp_path: Path, line: str, field: str) -> None:
    path = write(tmp_path, line + "\n", "past.jsonl")
    with pytest.raises(TraceError) as err:
        load_history(path)
    assert str(err.value) == (
        f"{path}, row 1: {field}: must be at most {MAX_AMOUNT} s, got 99999999999999999999"
    )


def test_pai_submit_time_far_after_the_first(tmp_path: Path) -> None:
    shutil.copy(PAI / "pai_task_table.csv", tmp_path / "pai_task_table.csv")
    jobs = (PAI / "pai_job_table.csv").read_text(encoding="utf-8")
    path = write(tmp_path, jobs.replace(",1000300.0,", ",1e300,"), "pai_job_table.csv")
    with pytest.raises(TraceError) as err:
        load_pai(path)
    assert str(err.value) == (
        f"{path}, row 3: start_time: more than {MAX_AMOUNT} s after the first job's"
    )


@pytest.mark.parametrize("origin", ["inf", "1e400", "nan", "-inf", "last", "2e12"])
def test_origin_must_be_first_or_a_bounded_number(tmp_path: Path, origin: str) -> None:
    path = write(tmp_path, "id,submit_time,duration_s,gpus\na,1000,5,1\n")
    with pytest.raises(TraceError) as err:
        load_trace(f"generic:{path},time=ms,origin={origin}")
    assert str(err.value) == (
        "generic trace option: origin: must be 'first' or a number of seconds "
        f"within ±{MAX_AMOUNT}, got {origin!r}"
    )


def test_the_replay_reports_a_huge_time_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "id,submit_time,duration_s,gpus\na,0,1e20,1\n")
    args = ["sim", "run", "--cluster", str(ROOT / "examples" / "nodes.csv")]
    assert main([*args, "--trace", f"generic:{path},units.duration_s=min"]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: {path}, row 2: duration_s: must be at most {MAX_AMOUNT} s, got 1e20 min\n"
    )


def test_a_job_far_after_the_first_replays_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An idle gap of ten thousand years costs the fairshare ledger one step, not one
    per priority period (``engine.ledger``)."""
    path = write(tmp_path, f"id,submit_time,duration_s,gpus\na,0,5,1\nb,{MAX_AMOUNT},5,1\n")
    args = ["sim", "run", "--cluster", str(ROOT / "examples" / "nodes.csv"), "--json"]
    assert main([*args, "--trace", f"generic:{path}"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["completed"] == 2
