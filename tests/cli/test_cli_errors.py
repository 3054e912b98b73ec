"""Bad input to ``gpufleet sim fill``: one ``error:`` line naming the culprit, exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gpufleet.adapters.store import Store
from gpufleet.cli.main import main
from store.databases import POSTGRES_URL

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NODES = FIXTURES / "nodes.csv"
PODS = FIXTURES / "pods.csv"


def edited(source: Path, folder: Path, row: int, text: str) -> Path:
    """A copy of ``source`` with its ``row`` (1-based, the header is row 1) replaced."""
    lines = source.read_text().splitlines()
    lines[row - 1] = text
    path = folder / source.name
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_one_error_line(status: int, out: str, err: str, *fragments: str) -> None:
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]


# (file, row, new text, what the message must say). Row 1 is the header.
BAD_ROWS = [
    (NODES, 4, "node-c,16000,65536,4,T5", ["row 4: model: unknown GPU model 'T5'"]),
    (NODES, 2, "node-a,32000,131072,eight,V100M32", ["row 2: gpu: 'eight' is not a number"]),
    (NODES, 3, "node-b,-1,131072,8,V100M32", ["row 3: cpu_milli: must not be negative"]),
    (NODES, 3, "node-b,32000,131072", ["row 3: wrong number of fields"]),
    (NODES, 1, "sn,cpu_milli,memory_mib,gpu", ["row 1: model: column missing from the header"]),
    (PODS, 7, "pod-05,500,2048", ["row 7: wrong number of fields"]),
    (PODS, 3, "pod-01,2000,8192,1,500,H900,LS,Running,0,1,0", ["row 3: gpu_spec: unknown GPU"]),
    # Nothing asked for at all: no CPU, memory or GPU.
    (PODS, 8, "pod-06,0,0,0,0,,BE,Running,0,1,0", ["row 8: cpu_milli: asks for nothing"]),
    # One GPU of zero milli-GPU is a zero request too.
    (PODS, 2, "pod-00,4000,16384,1,0,,LS,Running,0,1,0", ["row 2: gpu_milli: must be 1..1000"]),
    (PODS, 4, "pod-02,1000,-4096,1,250,T4,BE,Running,0,1,0", ["row 4: memory_mib: must not be"]),
    (PODS, 5, "pod-03,8000,32768,2,500,,LS,Running,0,1,0", ["row 5: gpu_milli: a multi-GPU"]),
    # Numbers a float reads but no count can be: never a traceback, never truncated.
    (PODS, 3, "pod-01,2000,8192,1,inf,,LS,Running,0,1,0", ["row 3: gpu_milli: 'inf' is not a"]),
    (PODS, 3, "pod-01,2000,8192,1.7,1000,,LS,Running,0,1,0", ["row 3: num_gpu: '1.7' is not"]),
    (PODS, 3, "pod-01,2000,1e400,1,500,,LS,Running,0,1,0", ["row 3: memory_mib: '1e400' is"]),
    (
        PODS,
        3,
        "pod-01,2000,8192,99999999999999999999,1000,,LS,Running,0,1,0",
        ["row 3: num_gpu: must be at most"],
    ),
    (NODES, 3, "node-b,32000,131072,100000,V100M32", ["row 3: gpu: at most 1024, got 100000"]),
    (NODES, 3, ",32000,131072,8,V100M32", ["row 3: sn: must not be empty"]),
]


@pytest.mark.parametrize(("source", "row", "text", "fragments"), BAD_ROWS)
def test_bad_trace_row(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    source: Path,
    row: int,
    text: str,
    fragments: list[str],
) -> None:
    bad = edited(source, tmp_path, row, text)
    nodes, pods = (bad, PODS) if source == NODES else (NODES, bad)
    status = main(["sim", "fill", "--nodes", str(nodes), "--pods", str(pods), "--workers", "1"])
    assert_one_error_line(status, *capsys.readouterr(), str(bad), *fragments)


def test_duplicate_node_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = edited(NODES, tmp_path, 3, "node-a,32000,131072,8,V100M32")
    status = main(["sim", "fill", "--nodes", str(bad), "--pods", str(PODS)])
    assert_one_error_line(
        status, *capsys.readouterr(), str(bad), "row 3: sn: 'node-a' is also at row 2"
    )


def test_cluster_without_gpus(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "cpu_only.csv"
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\ncpu-1,64000,262144,0,\n")
    status = main(["sim", "fill", "--nodes", str(bad), "--pods", str(PODS)])
    assert_one_error_line(status, *capsys.readouterr(), str(bad), "holds no GPUs")


def test_pods_without_gpu_requests(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "cpu_pods.csv"
    header = PODS.read_text().splitlines()[0]
    bad.write_text(header + "\npod-0,2000,8192,0,0,,BE,Running,0,1,0\n")
    status = main(["sim", "fill", "--nodes", str(NODES), "--pods", str(bad)])
    assert_one_error_line(status, *capsys.readouterr(), str(bad), "requests no GPUs")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--nodes", "no/such/nodes.csv"], ["no/such/nodes.csv: no such file"]),
        (["--pods", "no/such/pods.csv"], ["no/such/pods.csv: no such file"]),
        (["--policy", "best-fit,bogus"], ["--policy: unknown placement policy 'bogus'"]),
        (["--seeds", "42..51"], ["--seeds: '42..51' is not a seed"]),
        (["--seeds", "51-42"], ["--seeds: range '51-42' runs backwards"]),
        (["--tune", "0.9"], ["--tune: must be 1.0..5.0"]),
        # Errors found while parsing the command line take the same shape.
        (["--tune", "lots"], ["'--tune'"]),
        (["--workers", "0"], ["'--workers'"]),
        (["--no-such-option"], ["--no-such-option"]),
    ],
)
def test_bad_option(
    capsys: pytest.CaptureFixture[str], args: list[str], fragments: list[str]
) -> None:
    files = {"--nodes": str(NODES), "--pods": str(PODS)}
    for name in args[::2]:
        files.pop(name, None)  # an option given twice is refused, so args replace these
    status = main(["sim", "fill", *(part for pair in files.items() for part in pair), *args])
    assert_one_error_line(status, *capsys.readouterr(), *fragments)


def test_out_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    status = main(["sim", "fill", "--nodes", str(NODES), "--pods", str(PODS), "--out", str(taken)])
    assert_one_error_line(status, *capsys.readouterr(), str(taken))


def test_installed_entry_point_prints_no_traceback(tmp_path: Path) -> None:
    bad = edited(PODS, tmp_path, 7, "pod-05,500,2048")
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "sim", "fill", "--pods", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert_one_error_line(done.returncode, done.stdout, done.stderr, f"{bad}, row 7:")


@pytest.mark.parametrize("user", ["../../etc", "a b", "x" * 100, "\u00e9"])
def test_token_create_refuses_a_bad_user_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, user: str
) -> None:
    status = main(["token", "create", "--data", str(tmp_path), "--user", user, "--role", "user"])
    assert_one_error_line(
        status, *capsys.readouterr(), "error: token create: --user: must be 1-64 letters"
    )


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["create", "--user", "ann", "--role", "king"], "error: token create: --role: 'king'"),
        (["create", "--user", "ann", "--role", "user", "--node", ""], "token create: --node:"),
        (["revoke", "nope"], "error: token revoke: ID: no token 'nope'"),
        (["revoke", "a\tb"], "error: token revoke: ID: must be printable"),
        (["list", "--db", "nonsense"], "error: token list: --db: Could not parse"),
    ],
)
def test_token_errors_name_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], start: str
) -> None:
    made = ["token", "create", "--data", str(tmp_path), "--user", "ann", "--role", "user"]
    assert main(made) == 0
    capsys.readouterr()
    store = [] if "--db" in argv else ["--data", str(tmp_path)]
    status = main(["token", *argv, *store])
    assert_one_error_line(status, *capsys.readouterr(), start)


@pytest.mark.parametrize("command", [["list"], ["revoke", "abc"]])
@pytest.mark.parametrize("how", ["--data", "--db", "empty file"])
def test_token_list_and_revoke_make_no_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], how: str
) -> None:
    # A mistyped path: nothing is created there, and the command says so.
    where = tmp_path / "typo"
    if how == "empty file":  # what earlier versions left behind
        where.mkdir()
        (where / "gpufleet.db").touch()
    option = ["--db", f"sqlite:///{where / 'x.db'}"] if how == "--db" else ["--data", str(where)]
    status = main(["token", *command, *option])
    what = (
        f"--db: no gpufleet store at {option[1]}"
        if how == "--db"
        else f"--data: no gpufleet store in {where}"
    )
    assert_one_error_line(status, *capsys.readouterr(), f"error: token {command[0]}: {what}")
    assert sorted(p.name for p in tmp_path.rglob("*")) == (
        ["gpufleet.db", "typo"] if how == "empty file" else []
    )


def test_token_list_needs_a_store_in_the_postgresql_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    missing = f"error: token list: --db: no gpufleet store at {url}"
    # No such schema, then an empty one: no store either way, and none is made.
    assert_one_error_line(main(["token", "list", "--db", url]), *capsys.readouterr(), missing)
    store = Store(POSTGRES_URL, schema=schema)  # creates the schema, and nothing in it
    try:
        assert_one_error_line(main(["token", "list", "--db", url]), *capsys.readouterr(), missing)
        assert store.revision() is None
        made = ["token", "create", "--db", url, "--user", "ann", "--role", "user"]
        assert main(made) == 0
        capsys.readouterr()
        assert main(["token", "list", "--db", url]) == 0
        assert " ann " in capsys.readouterr().out
    finally:
        store.drop_schema()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GPUFLEET_TOKEN", "gf_\u00fc", "GPUFLEET_TOKEN: the token must be printable ASCII"),
        ("GPUFLEET_TOKEN", "gf_a\nb", "GPUFLEET_TOKEN: the token must be printable ASCII"),
        ("GPUFLEET_URL", "http://[::1", "GPUFLEET_URL: 'http://[::1' is not a valid URL"),
    ],
)
def test_a_token_or_url_that_cannot_be_sent_is_an_input_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    name: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    # Refused before any request: no controller answers at this address.
    monkeypatch.setenv("GPUFLEET_URL", "http://127.0.0.1:9")
    monkeypatch.setenv(name, value)
    for command in ("queue", "nodes", "predict report"):
        status = main(command.split())
        assert_one_error_line(status, *capsys.readouterr(), f"error: {command}: {message}")


def test_token_create_makes_the_store_private(tmp_path: Path) -> None:
    old = tmp_path / "gpufleet.db"
    old.touch(mode=0o644)  # left world-readable by an older version
    old.chmod(0o644)
    status = main(["token", "create", "--data", str(tmp_path), "--user", "ann", "--role", "user"])
    assert status == 0
    for name in ("gpufleet.db", "gpufleet.db-wal", "gpufleet.db-shm"):
        path = tmp_path / name
        assert not path.exists() or (path.stat().st_mode & 0o777) == 0o600, name
    assert (old.stat().st_mode & 0o777) == 0o600
    new = tmp_path / "new" / "data"
    assert main(["token", "create", "--data", str(new), "--user", "ann", "--role", "user"]) == 0
    assert (new.stat().st_mode & 0o777) == 0o700
    assert (new / "gpufleet.db").stat().st_mode & 0o777 == 0o600


# Errors click finds while parsing name the command, as the commands' own errors do.
USAGE_ERRORS = [
    (["queue", "-5"], "error: queue: No such option: -5"),
    (["queue", "--json", "extra"], "error: queue: Got unexpected extra argument(s) (extra)"),
    (["cancel"], "error: cancel: Missing argument 'jobs'."),
    (["show"], "error: show: Missing argument 'job'."),
    (
        ["predict", "report", "--buckets", "x"],
        "error: predict report: Invalid value for '--buckets'",
    ),
    (["usage", "--by", "color"], "error: usage: Invalid value for '--by'"),
    (["token", "create", "--bogus"], "error: token create: No such option: --bogus"),
    (["sim", "fill", "--tune", "lots"], "error: sim fill: Invalid value for '--tune'"),
    (["nope"], "error: gpufleet: No such command 'nope'."),
    (["--bogus"], "error: gpufleet: No such option: --bogus"),
]


@pytest.mark.parametrize(("argv", "start"), USAGE_ERRORS)
def test_a_usage_error_is_one_line_with_the_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], start: str
) -> None:
    status = main(argv)
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1, err
    assert err.startswith(start), err


def test_a_usage_error_of_the_installed_command_names_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "queue", "-5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    expected = (2, "", "error: queue: No such option: -5\n")
    assert (done.returncode, done.stdout, done.stderr) == expected


@pytest.mark.parametrize("from_stdin", [False, True])
def test_a_script_with_dos_line_breaks_is_refused(tmp_path: Path, from_stdin: bool) -> None:
    script = tmp_path / "job.sh"
    script.write_bytes(b"#!/bin/bash\r\n#SBATCH -t 5\r\necho hi\r\n")
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", "submit", "-" if from_stdin else str(script)],
        input=script.read_bytes() if from_stdin else b"",
        capture_output=True,
        timeout=60,
        # Refused before any controller is asked: none answers at this address.
        env={**os.environ, "GPUFLEET_URL": "http://127.0.0.1:9"},
    )
    source = "-" if from_stdin else str(script)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode() == (
        f"error: submit: {source}: has DOS line breaks (\\r\\n); convert it with dos2unix\n"
    )
