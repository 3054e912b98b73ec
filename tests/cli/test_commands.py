"""The controller commands end to end: gpufleet's main() against the real API app."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from standin import StandIn

from gpufleet.cli.main import main
from gpufleet.cli.output import compress_hostlist, duration


@pytest.fixture
def as_ada(monkeypatch: pytest.MonkeyPatch, controller_url: str, tmp_path: Path) -> str:
    monkeypatch.setenv("GPUFLEET_URL", controller_url)
    monkeypatch.setenv("GPUFLEET_TOKEN", "gf_ada")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return controller_url


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def one_error(status: int, out: str, err: str, expected_status: int, start: str) -> None:
    assert (status, out) == (expected_status, "")
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: " + start), err


def test_submit_a_script_with_directives(
    as_ada: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, stand_in: StandIn
) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:a100:2 -t 10\npython train.py\n")
    status, out, _ = run(capsys, "submit", "train.sh", "-p", "debug")
    assert (status, out) == (0, "Submitted batch job 1\n")
    spec = stand_in.submissions[0]
    assert (spec.name, spec.gpus_per_node, spec.partition) == ("train.sh", 2, "debug")
    assert spec.workdir == str(tmp_path)
    assert "GPUFLEET_TOKEN" not in spec.env


def test_submit_wrap_json_and_parsable(as_ada: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "submit", "--wrap", "hostname", "--json")
    assert status == 0
    assert json.loads(out)["job_id"] == "1"
    assert run(capsys, "submit", "--parsable", "--wrap=true") == (0, "2\n", "")


def test_queue_lists_pending_jobs_with_reason_and_start(
    as_ada: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "submit", "--wrap=true", "-J", "first")
    run(capsys, "submit", "--wrap=true", "-J", "second", "-N", "2")
    run(capsys, "cancel", "1")
    status, out, _ = run(capsys, "queue")
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == [
        "JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "START", "NODELIST(REASON)"
    ]  # fmt: skip
    assert len(lines) == 2  # the cancelled job has ended
    assert lines[1].split()[:7] == ["2", "gpu", "second", "ada", "PD", "0:00", "2"]
    assert lines[1].endswith("(Resources)")
    # every state, as JSON
    status, out, _ = run(capsys, "queue", "-t", "all", "--json")
    # running, completing and pending jobs come first, then the ended ones
    assert [(j["job_id"], j["state"]) for j in json.loads(out)] == [
        ("2", "PENDING"),
        ("1", "CANCELLED"),
    ]
    status, out, _ = run(capsys, "queue", "--state", "CA", "--json")
    assert [j["job_id"] for j in json.loads(out)] == ["1"]


def test_queue_filters_by_user(as_ada: str, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "submit", "--wrap=true")
    assert run(capsys, "queue", "-u", "bob", "--json")[1] == "[]\n"
    assert len(json.loads(run(capsys, "queue", "--me", "--json")[1])) <= 1


def test_show_json_has_state_and_stdout_path(
    as_ada: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "submit", "--wrap=true")
    status, out, _ = run(capsys, "show", "1", "--json")
    shown = json.loads(out)
    assert (status, shown["state"], shown["stdout_path"]) == (0, "PENDING", shown["stdout_path"])
    assert shown["stdout_path"].endswith("/slurm-1.out")
    status, out, _ = run(capsys, "show", "1")
    assert ["JobState", "PENDING"] in [line.split() for line in out.splitlines()]


def test_hold_release_requeue(
    as_ada: str, capsys: pytest.CaptureFixture[str], stand_in: StandIn
) -> None:
    run(capsys, "submit", "--wrap=true")
    assert run(capsys, "hold", "1")[0] == 0
    assert stand_in.jobs["1"].held
    assert run(capsys, "release", "1")[0] == 0
    assert not stand_in.jobs["1"].held
    assert run(capsys, "requeue", "1")[0] == 0


def test_cancel_reports_each_failure_and_goes_on(
    as_ada: str, capsys: pytest.CaptureFixture[str], stand_in: StandIn
) -> None:
    run(capsys, "submit", "--wrap=true")
    status, out, err = run(capsys, "cancel", "7", "1")
    assert (status, out) == (2, "")
    assert err == "error: cancel 7: not found: job 7 not found\n"
    assert stand_in.jobs["1"].state == "CANCELLED"


def test_cluster_views(as_ada: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "nodes")
    assert status == 0
    # node01: GPUs 0 and 1 whole, GPU 2 a quarter, GPU 3 free -> 2.25 of 4
    assert out.splitlines()[1].split() == [
        "node01", "mixed", "16/64", "0/512000", "2.25/4", "A100-80GBx4", "FF.25-", "-"
    ]  # fmt: skip
    for command, header in [
        ("partitions", "PARTITION"),
        ("qos", "NAME"),
        ("accounts", "NAME"),
        ("reservations", "NAME"),
        ("fairshare", "ACCOUNT"),
        ("usage", "USER"),
    ]:
        status, out, err = run(capsys, command)
        assert (status, err) == (0, ""), command
        assert out.split()[0] == header
        status, out, _ = run(capsys, command, "--json")
        assert isinstance(json.loads(out), list)


def test_usage_passes_the_range_and_key(as_ada: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "usage", "-S", "2024-05-01", "--by", "account", "--json")
    assert status == 0
    assert json.loads(out)[0]["key"].startswith("account:17145")  # 2024-05-01, local time


def test_drain_needs_an_operator(
    as_ada: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one_error(*run(capsys, "drain", "node01", "--reason", "fan"), 2, "drain: forbidden: ")
    monkeypatch.setenv("GPUFLEET_TOKEN", "gf_ops")
    assert run(capsys, "drain", "node01", "--reason", "fan")[0] == 0
    assert "fan" in run(capsys, "nodes")[1]
    assert run(capsys, "resume", "node01")[0] == 0


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["submit", "--wrap=true", "--gres=gpu:a100:x"], "submit: --gres: 'x' is not"),
        (["submit", "missing.sh"], "submit: missing.sh: cannot read the script"),
        (["submit", "--wrap=true", "-p", "nope"], "submit: body.partition: no partition"),
        (["show", "abc"], "show: 'abc' is not a job id"),
        (["show", "99"], "show: not found: job 99 not found"),
        (["queue", "-t", "XX"], "queue: --state: 'XX' is not a job state"),
        (["usage", "-S", "someday"], "usage: --starttime: 'someday' is not a time"),
        (["usage", "--by", "color"], "Invalid value for '--by'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    as_ada: str, capsys: pytest.CaptureFixture[str], argv: list[str], start: str
) -> None:
    one_error(*run(capsys, *argv), 2, start)


def test_a_controller_that_is_down_is_one_line_and_status_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("GPUFLEET_URL", url)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    for argv in (["queue"], ["submit", "--wrap=true"], ["cancel", "1", "2"]):
        status, out, err = run(capsys, *argv)
        one_error(status, out, err, 1, f"{argv[0]}: cannot reach the controller at {url}")


def test_controller_commands_do_not_load_the_simulator() -> None:
    code = (
        "import sys\n"
        "from gpufleet.cli.main import main\n"
        "status = main(['queue', '--help'])\n"
        "heavy = sorted(m for m in ('matplotlib', 'numba', 'scipy', 'gpufleet.sim')"
        " if m in sys.modules)\n"
        "print(status, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.splitlines()[-1] == "0 []"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (59, "0:59"), (3600, "1:00:00"), (90061, "1-01:01:01"), (None, "UNLIMITED")],
)
def test_duration_like_squeue(seconds: int | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["node01", "node02", "node03", "node07"], "node[01-03,07]"),
        (["gpu1"], "gpu1"),
        (["a9", "a10", "a11"], "a9,a[10-11]"),  # one bracket, one width
        (["login", "n1", "n2"], "n[1-2],login"),
        ([], ""),
    ],
)
def test_compress_hostlist(names: list[str], text: str) -> None:
    assert compress_hostlist(names) == text
