"""``submit --wait`` returns when the job has ended, with its exit code, as ``sbatch --wait``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.live import Up
from gpufleet.cli.main import main


@pytest.fixture
def as_ada(monkeypatch: pytest.MonkeyPatch, live: Up, tmp_path: Path) -> Path:
    monkeypatch.setenv("GPUFLEET_URL", live.url)
    monkeypatch.setenv("GPUFLEET_TOKEN", live.tokens["ada"])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("code", [0, 3])
def test_wait_returns_the_jobs_exit_code_after_it_wrote_its_output(
    as_ada: Path, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    status = main(["submit", "--wait", "--parsable", "--wrap", f"echo waited; exit {code}"])
    job_id = capsys.readouterr().out.strip()
    assert status == code
    # Returning means the job has ended, so its output is complete.
    assert (as_ada / f"slurm-{job_id}.out").read_text() == "waited\n"


def test_wait_refuses_an_array_before_submitting(
    as_ada: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["submit", "-W", "--array=0-1", "--wrap", "true"])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err.startswith("error: submit: --wait:") and err.count("\n") == 1
    assert main(["queue", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"  # nothing was submitted
