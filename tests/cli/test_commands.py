"""The controller commands end to end: gpufleet's main() against ``gpufleet up``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.live import Up
from gpufleet.cli.main import main
from gpufleet.cli.output import compress_hostlist, duration

HEADER = ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "START", "NODELIST(REASON)"]
LATER = "--begin=now+1hour"  # a job that stays pending, for as long as a test needs


@pytest.fixture
def as_ada(monkeypatch: pytest.MonkeyPatch, live: Up, tmp_path: Path) -> Up:
    monkeypatch.setenv("GPUFLEET_URL", live.url)
    monkeypatch.setenv("GPUFLEET_TOKEN", live.tokens["ada"])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return live


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def submit(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    status, out, err = run(capsys, "submit", "--parsable", *argv)
    assert (status, err) == (0, ""), err
    return out.strip()


def shown(capsys: pytest.CaptureFixture[str], job_id: str) -> dict[str, object]:
    status, out, _ = run(capsys, "show", job_id, "--json")
    assert status == 0
    job: dict[str, object] = json.loads(out)
    return job


def one_error(status: int, out: str, err: str, expected_status: int, start: str) -> None:
    assert (status, out) == (expected_status, "")
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: " + start), err


def test_submit_a_script_with_directives(
    as_ada: Up, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:1 -t 10\n#SBATCH -o %x-%j.out\n"
        'echo "gpus=$CUDA_VISIBLE_DEVICES token=${GPUFLEET_TOKEN:-none}"\n'
    )
    status, out, _ = run(capsys, "submit", "train.sh", "-p", "debug")
    assert status == 0 and out.startswith("Submitted batch job "), out
    job_id = out.split()[-1]
    job = shown(capsys, job_id)
    assert (job["name"], job["gpus_per_node"], job["partition"]) == ("train.sh", 1, "debug")
    assert (job["workdir"], job["time_limit_s"]) == (str(tmp_path), 600)
    assert as_ada.wait_final(job_id, "ada") == "COMPLETED"
    # One GPU was given; the submitting shell's token was not copied into the job.
    written = (tmp_path / f"train.sh-{job_id}.out").read_text()
    assert written.startswith("gpus=") and written.endswith(" token=none\n")
    assert "," not in written


def test_submit_wrap_json_and_parsable(as_ada: Up, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "submit", "--wrap", "hostname", "--json")
    submitted = json.loads(out)
    assert (status, submitted["duplicate"]) == (0, False)
    assert submitted["job_id"].isdigit()
    status, out, _ = run(capsys, "submit", "--parsable", "--wrap=true")
    assert status == 0 and int(out) > int(submitted["job_id"])


def test_queue_lists_jobs_with_reason_and_start(
    as_ada: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    first = submit(capsys, "--wrap=true", "-J", "first", LATER)
    second = submit(capsys, "--wrap=true", "-J", "second", "-N", "1", LATER)
    assert run(capsys, "cancel", first) == (0, "", "")
    # A cancel may end a job later (a started one is COMPLETING until its agent confirms).
    assert as_ada.wait_final(first, "ada") == "CANCELLED"
    status, out, _ = run(capsys, "queue")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert status == 0
    assert lines["JOBID"].split() == HEADER
    assert first not in lines  # it has ended
    assert lines[second].split()[1:7] == ["gpu", "second", "ada", "PD", "0:00", "1"]
    assert lines[second].endswith("(BeginTime)")
    # every state, as JSON: running, completing and pending jobs first, then ended ones
    status, out, _ = run(capsys, "queue", "-t", "all", "--json")
    states = [(j["job_id"], j["state"]) for j in json.loads(out)]
    assert states.index((second, "PENDING")) < states.index((first, "CANCELLED"))
    status, out, _ = run(capsys, "queue", "--state", "CA", "--json")
    assert first in [j["job_id"] for j in json.loads(out)]
    assert {j["state"] for j in json.loads(out)} == {"CANCELLED"}
    run(capsys, "cancel", second)


def test_a_job_without_a_name_keeps_the_columns(
    as_ada: Up, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The API takes a job without a name; the CLI always gives one.
    body = {"command": ["true"], "workdir": str(tmp_path), "begin": int(time.time()) + 3600}
    with as_ada.api("ada") as api:
        made = api.post("/v1/jobs", json=body)
    assert made.status_code == 201, made.text
    job_id = made.json()["job_id"]
    out = run(capsys, "queue")[1]
    row = next(line.split() for line in out.splitlines() if line.split()[0] == job_id)
    assert row[1:5] == ["gpu", "(none)", "ada", "PD"]
    shown_lines = [line.split() for line in run(capsys, "show", job_id)[1].splitlines()]
    assert ["JobName", "(none)"] in shown_lines
    assert run(capsys, "cancel", job_id)[0] == 0


def test_queue_filters_by_user(
    as_ada: Up, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = submit(capsys, "--wrap=true", LATER)
    one_error(*run(capsys, "queue", "-u", "bob"), 2, "queue: forbidden: a user lists only its own")
    listed = json.loads(run(capsys, "queue", "-u", "ada,bob", "--json")[1])
    assert mine in [j["job_id"] for j in listed]
    monkeypatch.setenv("GPUFLEET_TOKEN", as_ada.tokens["ops"])
    assert run(capsys, "queue", "-u", "bob", "--json")[1] == "[]\n"  # bob has none
    listed = json.loads(run(capsys, "queue", "-u", "ada,bob", "--json")[1])
    assert mine in [j["job_id"] for j in listed]
    assert {j["user"] for j in listed} == {"ada"}
    assert run(capsys, "cancel", mine)[0] == 0  # an operator cancels anyone's job


def test_queue_me_is_the_tokens_user(
    as_ada: Up, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = submit(capsys, "--wrap=true", LATER)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # what getpass reads
        monkeypatch.setenv(name, "someone-else")
    listed = json.loads(run(capsys, "queue", "--me", "--json")[1])
    assert mine in [j["job_id"] for j in listed]
    assert {j["user"] for j in listed} == {"ada"}
    monkeypatch.setenv("GPUFLEET_TOKEN", as_ada.tokens["ops"])  # may see everyone's jobs
    theirs = submit(capsys, "--wrap=true", LATER, "--account=lab")
    listed = json.loads(run(capsys, "queue", "--me", "--json")[1])
    assert [(j["job_id"], j["user"]) for j in listed] == [(theirs, "ops")]
    assert run(capsys, "cancel", mine, theirs)[0] == 0


def test_show_json_has_state_and_stdout_path(
    as_ada: Up, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job_id = submit(capsys, "--wrap=echo out", LATER)
    job = shown(capsys, job_id)
    assert (job["state"], job["reason"]) == ("PENDING", "BeginTime")
    assert job["stdout_path"] == f"{tmp_path}/slurm-{job_id}.out"
    status, out, _ = run(capsys, "show", job_id)
    assert status == 0
    assert ["JobState", "PENDING"] in [line.split() for line in out.splitlines()]
    run(capsys, "cancel", job_id)


def test_hold_release_requeue(as_ada: Up, capsys: pytest.CaptureFixture[str]) -> None:
    job_id = submit(capsys, "--wrap=true", LATER)
    assert run(capsys, "hold", job_id)[0] == 0
    assert (shown(capsys, job_id)["held"], shown(capsys, job_id)["hold"]) == (True, "user")
    shown_lines = [line.split() for line in run(capsys, "show", job_id)[1].splitlines()]
    assert ["JobState", "PENDING", "(user", "hold)"] in shown_lines
    assert ["Reason", "JobHeldUser"] in shown_lines
    assert run(capsys, "hold", job_id) == (0, "", "")  # held already: quietly, as Slurm's
    assert shown(capsys, job_id)["hold"] == "user"
    assert run(capsys, "release", job_id)[0] == 0
    assert shown(capsys, job_id)["held"] is False
    run(capsys, "cancel", job_id)
    held = submit(capsys, "--wrap=true", "--hold")
    assert run(capsys, "cancel", held)[0] == 0  # a cancelled job is held no more, as Slurm's
    shown_lines = [line.split() for line in run(capsys, "show", held)[1].splitlines()]
    assert ["JobState", "CANCELLED"] in shown_lines
    assert "JobHeldUser" not in [line[1] for line in shown_lines if line[0] == "Reason"]
    ran = submit(capsys, "--wrap=true")
    assert as_ada.wait_final(ran, "ada") == "COMPLETED"
    assert run(capsys, "requeue", ran)[0] == 0  # a finished job runs again
    assert as_ada.wait_final(ran, "ada") == "COMPLETED"
    assert shown(capsys, ran)["restart_count"] == 1


def test_cancel_reports_each_failure_and_goes_on(
    as_ada: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = submit(capsys, "--wrap=true", LATER)
    status, out, err = run(capsys, "cancel", "999999", job_id)
    assert (status, out) == (2, "")
    assert err == "error: cancel 999999: not found: job 999999: no such job\n"
    assert as_ada.wait_final(job_id, "ada") == "CANCELLED"


def test_nodes_shows_each_gpus_allocation(
    as_ada: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = submit(capsys, "--wrap=sleep 30", "--gpus=1", "-c", "1")
    shared = submit(capsys, "--wrap=sleep 30", "--gpu-fraction=0.25", "-c", "1")
    deadline = time.monotonic() + 30
    while {shown(capsys, j)["state"] for j in (whole, shared)} != {"RUNNING"}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status, out, _ = run(capsys, "nodes")
    assert status == 0
    header, node = (line.split() for line in out.splitlines())
    assert header == ["NODELIST", "STATE", "CPUS(A/T)", "MEM(A/T)", "GPUS(A/T)", "GRES", "ALLOC",
                      "REASON"]  # fmt: skip
    # GPU 0 whole, a quarter of GPU 1 -> 1.25 of 2
    assert [node[0], node[1], node[4], node[5], node[6]] == ["local", "mixed", "1.25/2", "L4x2",
                                                             "F.25"]  # fmt: skip
    assert node[2].startswith("2/")  # one CPU each
    assert run(capsys, "cancel", whole, shared)[0] == 0
    assert {as_ada.wait_final(j, "ada") for j in (whole, shared)} == {"CANCELLED"}


def test_unlimited_time_is_no_limit_where_the_partition_has_no_maximum(
    as_ada: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = submit(capsys, "--wrap=true", "-p", "gpu", "--time=UNLIMITED", "--hold")
    assert shown(capsys, job_id)["time_limit_s"] == 0
    shown_lines = [line.split() for line in run(capsys, "show", job_id)[1].splitlines()]
    assert ["TimeLimit", "UNLIMITED"] in shown_lines
    run(capsys, "cancel", job_id)


def test_an_admin_without_an_account_is_told_to_name_one(
    as_ada: Up, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_TOKEN", as_ada.tokens["admin"])
    one_error(*run(capsys, "submit", "--wrap=true"), 2, "submit: body.account: admin has no ")
    job_id = submit(capsys, "--wrap=true", "-A", "lab", "--hold")
    run(capsys, "cancel", job_id)


def test_cluster_views(as_ada: Up, capsys: pytest.CaptureFixture[str]) -> None:
    for command, header, row in [
        ("partitions", "PARTITION", ["debug", "up", "no", "10:00"]),
        ("qos", "NAME", ["normal", "(default)"]),
        ("accounts", "NAME", ["lab", "account", "root"]),
        ("reservations", "NAME", None),
        ("fairshare", "ACCOUNT", ["lab", "ada"]),
        ("usage", "USER", None),
    ]:
        status, out, err = run(capsys, command)
        assert (status, err) == (0, ""), command
        lines = [line.split() for line in out.splitlines()]
        assert lines[0][0] == header
        if row is not None:
            assert any(line[: len(row)] == row for line in lines), (command, out)
        status, out, _ = run(capsys, command, "--json")
        assert isinstance(json.loads(out), list)


def test_usage_sums_gpu_hours_in_the_range(
    as_ada: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = submit(capsys, "--wrap=sleep 1", "--gpus=2")
    assert as_ada.wait_final(job_id, "ada") == "COMPLETED"
    status, out, _ = run(capsys, "usage", "-S", "2024-05-01", "--by", "account", "--json")
    (row,) = json.loads(out)
    assert (status, row["key"]) == (0, "lab")
    assert row["jobs"] >= 1 and row["gpu_hours"] >= 2 / 3600  # two GPUs for a second or more
    status, out, _ = run(capsys, "usage", "-S", "now-1minute", "-E", "now-30seconds", "--json")
    assert (status, out) == (0, "[]\n")  # before the job ran


def test_drain_needs_an_operator(
    as_ada: Up, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one_error(*run(capsys, "drain", "local", "--reason", "fan"), 2, "drain: forbidden: ")
    monkeypatch.setenv("GPUFLEET_TOKEN", as_ada.tokens["ops"])
    try:
        assert run(capsys, "drain", "local", "--reason", "fan")[0] == 0
        assert run(capsys, "nodes")[1].splitlines()[1].split()[-1] == "fan"
    finally:
        assert run(capsys, "resume", "local")[0] == 0
    assert run(capsys, "nodes")[1].splitlines()[1].split()[-1] == "-"


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["submit", "--wrap=true", "--gres=gpu:a100:x"], "submit: --gres: 'x' is not"),
        (["submit", "missing.sh"], "submit: missing.sh: cannot read the script"),
        # What the one-node cluster could never hold: refused, not left waiting.
        (["submit", "--wrap=true", "--gres=gpu:x"], "submit: body.gpu_type: no node of"),
        (["submit", "--wrap=true", "--nodes=1000"], "submit: body.nodes: 1000 nodes, but"),
        (["submit", "--wrap=true", "-p", "nope"], "submit: body.partition: no partition"),
        # As Slurm's EnforcePartLimits=ALL: no limit is over debug's maximum.
        (
            ["submit", "--wrap=true", "-p", "debug", "--time=UNLIMITED"],
            "submit: body.time_limit_s: no limit (UNLIMITED) is over partition debug's limit",
        ),
        (["submit", "--wrap=true", "--array=0-99999"], "submit: body.array: index 99999 is over"),
        (["show", "abc"], "show: 'abc' is not a job id"),
        (["show", "999999"], "show: not found: job 999999: no such job"),
        (["queue", "-t", "XX"], "queue: --state: 'XX' is not a job state"),
        (["usage", "-S", "someday"], "usage: --starttime: 'someday' is not a time"),
        (["usage", "--by", "color"], "usage: Invalid value for '--by'"),
        (["usage", "--export", "h.jsonl", "--json"], "usage: --export writes JSON Lines"),
        (["usage", "--export", "no/such/dir/h.jsonl"], "usage: --export: no/such/dir/h.jsonl: "),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    as_ada: Up, capsys: pytest.CaptureFixture[str], argv: list[str], start: str
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
