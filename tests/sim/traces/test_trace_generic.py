"""Generic CSV schema: every column, defaults, typos, and the Parquet guard."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.generic import load_generic

Corrupt = Callable[[str, int, str, str], Path]


def test_reads_every_column(fixture: Callable[[str], Path]) -> None:
    jobs = {j.id: j for j in load_generic(fixture("generic.csv"))}
    assert list(jobs) == ["a", "c", "d", "b"]  # by submit time: 0, 5, 7, 12
    gang = jobs["a"]
    assert (gang.request.gpus, gang.request.nodes, gang.request.cpu_milli) == (8, 4, 64000)
    assert gang.request.gpu_models == {"H100-80GB"}
    assert (gang.time_limit_s, gang.checkpoint_interval_s, gang.priority_class) == (
        7200,
        600,
        "high",
    )
    shared = jobs["b"]
    # 12.4 -> 12 and 90.6 -> 91: times round to whole seconds
    assert (shared.submit_time, shared.duration_s, shared.request.gpu_milli) == (12, 91, 500)
    assert (shared.time_limit_s, shared.preemptible, shared.priority_class) == (
        None,
        False,
        "normal",
    )
    mig = jobs["c"]
    assert (mig.request.mig_profile, mig.request.mig_count, mig.preemptible) == ("1g.10gb", 2, True)
    assert (mig.user, mig.account, mig.qos, mig.partition) == ("cy", "nlp", "low", "mig")
    assert jobs["d"].request.gpu_count == 0  # CPU only


def test_minimal_columns_take_defaults(fixture: Callable[[str], Path]) -> None:
    (only,) = load_generic(fixture("minimal.csv"))
    assert (only.request.gpus, only.request.nodes, only.request.cpu_milli) == (1, 1, 0)
    assert (only.user, only.time_limit_s, only.preemptible) == ("", None, False)


def test_mig_count_defaults_to_one(corrupt: Corrupt) -> None:
    path = corrupt("generic.csv", 4, "1g.10gb,2,", "1g.10gb,,")
    assert {j.id: j.request.mig_count for j in load_generic(path)}["c"] == 1


@pytest.mark.parametrize(
    ("line", "old", "new", "field", "reason"),
    [
        (2, "a,0,3600,8,", "a,0,3600,eight,", "gpus", "'eight' is not a whole number"),
        (3, ",500,", ",1500,", "gpu_milli", "a shared GPU fraction is 1..999 milli, got 1500"),
        (2, ",8,,", ",8,250,", "gpu_milli", "ask for whole GPUs or one fraction, not both"),
        (2, ",4,ana,", ",0,ana,", "nodes", "must be more than zero, got 0"),
        (3, "b,12.4,90.6", "b,12.4,-1", "duration_s", "must be 0 or more, got -1"),
        (2, ",7200,", ",0,", "time_limit_s", "must be 1 or more, got 0"),
        (4, "1g.10gb", "1g.9gb", "mig_profile", "unknown MIG profile '1g.9gb'"),
        (4, "A100-80GB|H100-80GB", "A100|H100-80GB", "gpu_models", "unknown GPU model 'A100'"),
        (4, ",yes,", ",maybe,", "preemptible", "'maybe' is not true/false"),
        (
            4,
            ",low,\n",
            ",urgent,\n",
            "priority_class",
            "must be one of high, normal, low, got 'urgent'",
        ),
        (5, ",1000,1024,", ",,1024,", "gpus", "asks for nothing: give CPUs, GPUs or a MIG profile"),
        # An unknown column is a label, but one like a field the file lacks is a typo.
        (1, ",gpus,", ",gpu,", "gpu", "looks like a misspelt gpus: map it (columns.gpus=gpu)"),
        (
            1,
            "submit_time",
            "submitted",
            "submit_time",
            "column missing; map one with columns.submit_time=submitted",
        ),
    ],
)
def test_malformed_row_names_row_and_field(
    corrupt: Corrupt, line: int, old: str, new: str, field: str, reason: str
) -> None:
    path = corrupt("generic.csv", line, old, new)
    with pytest.raises(TraceError) as err:
        load_generic(path)
    assert str(err.value).startswith(f"{path}, row {line}: {field}: {reason}")


def test_parquet_holds_the_same_jobs_as_csv(fixture: Callable[[str], Path], tmp_path: Path) -> None:
    # The same table written as Parquet with the column types pyarrow infers
    # (integers as int64, empty cells as nulls), as a data pipeline would.
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    source = fixture("generic.csv")
    path = tmp_path / "generic.parquet"
    pq.write_table(pa_csv.read_csv(source), path)
    assert load_generic(path) == load_generic(source)


def test_parquet_without_pyarrow_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes the import fail, whatever is installed.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "jobs.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(TraceError) as err:
        load_generic(path)
    assert (
        str(err.value) == f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or use CSV"
    )
