"""Generic traces through a mapping: renames, times, units, constants, labels, and
every problem of a file reported at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces import absolute_spec, dump_history, load_trace
from gpufleet.sim.traces.generic import GenericOptions, load_generic

Fixture = Callable[[str], Path]


def write(tmp_path: Path, text: str, name: str = "jobs.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_spec_file_maps_a_foreign_table(fixture: Fixture) -> None:
    jobs = load_trace(f"generic:{fixture('mapped.csv')},spec={fixture('mapped.toml')}")
    rows = [(j.id, j.submit_time, j.duration_s, j.request.gpus, j.request.memory_mib) for j in jobs]
    # j1 08:00+08:00 = 00:00 UTC is the origin; j2 00:30Z -> 1800 s; j3 09:00 in
    # Asia/Shanghai (the spec's zone for times without an offset) = 01:00 UTC -> 3600 s.
    # Runtimes in minutes: 90 -> 5400 s, 1.5 -> 90 s, 2 -> 120 s. Memory 16 GiB -> 16384 MiB.
    assert rows == [
        ("j1", 0, 5400, 2, 16384),
        ("j2", 1800, 90, 1, 8192),
        ("j3", 3600, 120, 0, 0),
    ]
    # 4 cores -> 4000 milli, 0.5 -> 500, 1 -> 1000
    assert [j.request.cpu_milli for j in jobs] == [4000, 500, 1000]
    assert [(j.account, j.partition) for j in jobs] == [
        ("vcA", "gpu"),
        ("vcB", "gpu"),
        ("vcA", "gpu"),
    ]
    # the column no field takes is kept; an empty cell gives no label
    assert [dict(j.labels) for j in jobs] == [{"job_type": "train"}, {"job_type": "infer"}, {}]


def test_inline_options_override_the_spec_file(fixture: Fixture) -> None:
    spec = f"generic:{fixture('mapped.csv')},spec={fixture('mapped.toml')}"
    # In UTC, j3's 09:00 is 9 h after j1's 00:00 UTC.
    jobs = load_trace(spec + ",timezone=UTC,constants.partition=batch")
    assert [(j.id, j.submit_time, j.partition) for j in jobs][-1] == ("j3", 32400, "batch")


@pytest.mark.parametrize(
    ("time", "cell", "zone", "epoch"),
    [
        ("s", "1588291200", "UTC", 1588291200),
        ("s", "12.6", "UTC", 13),  # decimals round
        ("ms", "1588291200500", "UTC", 1588291200),  # 0.5 s rounds to even
        ("ms", "1500", "UTC", 2),
        ("iso", "2020-05-01 00:00:00", "UTC", 1588291200),
        ("iso", "2020-05-01T00:00:00Z", "Asia/Shanghai", 1588291200),  # an offset wins
        ("iso", "2020-05-01T08:00:00+08:00", "UTC", 1588291200),
        ("iso", "2020-05-01 08:00:00", "Asia/Shanghai", 1588291200),  # UTC+8
        ("iso", "2020-05-01 02:00:00", "Europe/Berlin", 1588291200),  # summer time, UTC+2
    ],
)
def test_time_formats(tmp_path: Path, time: str, cell: str, zone: str, epoch: int) -> None:
    path = write(tmp_path, f"submit_time,duration_s,gpus\n{cell},10,1\n")
    options = GenericOptions(time=time, timezone=zone, origin=0)
    (job,) = load_generic(path, options)
    assert job.submit_time == epoch


def test_origin(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration_s,gpus\n1000,1,1\n1060,1,1\n")
    starts = {  # numbers count from 0 unless told; "first" subtracts the earliest
        None: [1000, 1060],
        "first": [0, 60],
        900.0: [100, 160],
    }
    for origin, expected in starts.items():
        jobs = load_generic(path, GenericOptions(origin=origin))
        assert [j.submit_time for j in jobs] == expected
    with pytest.raises(TraceError, match=r"row 2: submit_time: before the origin \(1030 s\)"):
        load_generic(path, GenericOptions(origin=1030))


def test_id_is_optional_and_duration_may_come_from_start_and_end(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "submit_time,start_time,end_time,gpus\n0,5,65,1\n10,20,20,2\n",
    )
    jobs = load_generic(path)
    # no id column: the job's position; 65 - 5 = 60 s, 20 - 20 = 0 s
    assert [(j.id, j.duration_s) for j in jobs] == [("1", 60), ("2", 0)]


@pytest.mark.parametrize(
    ("field", "unit", "cell", "expected"),
    [
        ("duration_s", "ms", "2500", 2),  # 2.5 s rounds to even
        ("duration_s", "h", "0.5", 1800),
        ("duration_s", "d", "1", 86400),
        ("memory_mib", "GB", "1", 954),  # 10^9 B = 953.7 MiB, rounded up
        ("memory_mib", "KiB", "1536", 2),  # 1.5 MiB, rounded up
        ("memory_mib", "MB", "1", 1),  # 0.95 MiB, rounded up
        ("cpu_milli", "percent", "250", 2500),  # 100 % = one core
        ("cpu_milli", "cores", "0.25", 250),
    ],
)
def test_units(tmp_path: Path, field: str, unit: str, cell: str, expected: int) -> None:
    if field == "duration_s":
        path = write(tmp_path, f"submit_time,gpus,duration_s\n0,1,{cell}\n")
    else:
        path = write(tmp_path, f"submit_time,gpus,duration_s,{field}\n0,1,1,{cell}\n")
    (job,) = load_generic(path, GenericOptions.model_validate({"units": {field: unit}}))
    value = job.duration_s if field == "duration_s" else getattr(job.request, field)
    assert value == expected


@pytest.mark.parametrize(
    ("cell", "gpus", "gpu_milli"),
    [
        ("100", 1, 0),
        ("50", 0, 500),  # half a GPU, shared
        ("25", 0, 250),
        ("800", 8, 0),
        ("150", 2, 0),  # more than one GPU is whole GPUs, rounded up
    ],
)
def test_gpu_percent(tmp_path: Path, cell: str, gpus: int, gpu_milli: int) -> None:
    path = write(tmp_path, f"submit_time,duration_s,gpus\n0,1,{cell}\n")
    (job,) = load_generic(path, GenericOptions.model_validate({"units": {"gpus": "percent"}}))
    assert (job.request.gpus, job.request.gpu_milli) == (gpus, gpu_milli)


def test_gpus_per_node_makes_gangs(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration_s,gpus\n0,1,12\n0,1,4\n")
    jobs = load_generic(path, GenericOptions(gpus_per_node=4))
    # 12 GPUs on 4-GPU nodes -> 3 x 4; 4 GPUs fit one node
    assert [(j.request.gpus, j.request.nodes) for j in jobs] == [(4, 3), (4, 1)]


def test_every_header_problem_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "Submit,gpus,partition,usr\n0,1,a,x\n")
    options = GenericOptions(
        columns={"id": "JobID"}, constants={"partition": "gpu", "duration_s": 10}
    )
    with pytest.raises(TraceError) as err:
        load_generic(path, options)
    assert str(err.value) == "; ".join(
        f"{path}, row 1: {problem}"
        for problem in [
            "JobID: column missing (mapped to id)",
            "partition: a column, yet constants.partition gives partition too",
            "submit_time: column missing; map one with columns.submit_time=Submit",
            "usr: looks like a misspelt user: map it (columns.user=usr) or set constants.user",
        ]
    )


def test_every_row_problem_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "id,submit_time,duration_s,gpus,preemptible\n"
        "a,x,1,1,no\n"
        "b,0,1\n"
        "c,0,-5,two,maybe\n"
        "d,0,1,1,no\n",
    )
    with pytest.raises(TraceError) as err:
        load_generic(path)
    assert str(err.value) == "; ".join(
        [
            f"{path}, row 2: submit_time: 'x' is not a number",
            f"{path}, row 3: expected 5 fields",
            f"{path}, row 4: duration_s: must be 0 or more, got -5",
            f"{path}, row 4: gpus: 'two' is not a whole number",
            f"{path}, row 4: preemptible: 'maybe' is not true/false",
        ]
    )


COLUMNS = ("submit_time", "duration_s", "gpus", "cpu_milli")


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(1, 12),
    bad=st.sets(st.tuples(st.integers(0, 11), st.sampled_from(COLUMNS)), max_size=20),
)
def test_each_bad_cell_is_reported_once_with_its_row_and_column(
    tmp_path: Path, rows: int, bad: set[tuple[int, str]]
) -> None:
    bad = {(r, c) for r, c in bad if r < rows}
    lines = [",".join(COLUMNS)]
    for r in range(rows):
        lines.append(",".join("oops" if (r, c) in bad else "1" for c in COLUMNS))
    path = write(tmp_path, "\n".join(lines) + "\n", f"jobs{rows}-{len(bad)}.csv")
    if not bad:
        assert len(load_generic(path)) == rows
        return
    with pytest.raises(TraceError) as err:
        load_generic(path)
    problems = str(err.value).split("; ")
    reported = {(p.split(", row ")[1].split(":")[0], p.split(": ")[1]) for p in problems}
    # the file's row is the job's position + 2 (the header is row 1)
    assert reported == {(str(r + 2), c) for r, c in bad}
    assert len(problems) == len(bad)


def test_bad_mapping_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as err:
        load_trace("generic:jobs.csv,units.memory_mib=parsecs")
    assert str(err.value) == (
        "generic trace option: units.memory_mib: "
        "must be 'B', 'KB', 'KiB', 'MB', 'MiB', 'GB', 'GiB', 'TB' or 'TiB'"
    )


def test_options_travel_with_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture: Fixture
) -> None:
    write(tmp_path, fixture("mapped.csv").read_text(), "mapped.csv")
    write(tmp_path, fixture("mapped.toml").read_text(), "mapped.toml")
    monkeypatch.chdir(tmp_path)
    spec = absolute_spec("generic:mapped.csv,spec=mapped.toml,time=iso")
    root = tmp_path.resolve()
    assert spec == f"generic:{root / 'mapped.csv'},spec={root / 'mapped.toml'},time=iso"
    monkeypatch.chdir("/")
    assert len(load_trace(spec)) == 3


def test_a_constant_fills_a_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration_s\n0,5\n")
    (job,) = load_trace(f"generic:{path},constants.gpus=2,constants.preemptible=true")
    assert (job.request.gpus, job.preemptible) == (2, True)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("priority_class=urgent", "priority_class: must be one of high, normal, low, got 'urgent'"),
        ("preemptible=maybe", "preemptible: 'maybe' is not true/false"),
        ("gpus=two", "gpus: 'two' is not a whole number"),
        ("time_limit_s=0", "time_limit_s: must be 1 or more, got 0"),
        ("gpu_models=Z100", "gpu_models: unknown GPU model 'Z100' (known: "),
    ],
)
def test_a_bad_constant_is_one_option_problem(tmp_path: Path, option: str, message: str) -> None:
    """The same value in every row: the option is wrong, not each row of the file."""
    path = write(tmp_path, "submit_time,duration_s\n0,5\n9,5\n")
    with pytest.raises(TraceError) as err:
        load_trace(f"generic:{path},constants.{option}")
    assert str(err.value).startswith(f"generic trace option: constants.{message}")
    assert "row" not in str(err.value)


def test_a_bad_priority_class_column_is_a_row_problem(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration_s,gpus,priority_class\n0,5,1,high\n9,5,1,top\n")
    with pytest.raises(TraceError) as err:
        load_generic(path)
    expected = "priority_class: must be one of high, normal, low, got 'top'"
    assert str(err.value) == f"{path}, row 3: {expected}"


def test_labels_survive_the_history_file(fixture: Fixture, tmp_path: Path) -> None:
    jobs = load_trace(f"generic:{fixture('mapped.csv')},spec={fixture('mapped.toml')}")
    dump_history(tmp_path / "past.jsonl", jobs)
    assert load_trace(f"history:{tmp_path / 'past.jsonl'}") == jobs
    assert jobs[0].labels == {"job_type": "train"}


def test_start_and_end_times_that_give_no_runtime(tmp_path: Path) -> None:
    """Without duration_s, an end before the start or only one of the two times is a
    problem of its row, not a 0-second job or a row dropped without a word."""
    path = write(
        tmp_path,
        "id,submit_time,start_time,end_time,gpus\na,0,10,5,1\nb,0,,5,1\nc,0,5,,1\nd,0,5,5,1\n",
    )
    with pytest.raises(TraceError) as err:
        load_generic(path)
    runtime = "the runtime is end_time - start_time"
    assert str(err.value) == "; ".join(
        [
            f"{path}, row 2: end_time: before start_time, by 5 s",
            f"{path}, row 3: start_time: empty (end_time given): {runtime}",
            f"{path}, row 4: end_time: empty (start_time given): {runtime}",
        ]
    )


@pytest.mark.parametrize(
    ("cell", "gpus", "gpu_milli"),
    [
        ("99.96", 1, 0),  # 999.6 milli rounds to the whole GPU
        ("99.94", 0, 999),
        ("0.04", 0, 1),  # a share too small for a milli still asks for a GPU
        ("0", 0, 0),
    ],
)
def test_gpu_percent_edges(tmp_path: Path, cell: str, gpus: int, gpu_milli: int) -> None:
    path = write(tmp_path, f"submit_time,duration_s,gpus,cpu_milli\n0,1,{cell},100\n")
    (job,) = load_generic(path, GenericOptions.model_validate({"units": {"gpus": "percent"}}))
    assert (job.request.gpus, job.request.gpu_milli) == (gpus, gpu_milli)


def test_a_field_both_mapped_and_constant(tmp_path: Path) -> None:
    path = write(tmp_path, "id,submit_time,duration_s,gpus\na,0,5,1\n")
    with pytest.raises(TraceError) as err:
        load_trace(f"generic:{path},constants.user=bob,columns.user=x")
    assert str(err.value) == f"{path}, row 1: x: mapped to user, yet constants.user gives user too"


def test_repeated_ids_are_row_problems(tmp_path: Path) -> None:
    path = write(tmp_path, "id,submit_time,duration_s,gpus\na,0,5,1\nb,0,5,1\na,9,5,x\na,3,5,1\n")
    with pytest.raises(TraceError) as err:
        load_generic(path)
    assert str(err.value) == "; ".join(
        [
            f"{path}, row 4: gpus: 'x' is not a whole number",
            f"{path}, row 5: id: 'a' appears twice, first on row 2",
        ]
    )


def test_origin_before_a_submit_time_prints_in_full(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration_s,gpus\n1588291200,1,1\n")
    with pytest.raises(TraceError, match=r"before the origin \(1588291300 s\), by 100 s"):
        load_generic(path, GenericOptions(origin=1588291300))
