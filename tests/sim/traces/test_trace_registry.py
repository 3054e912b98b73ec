"""load_trace: FORMAT:PATH specs reach the right loader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.sim.traces import FORMATS, TraceError, dump_history, generate, load_trace

FIXTURE_OF = {
    "openb": "openb_pods.csv",
    "swf": "tiny.swf",
    "tiresias": "tiresias.csv",
    "sacct": "sacct.psv",
    "generic": "generic.csv",
    "philly": "philly.csv",
}
EXAMPLES = Path(__file__).parents[3] / "examples" / "traces"
# Formats whose files the docs run, with the options they need.
EXAMPLE_OF = {
    "pai": (EXAMPLES / "pai" / "pai_job_table.csv", ""),
    "gavel": (EXAMPLES / "gavel.trace", f",throughputs={EXAMPLES / 'gavel-throughputs.json'}"),
}


@pytest.mark.parametrize("name", sorted(FIXTURE_OF))
def test_spec_picks_the_loader(fixture: Callable[[str], Path], name: str) -> None:
    path = fixture(FIXTURE_OF[name])
    jobs = load_trace(f"{name}:{path}")
    assert jobs == FORMATS[name].load(path, FORMATS[name].options())
    assert [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


@pytest.mark.parametrize("name", sorted(EXAMPLE_OF))
def test_spec_with_options_picks_the_loader(name: str) -> None:
    path, options = EXAMPLE_OF[name]
    jobs = load_trace(f"{name}:{path}{options}")
    assert jobs and [j.submit_time for j in jobs] == sorted(j.submit_time for j in jobs)


def test_history_spec(tmp_path: Path) -> None:
    jobs = generate(20, seed=5, gpus_total=16)
    dump_history(tmp_path / "past.jsonl", jobs)
    assert load_trace(f"history:{tmp_path / 'past.jsonl'}") == jobs


def test_synthetic_spec() -> None:
    assert load_trace("synthetic:n_jobs=30,seed=2,gpus_total=16") == generate(
        30, seed=2, gpus_total=16
    )


def test_every_format_is_covered() -> None:
    assert set(FORMATS) == {*FIXTURE_OF, *EXAMPLE_OF, "history"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("jobs.swf", "jobs.swf: a trace is given as FORMAT:PATH, e.g. swf:jobs.swf"),
        ("swf:", "swf:: a trace is given as FORMAT:PATH, e.g. swf:jobs.swf"),
        (
            "pbs:jobs.log",
            "pbs:jobs.log: format: unknown trace format 'pbs' "
            "(known: openb, swf, tiresias, philly, gavel, pai, sacct, generic, history, "
            "synthetic)",
        ),
        ("tiresias:/no/such/file.csv", "/no/such/file.csv: no such file"),
    ],
)
def test_bad_spec(spec: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        load_trace(spec)
    assert str(err.value) == message


def test_sacct_options_from_the_spec(fixture: Callable[[str], Path]) -> None:
    jobs = load_trace(f"sacct:{fixture('sacct.psv')},gpu_models.a100=A100-80GB")
    # the gres type mapped to a catalog model restricts that job alone
    assert [(j.id, sorted(j.request.gpu_models)) for j in jobs] == [
        ("15", []),
        ("10", ["A100-80GB"]),
        ("11", []),
        ("14", []),
    ]


def test_swf_options_from_the_spec(fixture: Callable[[str], Path]) -> None:
    jobs = load_trace(f"swf:{fixture('tiny.swf')},procs_per_gpu=4,gpus_per_node=4")
    # ceil(processors / 4) GPUs: 4 -> 1, 1 -> 1, 16 -> 4, 12 -> 3
    assert [(j.id, j.request.gpus, j.request.nodes) for j in jobs] == [
        ("1", 1, 1),
        ("6", 1, 1),
        ("2", 4, 1),
        ("5", 3, 1),
    ]
