"""The public GPU trace formats: Helios/Philly logs, Gavel traces, Alibaba PAI 2020 tables.

Each is read from a small file in its own format (``examples/traces`` for the
ones the docs run, ``fixtures`` for the others).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces import load_trace
from gpufleet.sim.traces.gavel import GavelOptions, load_gavel
from gpufleet.sim.traces.pai import TASK_COLUMNS, PaiOptions, load_pai
from gpufleet.sim.traces.philly import PhillyOptions, load_philly

EXAMPLES = Path(__file__).parents[3] / "examples" / "traces"
HELIOS = EXAMPLES / "helios_philly.csv"
GAVEL = EXAMPLES / "gavel.trace"
THROUGHPUTS = EXAMPLES / "gavel-throughputs.json"
PAI_JOBS = EXAMPLES / "pai" / "pai_job_table.csv"

Fixture = Callable[[str], Path]


def edited(source: Path, target: Path, line: int, old: str, new: str) -> Path:
    """A copy of ``source`` at ``target`` with ``old`` replaced by ``new`` on ``line``."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    assert old in lines[line - 1], f"{old!r} not on line {line} of {source}"
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    target.write_text("".join(lines), encoding="utf-8")
    return target


# -- Helios / Philly -------------------------------------------------------------


def test_helios_log() -> None:
    jobs = load_philly(HELIOS)
    rows = [(j.id[-5:], j.submit_time, j.duration_s, j.request.gpus, j.request.nodes) for j in jobs]
    assert rows == [
        ("10238", 0, 1224, 1, 1),
        ("10239", 168, 10800, 8, 1),  # 02:30:02 - 02:27:14 = 168 s
        ("10240", 881, 1500, 8, 2),  # 16 GPUs: 2 x 8
        # 10241 asked for no GPU and 10242 never ran (start None, duration 0): skipped
        ("10243", 2726, 3600, 4, 1),
    ]
    first = jobs[0]
    assert (first.user, first.account) == ("6214e9", "ee9e8c")  # the VC is the account
    assert first.labels["state"] == "COMPLETED" and first.labels["queue"] == "5"


def test_philly_log_without_duration_uses_start_and_end(fixture: Fixture) -> None:
    jobs = load_philly(fixture("philly.csv"), PhillyOptions(gpus_per_node=4))
    rows = [(j.id, j.submit_time, j.duration_s, j.request.gpus, j.request.nodes) for j in jobs]
    assert rows == [
        ("app_01", 0, 600, 1, 1),  # 02:10:30 - 02:00:30
        # app_02 never started; app_04 is a CPU job
        ("app_03", 1200, 7200, 4, 3),  # 12 GPUs on 4-GPU nodes: 3 x 4
        ("app_05", 3600, 30, 2, 1),
    ]


def test_philly_reports_every_bad_row(fixture: Fixture, tmp_path: Path) -> None:
    path = edited(fixture("philly.csv"), tmp_path / "a.csv", 2, ",1,Pass", ",one,Pass")
    path = edited(path, tmp_path / "b.csv", 4, "04:30:00", "4.30pm")
    with pytest.raises(TraceError) as err:
        load_philly(path)
    assert str(err.value) == (
        f"{path}, row 2: gpu_num: 'one' is not a whole number; "
        f"{path}, row 4: end_time: '2017-10-03 4.30pm' is not an ISO 8601 time "
        "(e.g. 2020-05-01 08:30:00)"
    )


def test_philly_times_in_a_zone_keep_their_differences(fixture: Fixture) -> None:
    utc = load_philly(fixture("philly.csv"))
    shanghai = load_trace(f"philly:{fixture('philly.csv')},timezone=Asia/Shanghai")
    assert utc == shanghai


# -- Gavel -----------------------------------------------------------------------


def test_gavel_steps_become_time_on_the_reference_gpu() -> None:
    jobs = load_gavel(GAVEL, GavelOptions(throughputs=THROUGHPUTS))
    rows = [(j.id, j.submit_time, j.duration_s, j.request.gpus) for j in jobs]
    # steps / (steps/s on a V100): 38400 / 16 = 2400; 60000 / 12.5 = 4800;
    # 120000 / 40 = 3000; 180000 / 25 = 7200. Arrivals 421.37 -> 421, 1250.6 -> 1251.
    assert rows == [
        ("0", 0, 2400, 1),
        ("1", 421, 4800, 2),
        ("2", 1251, 3000, 4),
        ("3", 2907, 7200, 8),
    ]
    labels = jobs[0].labels
    assert labels["job_type"] == "ResNet-18 (batch size 64)" and labels["gpu_type"] == "v100"
    # the runtime on every type of the table: 38400 / 10 on a P100, / 4 on a K80
    assert (labels["duration_s.p100"], labels["duration_s.k80"]) == ("3840", "9600")


def test_gavel_on_another_gpu_type_and_node_size() -> None:
    spec = f"gavel:{GAVEL},throughputs={THROUGHPUTS},gpu_type=k80,gpus_per_node=4"
    jobs = load_trace(spec)
    # 180000 steps / 4 per s on a K80 = 45000 s; 8 GPUs on 4-GPU nodes: 2 x 4
    assert (jobs[-1].duration_s, jobs[-1].request.gpus, jobs[-1].request.nodes) == (45000, 4, 2)


