"""Options of the ``sim`` commands: one given twice is refused, ``--out`` is checked first.

Both fail with one line on stderr and exit 2 before any replay starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli import sim_run
from gpufleet.cli.main import main
from gpufleet.sim.profile import replay

NODES = Path(__file__).parent / "fixtures" / "nodes8x8.csv"
TRACE = "synthetic:n_jobs=20,seed=2,gpus_total=64,max_duration_s=3600"
# A directory in which no one, not even root, can create a file.
UNWRITABLE = Path("/proc/self")


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The profiles replayed by ``sim run`` and ``sim compare``, in order."""
    names: list[str] = []

    def counting(*args: object, **kwargs: object) -> object:
        names.append(str(getattr(args[2], "name", "")))
        return replay(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_run, "replay", counting)
    return names


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_run_refuses_two_profiles_and_points_to_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], replays: list[str]
) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    for path in (a, b):
        path.write_text('[ordering]\nplugin = "fifo"\n')
    args = ["sim", "run", "--cluster", str(NODES), "--trace", TRACE]
    assert main([*args, "--profile", str(a), f"--profile={b}"]) == 2
    err = one_error(capsys)
    assert "--profile: given more than once" in err and "sim compare" in err
    assert replays == []


@pytest.mark.parametrize(
    "command",
    [
        ["sim", "run", "--trace", TRACE, "--cluster", str(NODES), "--cluster", "openb"],
        ["sim", "run", "--trace", TRACE, "--trace", TRACE],
        ["sim", "compare", "--trace", TRACE, "--profile", "x.toml", "--out", "a", "--out", "b"],
        ["sim", "fill", "--seeds", "1", "--seeds", "2"],
        ["sim", "sweep", "--trace", TRACE, "--spec", "a.toml", "--spec=b.toml"],
    ],
)
def test_any_single_value_option_given_twice_is_refused(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command) == 2
    err = one_error(capsys)
    assert "given more than once" in err
    assert "sim compare" not in err


def test_repeated_flags_and_compare_profiles_are_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], replays: list[str]
) -> None:
    a = tmp_path / "a.toml"
    a.write_text('[ordering]\nplugin = "fifo"\n')
    args = ["sim", "compare", "--cluster", str(NODES), "--trace", TRACE, "--json", "--json"]
    assert main([*args, "--profile", str(a), "--profile", str(a)]) == 0
    assert replays == ["a-1", "a-2"]


def test_synthetic_option_given_twice_is_refused(
    capsys: pytest.CaptureFixture[str], replays: list[str]
) -> None:
    trace = "synthetic:n_jobs=10,seed=1,gpus_total=64,n_jobs=20"
    assert main(["sim", "run", "--cluster", str(NODES), "--trace", trace]) == 2
    assert one_error(capsys) == "error: synthetic: n_jobs: given twice\n"
    assert replays == []


@pytest.mark.skipif(not UNWRITABLE.is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("command", ["run", "compare"])
def test_unwritable_out_fails_before_any_replay(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], replays: list[str]
) -> None:
    a = tmp_path / "a.toml"
    a.write_text('[ordering]\nplugin = "fifo"\n')
    args = ["sim", command, "--cluster", str(NODES), "--trace", TRACE, "--profile", str(a)]
    assert main([*args, "--out", str(UNWRITABLE)]) == 2
    assert one_error(capsys).startswith(f"error: {UNWRITABLE}: cannot write files here")
    assert replays == []


@pytest.mark.skipif(not UNWRITABLE.is_dir(), reason="needs Linux /proc")
def test_fill_and_sweep_check_out_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text('[grid]\n"backfill.mode" = ["easy"]\n')
    sweep = ["sim", "sweep", "--cluster", str(NODES), "--trace", TRACE, "--spec", str(spec)]
    for args in (["sim", "fill", "--seeds", "1"], sweep):
        assert main([*args, "--out", str(UNWRITABLE)]) == 2
        assert one_error(capsys).startswith(f"error: {UNWRITABLE}: cannot write files here")
