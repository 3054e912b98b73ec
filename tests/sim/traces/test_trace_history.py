"""gpufleet's job history: dump and load round-trip, and malformed lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.model import Request
from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.history import dump_history, load_history
from gpufleet.sim.traces.record import PRIORITY_CLASSES, TraceJob

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
requests = st.one_of(
    st.builds(
        Request, gpus=st.integers(1, 8), nodes=st.integers(1, 4), cpu_milli=st.integers(0, 10**6)
    ),
    st.builds(Request, gpu_milli=st.integers(1, 999), gpu_memory_mib=st.integers(0, 10**5)),
    st.builds(Request, mig_profile=st.just("3g.40gb"), mig_count=st.integers(1, 2)),
    st.builds(
        Request,
        gpus=st.just(1),
        gpu_models=st.frozensets(st.sampled_from(["A100-80GB", "H100-80GB"])),
        min_gpu_memory_mib=st.integers(0, 81920),
    ),
)
jobs = st.builds(
    TraceJob,
    id=names.filter(bool),
    submit_time=st.integers(0, 10**9),
    duration_s=st.integers(0, 10**7),
    request=requests,
    user=names,
    account=names,
    qos=names,
    partition=names,
    time_limit_s=st.none() | st.integers(1, 10**7),
    preemptible=st.booleans(),
    priority_class=st.sampled_from(PRIORITY_CLASSES),
    checkpoint_interval_s=st.none() | st.integers(1, 10**5),
)  # fmt: skip


@given(st.lists(jobs, min_size=1, max_size=3, unique_by=lambda job: job.id))
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, trace: list[TraceJob]) -> None:
    path = tmp_path_factory.getbasetemp() / "round_trip.jsonl"  # rewritten by each example
    dump_history(path, trace)
    assert load_history(path) == sorted(trace, key=lambda job: job.submit_time)


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = '{"id": "a", "submit_time": 5, "duration_s": 60, "request": {"gpus": 2}}'


def test_omitted_fields_take_defaults(tmp_path: Path) -> None:
    (job,) = load_history(write(tmp_path, "", GOOD, ""))
    assert job == TraceJob(id="a", submit_time=5, duration_s=60, request=Request(gpus=2))


HEAD = '{"id": "a", "submit_time": 5, "duration_s": 60'


@pytest.mark.parametrize(
    ("line", "field", "reason"),
    [
        (HEAD + "}", "request", "missing"),
        ('{"id": "a", "submit_time": "5", "duration_s": 60, "request": {"gpus": 2}}',
         "submit_time", 'must be int, got "5"'),
        ('{"id": "a", "submit_time": 5, "duration_s": true, "request": {"gpus": 2}}',
         "duration_s", "must be int, got true"),
        (HEAD + ', "request": {"gpus": 2}, "time_limit_s": 1.5}',
         "time_limit_s", "must be int or null, got 1.5"),
        (HEAD + ', "request": {"gpus": 2}, "preemptable": true}',
         "preemptable", "unknown field (known: id,"),
        (HEAD + ', "request": {"gpu": 2}}', "request.gpu", "unknown field (known: cpu_milli,"),
        (HEAD + ', "request": {"gpus": -2}}', "request.gpus", "must be zero or more, got -2"),
        (HEAD + ', "request": {"gpus": 1, "gpu_models": [1]}}',
         "request.gpu_models", "must be a list of strings"),
        (HEAD + ', "request": [2]}', "request", "must be dict, got [2]"),
        (HEAD + ', "request": {"gpus": 2}, "priority_class": "top"}',
         "priority_class", "must be one of high, normal, low, got 'top'"),
    ],
)  # fmt: skip
def test_malformed_line_names_row_and_field(
    tmp_path: Path, line: str, field: str, reason: str
) -> None:
    path = write(tmp_path, GOOD, line)
    with pytest.raises(TraceError) as err:
        load_history(path)
    assert str(err.value).startswith(f"{path}, row 2: {field}: {reason}")


@pytest.mark.parametrize(
    ("line", "reason"), [("{not json", "not JSON: "), ("[1, 2]", "must be a JSON object")]
)
def test_line_that_is_not_an_object(tmp_path: Path, line: str, reason: str) -> None:
    path = write(tmp_path, line)
    with pytest.raises(TraceError) as err:
        load_history(path)
    assert str(err.value).startswith(f"{path}, row 1: {reason}")


def test_paths_may_be_strings(tmp_path: Path) -> None:
    job = TraceJob(id="a", submit_time=5, duration_s=60, request=Request(gpus=2))
    name = str(tmp_path / "history.jsonl")
    dump_history(name, [job])
    assert load_history(name) == [job]