def test_gavel_older_nine_field_lines(tmp_path: Path) -> None:
    lines = GAVEL.read_text(encoding="utf-8").splitlines()
    older = ["\t".join(f for i, f in enumerate(line.split("\t")) if i != 2) for line in lines]
    path = tmp_path / "old.trace"
    path.write_text("\n".join(older) + "\n", encoding="utf-8")
    options = GavelOptions(throughputs=THROUGHPUTS)
    assert load_gavel(path, options) == load_gavel(GAVEL, options)


def test_gavel_reports_every_bad_line(tmp_path: Path) -> None:
    path = edited(GAVEL, tmp_path / "a.trace", 1, "\t38400\t", "\tmany\t")
    path = edited(path, tmp_path / "b.trace", 3, "LM (batch size 20)", "LM (batch size 80)")
    with pytest.raises(TraceError) as err:
        load_gavel(path, GavelOptions(throughputs=THROUGHPUTS))
    assert str(err.value) == (
        f"{path}, row 1: total_steps: 'many' is not a whole number; "
        f"{path}, row 3: job_type: no throughput for ('LM (batch size 80)', 4) on v100 "
        f"in {THROUGHPUTS}"
    )


def test_gavel_throughputs_path_in_a_spec_file_is_relative_to_it(tmp_path: Path) -> None:
    folder = tmp_path / "gavel"
    folder.mkdir()
    shutil.copy(THROUGHPUTS, folder / "throughputs.json")
    (folder / "spec.toml").write_text('throughputs = "throughputs.json"\n', encoding="utf-8")
    jobs = load_trace(f"gavel:{GAVEL},spec={folder / 'spec.toml'}")
    assert [j.duration_s for j in jobs] == [2400, 4800, 3000, 7200]


# -- Alibaba PAI 2020 -------------------------------------------------------------


def test_pai_jobs_from_their_tasks() -> None:
    jobs = {j.id[:6]: j for j in load_pai(PAI_JOBS)}
    # 3e4f5a never ran (its task has no times): skipped
    assert list(jobs) == ["6f2ab2", "b1e8c7", "0c9d8e", "9a8b7c", "7d6c5b"]
    one, multi, shared, gang, cpu = jobs.values()
    assert (one.submit_time, one.duration_s, one.request.gpus) == (0, 3600, 1)
    # 4 workers x 100 % = 4 GPUs; CPUs 4 x 800 % + 2 ps x 400 % = 40 cores;
    # memory 4 x 15 + 2 x 10 = 80 GB (GiB) = 81920 MiB; first start to last end: 7280 s
    assert (multi.request.gpus, multi.request.cpu_milli, multi.request.memory_mib) == (
        4,
        40000,
        81920,
    )
    assert (multi.submit_time, multi.duration_s) == (120, 7280)
    assert (shared.request.gpus, shared.request.gpu_milli) == (0, 500)  # 50 % of one GPU
    # 2 x 800 % = 16 GPUs: 2 x 8, CPUs and memory split over the 2 nodes
    assert (gang.request.gpus, gang.request.nodes, gang.request.cpu_milli) == (8, 2, 32000)
    assert (cpu.request.gpu_count, cpu.request.cpu_milli) == (0, 2000)
    assert [j.labels.get("gpu_type") for j in jobs.values()] == [
        "V100",
        "T4",
        "MISC",
        "V100M32",
        None,
    ]
    assert gang.labels["status"] == "Failed" and one.user == "58540f191766"


def test_pai_gpu_types_restrict_only_when_mapped() -> None:
    options = PaiOptions(gpu_models={"V100": "V100M16", "V100M32": "V100M32"})
    models = {j.id[:6]: j.request.gpu_models for j in load_pai(PAI_JOBS, options)}
    assert models["6f2ab2"] == {"V100M16"} and models["9a8b7c"] == {"V100M32"}
    assert models["b1e8c7"] == frozenset()  # T4 is not mapped: any model


def test_pai_task_table_option_and_header(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.csv"
    header = ",".join(TASK_COLUMNS) + "\n"
    tasks.write_text(
        header + (PAI_JOBS.parent / "pai_task_table.csv").read_text(), encoding="utf-8"
    )
    assert load_trace(f"pai:{PAI_JOBS},tasks={tasks}") == load_pai(PAI_JOBS)


def test_pai_reports_every_bad_value(tmp_path: Path) -> None:
    shutil.copy(PAI_JOBS, tmp_path / "pai_job_table.csv")
    edited(
        PAI_JOBS.parent / "pai_task_table.csv",
        tmp_path / "pai_task_table.csv",
        2,
        ",4.0,",
        ",four,",
    )
    path = edited(PAI_JOBS, tmp_path / "pai_job_table.csv", 3, ",1000300.0,", ",soon,")
    with pytest.raises(TraceError) as err:
        load_pai(path)
    tasks = tmp_path / "pai_task_table.csv"
    assert str(err.value) == (
        f"{tasks}, row 2: inst_num: 'four' is not a number; "
        f"{path}, row 3: start_time: 'soon' is not a number"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"gavel:{GAVEL}", "gavel trace option: throughputs: required"),
        (
            f"gavel:{GAVEL},throughputs={THROUGHPUTS},gpu_type=a100",
            f"{THROUGHPUTS}: gpu_type: no GPU type 'a100' in the table (known: k80, p100, v100)",
        ),
        (
            f"pai:{PAI_JOBS},gpu_models.V100=V99",
            "pai trace option: gpu_models: V100: unknown GPU model 'V99'",
        ),
        (
            f"philly:{HELIOS},timezone=Mars",
            "philly trace option: timezone: unknown time zone 'Mars'",
        ),
    ],
)
def test_bad_options(spec: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        load_trace(spec)
    assert str(err.value).startswith(message)
