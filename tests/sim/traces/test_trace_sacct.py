"""sacct -P: TRES, timestamps, Slurm durations, and which jobs count as run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import node
from gpufleet.sim.openb import TraceError
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.sacct import SacctOptions, load_sacct, slurm_seconds

Corrupt = Callable[[str, int, str, str], Path]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00:00:45", 45),
        ("01:00:00", 3600),
        ("05:00", 300),  # MM:SS
        ("30", 1800),  # bare minutes
        ("1-00:00:00", 86400),
        ("1-02:03:04", 93784),  # 86400 + 2 x 3600 + 3 x 60 + 4
        ("2-03", 183600),  # D-HH: 2 x 86400 + 3 x 3600
        ("00:00:01.500", 2),  # fractions round up
        ("100:00:00", 360000),  # hours past a day without D-
        ("90", 5400),  # bare minutes past an hour, as slurm.conf's MaxTime=90
        ("90:30", 5430),  # MM:SS with minutes past an hour
    ],
)
def test_slurm_seconds(text: str, expected: int) -> None:
    assert slurm_seconds(text) == expected


@pytest.mark.parametrize("text", ["", "1:2:3:4", "00:61:00", "x-01:00:00", "-5", "01::00"])
def test_slurm_seconds_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        slurm_seconds(text)


@given(st.integers(0, 400 * 86400))
def test_slurm_seconds_reads_what_slurm_writes(total: int) -> None:
    days, rest = divmod(total, 86400)
    clock = f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    # sacct writes D-HH:MM:SS from a day up, HH:MM:SS below
    assert slurm_seconds(f"{days}-{clock}" if days else clock) == total


def test_loads_jobs_that_ran(fixture: Callable[[str], Path]) -> None:
    jobs = load_sacct(fixture("sacct.psv"))
    # 12 is PENDING, 13 never started (Start None, no AllocTRES), 10.batch is a step.
    assert [j.id for j in jobs] == ["15", "10", "11", "14"]
    # Submit times count from the earliest, 09:59:00 (job 15).
    assert [j.submit_time for j in jobs] == [0, 60, 90, 240]
    # 45 s; 1 h; 2 h; running for 1-02:03:04 so far
    assert [j.duration_s for j in jobs] == [45, 3600, 7200, 93784]
    # 05:00; 1 day; UNLIMITED; 2 days
    assert [j.time_limit_s for j in jobs] == [300, 86400, None, 172800]
    # State's first word ("CANCELLED by 1000")
    assert [j.labels["status"] for j in jobs] == ["COMPLETED", "COMPLETED", "CANCELLED", "RUNNING"]
    first = jobs[1]
    assert (first.user, first.account, first.qos, first.partition) == (
        "ana",
        "vision",
        "normal",
        "gpu",
    )


def test_a_day_origin_keeps_the_clock(fixture: Callable[[str], Path]) -> None:
    """From midnight, times are the clock's (09:59:00 is 35,940 s), their differences
    the same, so holds rounded to the minute fall on the clock's minutes."""
    first = load_sacct(fixture("sacct.psv"))
    day = load_sacct(fixture("sacct.psv"), SacctOptions(origin="day"))
    assert [j.submit_time for j in day] == [35940, 36000, 36030, 36180]
    assert [(j.id, j.duration_s) for j in day] == [(j.id, j.duration_s) for j in first]


