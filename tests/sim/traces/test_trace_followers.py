"""The ``after`` and ``think_s`` columns of the generic CSV and the history file, and
SWF's preceding job and think time: read, mapped, and bad references refused naming
their row."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import node
from gpufleet.core.model import Request
from gpufleet.sim.openb import TraceError
from gpufleet.sim.profile import default_profile, replay
from gpufleet.sim.traces.generic import GenericOptions, Units, load_generic
from gpufleet.sim.traces.history import dump_history, load_history
from gpufleet.sim.traces.record import TraceJob
from gpufleet.sim.traces.swf import SwfMapping, load_swf

HEADER = "id,submit_time,duration_s,gpus,after,think_s"


def csv(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_generic_reads_after_and_think_time(tmp_path: Path) -> None:
    jobs = {j.id: j for j in load_generic(csv(tmp_path, "a,0,60,1,,", "b,0,30,1,a,45"))}
    assert (jobs["a"].after, jobs["a"].think_s) == (None, 0)
    assert (jobs["b"].after, jobs["b"].think_s) == ("a", 45)


def test_generic_maps_the_columns_and_the_think_time_unit(tmp_path: Path) -> None:
    header = "id,submit_time,duration_s,gpus,prev,think"
    path = csv(tmp_path, "a,0,60,1,,", "b,0,30,1,a,2", header=header)
    options = GenericOptions(
        columns={"after": "prev", "think_s": "think"}, units=Units(think_s="min")
    )
    (b,) = [j for j in load_generic(path, options) if j.id == "b"]
    assert (b.after, b.think_s) == ("a", 120)  # 2 min


@pytest.mark.parametrize(
    ("rows", "line", "field", "reason"),
    [
        (("a,0,60,1,,", "b,0,30,1,zz,0"), 3, "after", "no job 'zz' in the trace"),
        (("a,0,60,1,a,0",), 2, "after", "names the job itself ('a')"),
        (("a,0,60,1,b,0", "b,0,30,1,a,0"), 2, "after", "a cycle: a -> b -> a"),
        (("a,0,60,1,,5",), 2, "think_s", "needs after"),
        (("a,0,60,1,,", "b,0,30,1,a,-3"), 3, "think_s", "must be 0 or more, got -3"),
    ],
    ids=["unknown", "self", "cycle", "think-alone", "negative-think"],
)
def test_generic_refuses_bad_references_naming_row(
    tmp_path: Path, rows: tuple[str, ...], line: int, field: str, reason: str
) -> None:
    path = csv(tmp_path, *rows)
    with pytest.raises(TraceError) as err:
        load_generic(path)
    assert str(err.value).startswith(f"{path}, row {line}: {field}: {reason}")


def test_generic_cycle_lists_every_member(tmp_path: Path) -> None:
    path = csv(tmp_path, "a,0,60,1,b,0", "b,0,30,1,a,0")
    with pytest.raises(TraceError) as err:
        load_generic(path)
    assert str(err.value) == (
        f"{path}, row 2: after: a cycle: a -> b -> a; {path}, row 3: after: a cycle: a -> b -> a"
    )


def job(job_id: str, after: str | None = None, think_s: int = 0) -> TraceJob:
    request = Request(gpus=1)
    return TraceJob(
        id=job_id, submit_time=0, duration_s=60, request=request, after=after, think_s=think_s
    )


def test_history_round_trips_followers(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    trace = [job("a"), job("b", after="a", think_s=30)]
    dump_history(path, trace)
    assert load_history(path) == trace


def test_history_refuses_an_unknown_reference_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    dump_history(path, [job("a"), job("b", after="a"), job("c", after="nope")])
    with pytest.raises(TraceError) as err:
        load_history(path)
    assert str(err.value) == f"{path}, row 3: after: no job 'nope' in the trace"


# job, submit, wait, run time, procs, ..., preceding job (17), think time (18); job 4 never ran
SWF = """; feedback
1    0  0  100  1 -1 -1  1  200 -1 1  3  1 -1  0  1 -1 -1
2   50  0   50  1 -1 -1  1  200 -1 1  3  1 -1  0  1  1 30
3   90  0   20  1 -1 -1  1  200 -1 1  3  1 -1  0  1  2 -1
4   95  0    0  1 -1 -1  1  200 -1 5  3  1 -1  0  1 -1 -1
5  120  0   20  1 -1 -1  1  200 -1 1  3  1 -1  0  1  4 60
"""


def swf(tmp_path: Path, text: str = SWF) -> Path:
    path = tmp_path / "chain.swf"
    path.write_text(text, encoding="utf-8")
    return path


def test_swf_feedback_chains_jobs_from_the_first_ones_submit_time(tmp_path: Path) -> None:
    jobs = {j.id: j for j in load_swf(swf(tmp_path), SwfMapping(feedback=True))}
    got = {k: (j.submit_time, j.after, j.think_s) for k, j in jobs.items()}
    # 2 and 3 go in from job 1's time 0; an unknown think time (-1) is 0; job 4 never
    # ran, so 5 follows nobody and keeps its own time.
    assert got == {"1": (0, None, 0), "2": (0, "1", 30), "3": (0, "2", 0), "5": (120, None, 0)}
    # Replayed on one node: 1 runs 0..100 and 5 120..140; 2 goes in at 100 + 30 = 130,
    # waits for 5, runs 140..190; 3 goes in at 190 + 0.
    result = replay([node("n0").gpus(1).build()], list(jobs.values()), default_profile())
    assert {r.job.id: r.submit_time for r in result.jobs} == {"1": 0, "2": 130, "3": 190, "5": 120}


def test_swf_without_feedback_ignores_fields_17_and_18(tmp_path: Path) -> None:
    jobs = load_swf(swf(tmp_path))
    assert [(j.id, j.submit_time, j.after) for j in jobs] == [
        ("1", 0, None), ("2", 50, None), ("3", 90, None), ("5", 120, None)
    ]


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "reason"),
    [
        ("1  2 -1\n", "1  3 -1\n", 4, "preceding_job", "names the job itself ('3')"),
        ("1 -1 -1\n2", "1  3 -1\n2", 2, "preceding_job", "a cycle: 1 -> 3 -> 2 -> 1"),
    ],
    ids=["self", "cycle"],
)
def test_swf_feedback_refuses_bad_chains(
    tmp_path: Path, old: str, new: str, line: int, field: str, reason: str
) -> None:
    assert old in SWF
    path = swf(tmp_path, SWF.replace(old, new, 1))
    with pytest.raises(TraceError) as err:
        load_swf(path, SwfMapping(feedback=True))
    assert str(err.value) == f"{path}, row {line}: {field}: {reason}"
