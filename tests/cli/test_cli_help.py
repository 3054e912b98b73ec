"""Help, version and bare groups: what a new user types first tells the truth and exits 0."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import pytest

from gpufleet.cli.main import main


@pytest.fixture(autouse=True)
def wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    # Help wrapped at 80 columns splits phrases across lines.
    monkeypatch.setenv("COLUMNS", "200")


def help_of(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    assert main([*command, "--help"]) == 0
    return capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"gpufleet {version('gpufleet')}\n"


@pytest.mark.parametrize(
    "command", [[], ["sim"], ["sim", "run"], ["queue"], ["config"], ["token", "create"]]
)
def test_dash_h_is_help(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    assert main([*command, "-h"]) == 0
    assert "Usage: gpufleet" in capsys.readouterr().out


@pytest.mark.parametrize("command", [[], ["sim"]])
def test_a_bare_group_prints_help_and_succeeds(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert main(command) == 0
    out, err = capsys.readouterr()
    assert "Usage: gpufleet" in out + err
    assert "error" not in err


@pytest.mark.parametrize(
    "command", [["sim", "run"], ["sim", "compare"], ["sim", "sweep"], ["sim", "fill"]]
)
def test_placeholders_read_as_words(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    text = help_of(capsys, *command)
    # No type placeholders such as <bool>, <list[Path]> or <int range>.
    assert not re.search(r"<(bool|list\[|int range|path|Path)", text), text
    assert re.search(r"--json\s+End stdout", text), text


def test_sweep_help_shows_the_grid_table_and_cluster_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of(capsys, "sim", "sweep")
    assert "a base profile and a [grid] of values" in text
    assert "cluster .toml file" in text


def test_run_help_names_the_real_default_profile(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(capsys, "sim", "run")
    assert "FIFO" not in text
    assert "multifactor, best-fit, no backfill" in text


def test_a_run_without_a_profile_is_labelled_by_what_it_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trace = "synthetic:n_jobs=20,seed=1,gpus_total=64"
    assert main(["sim", "run", "--trace", trace, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["profile"] == "multifactor+best-fit"