@pytest.mark.parametrize(("origin", "waits"), [("day", True), ("first", False)])
def test_holds_round_on_the_clock_with_a_day_origin(
    tmp_path: Path, origin: Literal["first", "day"], waits: bool
) -> None:
    """A (4 of 8 GPUs, limit 2 min from 10:00:30) keeps the 8-GPU B waiting, planned at
    10:02:30 and held from the minute before, 10:02:00, as Slurm rounds it. C (limit
    1 min, at 10:01:10) would end at 10:02:10, inside that hold: it waits. Counted from
    the first submission, the hold begins at 120 s, 10:02:30, and C slips in."""
    header = "JobID|User|Account|Partition|Submit|Start|Elapsed|Timelimit|State|NNodes|AllocTRES"
    rows = [
        f"{k}|u|a|gpu|2026-11-01T{at}|2026-11-01T{at}|{ran}|{limit}|COMPLETED|1|cpu=1,gres/gpu={g}"
        for k, at, ran, limit, g in [
            ("A", "10:00:30", "00:01:00", "00:02:00", 4),
            ("B", "10:00:40", "00:00:30", "00:01:00", 8),
            ("C", "10:01:10", "00:00:20", "00:01:00", 2),
        ]
    ]
    jobs = load_sacct(_export(tmp_path, header, rows), SacctOptions(origin=origin))
    profile = profile_from_dict({"backfill": {"mode": "conservative"}}, "bf")
    result = replay([node("n1").gpus(8).build()], jobs, profile)
    c = next(r for r in result.jobs if r.job.id == "C")
    assert (c.first_start > c.submit_time) is waits


def test_requests_from_alloc_tres(fixture: Callable[[str], Path]) -> None:
    jobs = {j.id: j.request for j in load_sacct(fixture("sacct.psv"))}
    # 2 GPUs, 2 CPUs, 16G = 16384 MiB on one node
    assert (jobs["10"].gpus, jobs["10"].cpu_milli, jobs["10"].memory_mib) == (2, 2000, 16384)
    # gres/gpu:h100=16 over 2 nodes: 8 each; 32 CPUs -> 16000 milli; 500G -> 256000 MiB each
    big = jobs["11"]
    assert (big.gpus, big.nodes, big.cpu_milli, big.memory_mib) == (8, 2, 16000, 256000)
    # allocated, not requested: cpu=4 in AllocTRES
    assert jobs["14"].cpu_milli == 4000
    # a CPU-only job: 8G = 8192 MiB
    assert (jobs["15"].gpu_count, jobs["15"].memory_mib) == (0, 8192)
    assert all(not r.gpu_models for r in jobs.values())  # no model map: any model


def test_gpu_model_map(fixture: Callable[[str], Path]) -> None:
    options = SacctOptions(gpu_models={"h100": "H100-80GB", "a100": "A100-80GB"})
    jobs = {j.id: j.request for j in load_sacct(fixture("sacct.psv"), options)}
    assert jobs["10"].gpu_models == {"A100-80GB"}
    assert jobs["11"].gpu_models == {"H100-80GB"}
    assert jobs["14"].gpu_models == frozenset()  # untyped gres/gpu


def test_gpu_model_map_rejects_unknown_models() -> None:
    with pytest.raises(ValueError, match="unknown GPU model 'H1000'"):
        SacctOptions(gpu_models={"h100": "H1000"})


def test_req_tres_replaces_a_missing_alloc_tres(
    tmp_path: Path, fixture: Callable[[str], Path]
) -> None:
    lines = fixture("sacct.psv").read_text().splitlines()
    path = tmp_path / "requested.psv"
    path.write_text("\n".join(line.rsplit("|", 1)[0] for line in lines) + "\n")
    jobs = {j.id: j.request for j in load_sacct(path)}
    assert list(jobs) == ["15", "10", "11", "14"]  # 13 still never started
    assert jobs["14"].cpu_milli == 1000  # cpu=1 requested, where 4 were allocated


def test_trailing_separator_of_sacct_p(tmp_path: Path, fixture: Callable[[str], Path]) -> None:
    lines = fixture("sacct.psv").read_text().splitlines()
    path = tmp_path / "p.psv"
    path.write_text("".join(line + "|\n" for line in lines))
    assert load_sacct(path) == load_sacct(fixture("sacct.psv"))


def test_end_replaces_a_missing_elapsed(tmp_path: Path, fixture: Callable[[str], Path]) -> None:
    lines = fixture("sacct.psv").read_text().splitlines()
    without = ["|".join(f for i, f in enumerate(line.split("|")) if i != 10) for line in lines]
    path = tmp_path / "noelapsed.psv"
    path.write_text("\n".join(without[:2]) + "\n")
    assert load_sacct(path)[0].duration_s == 3600  # 11:00:05 - 10:00:05


@pytest.mark.parametrize(
    ("line", "old", "new", "field", "reason"),
    [
        (
            2,
            "|01:00:00|",
            "|an hour|",
            "Elapsed",
            "'an hour' is not a Slurm duration ([D-]HH:MM:SS)",
        ),
        (
            2,
            "|1-00:00:00|",
            "|forever|",
            "Timelimit",
            "'forever' is not a Slurm duration ([D-]HH:MM:SS)",
        ),
        (2, "2026-01-01T10:00:00", "yesterday", "Submit", "'yesterday' is not an ISO timestamp"),
        (
            2,
            "|2026-01-01T10:00:05|2026-01-01T11",
            "|soon|2026-01-01T11",
            "Start",
            "'soon' is not an ISO timestamp",
        ),
        (4, "|2|billing", "|0|billing", "NNodes", "must be 1 or more, got 0"),
        (
            2,
            "gres/gpu=2,mem=16G,node=1\n",
            "gres/gpu=two,mem=16G,node=1\n",
            "AllocTRES",
            "'two' is not a whole number",
        ),
        (
            2,
            "mem=16G,node=1\n",
            "mem=16Q,node=1\n",
            "AllocTRES",
            "mem='16Q' is not a memory amount",
        ),
        (
            2,
            "billing=2,cpu=2,gres/gpu:a100",
            "billing2,cpu=2,gres/gpu:a100",
            "AllocTRES",
            "'billing2' is not a name=value TRES entry",
        ),
        (
            8,
            "|cpu|normal|2026-01-01T09:59:00|",
            "|cpu|normal|Unknown|",
            "Submit",
            "'Unknown': a job needs a submit time",
        ),
        (
            8,
            "billing=4,cpu=4,mem=8G,node=1\n",
            "billing=4,node=1\n",
            "AllocTRES",
            "asks for nothing: give CPUs, GPUs or a MIG profile",
        ),
        (1, "|ReqTRES|AllocTRES", "|Req|Alloc", "AllocTRES", "column missing from the header"),
        (1, "|NNodes|", "|Nodes|", "NNodes", "column missing from the header"),
    ],
)
def test_malformed_row_names_row_and_field(
    corrupt: Corrupt, line: int, old: str, new: str, field: str, reason: str
) -> None:
    path = corrupt("sacct.psv", line, old, new)
    with pytest.raises(TraceError) as err:
        load_sacct(path)
    assert str(err.value) == f"{path}, row {line}: {field}: {reason}"


def _one_job(tmp_path: Path, alloc: str, nodes: int = 1) -> Path:
    header = "JobID|User|Account|Partition|QOS|Submit|Start|Elapsed|Timelimit|State|NNodes"
    row = "7|ana|vision|gpu|normal|2026-01-01T10:00:00|2026-01-01T10:00:05|01:00:00|01:00:00"
    path = tmp_path / "mig.psv"
    path.write_text(f"{header}|AllocTRES\n{row}|COMPLETED|{nodes}|{alloc}\n")
    return path


@pytest.mark.parametrize(
    ("alloc", "nodes", "profile", "instances", "cpu_milli"),
    [
        # Slurm's NVML autodetection names a MIG device type by its profile.
        ("cpu=2,gres/gpu:1g.10gb=1,gres/gpu=1,mem=8G", 1, "1g.10gb", 1, 2000),
        ("cpu=4,gres/gpu:3g.40gb=2,mem=8G", 1, "3g.40gb", 2, 4000),
        # A site prefix before the profile, and a gang of two nodes with 2 each.
        ("cpu=8,gres/gpu:a100_1g.5gb=4,gres/gpu=4", 2, "1g.5gb", 2, 4000),
    ],
)
def test_a_mig_gres_type_is_a_mig_request(
    tmp_path: Path, alloc: str, nodes: int, profile: str, instances: int, cpu_milli: int
) -> None:
    (job,) = load_sacct(_one_job(tmp_path, alloc, nodes))
    r = job.request
    assert (r.mig_profile, r.mig_count, r.gpus, r.gpu_milli) == (profile, instances, 0, 0)
    assert (r.nodes, r.cpu_milli) == (nodes, cpu_milli)


@pytest.mark.parametrize(
    ("alloc", "reason"),
    [
        ("gres/gpu:1g.10gb=1,gres/gpu:h100=1,gres/gpu=2", "one profile and no whole GPUs"),
        ("gres/gpu:1g.10gb=1,gres/gpu:3g.40gb=1", "one profile and no whole GPUs"),
        ("gres/gpu:9g.90gb=1", "unknown MIG profile '9g.90gb'"),
        # Media extensions are a profile of their own, not a whole GPU.
        ("gres/gpu:a100_1g.10gb+me=1,gres/gpu=1", "unknown MIG profile '1g.10gb\\+me'"),
        ("cpu=2,mem=infG", "mem='infG' is not a memory amount"),
        ("cpu=2,mem=nanG", "mem='nanG' is not a memory amount"),
        ("cpu=99999999999999999999999,gres/gpu=1", "must be at most 1099511627776"),
    ],
)
def test_a_mig_gres_mix_gpufleet_cannot_hold_is_refused(
    tmp_path: Path, alloc: str, reason: str
) -> None:
    with pytest.raises(TraceError, match=reason) as err:
        load_sacct(_one_job(tmp_path, alloc))
    assert ", row 2: AllocTRES: " in str(err.value)


def _export(tmp_path: Path, header: str, rows: list[str]) -> Path:
    path = tmp_path / "export.psv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_the_qos_column_is_optional(tmp_path: Path) -> None:
    path = _export(
        tmp_path,
        "JobID|User|Account|Partition|Submit|Start|Elapsed|Timelimit|State|NNodes|AllocTRES",
        [
            "7|ana|vision|gpu|2026-01-01T10:00:00|2026-01-01T10:00:05|00:01:00|00:05:00"
            "|COMPLETED|1|cpu=1,gres/gpu=1"
        ],
    )
    (job,) = load_sacct(path)
    assert (job.id, job.qos, job.request.gpus) == ("7", "", 1)


def test_a_replay_runs_jobs_under_the_exports_qos(tmp_path: Path) -> None:
    header = (
        "JobID|User|Account|Partition|QOS|Submit|Start|Elapsed|Timelimit|State|NNodes|AllocTRES"
    )
    row = (
        "|ana|vision|gpu|{}|2026-01-01T10:00:00|2026-01-01T10:00:05|00:01:00|00:05:00|COMPLETED|1|"
    )
    path = _export(
        tmp_path,
        header,
        [f"{i}" + row.format(q) + "cpu=1,gres/gpu=8" for i, q in ((1, "normal"), (2, "urgent"))],
    )
    # Both want the one 8-GPU node at once; "urgent" is defined with a higher priority.
    profile = profile_from_dict(
        {
            "ordering": {"plugin": "multifactor"},
            "qos": [{"name": "urgent", "priority": 1000}],
            "partitions": [{"name": "gpu"}],
        },
        "qos",
    )
    result = replay([node("n0").gpus(8).build()], load_sacct(path), profile)
    jobs = {r.job.id: r for r in result.jobs}
    assert (jobs["1"].job.qos, jobs["2"].job.qos) == ("normal", "urgent")
    assert (jobs["2"].first_start, jobs["1"].first_start) == (0, 60)  # urgent first
