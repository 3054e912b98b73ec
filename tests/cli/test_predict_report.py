"""``gpufleet predict report`` against a real ``gpufleet up`` with ``[policy.predict]``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from cli.live import SITE, Up, running_up

PREDICT = SITE + "\n[policy.predict]\nmin_history = 1\n"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with running_up(tmp_path_factory.mktemp("up") / "data", PREDICT) as up:
        yield up


def gpufleet(live: Up, who: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["gpufleet", *argv],
        env=live.env(who),
        cwd=live.data.parent,  # where the jobs' slurm-N.out files go
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error(done: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert done.returncode == 2, done
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and fragment in done.stderr, done.stderr


def test_the_report_follows_the_finished_jobs(live: Up) -> None:
    one_error(gpufleet(live, "ops", "predict", "report"), "no job has ended by itself")
    for name, seconds in (("quick", 0), ("quick", 0), ("slow", 2)):
        wrap = f"--wrap=sleep {seconds}"
        done = gpufleet(live, "ada", "submit", "--wait", f"--job-name={name}", "--time=10", wrap)
        assert done.returncode == 0, done.stderr
    answer = gpufleet(live, "ops", "predict", "report", "--json", "--buckets", "3")
    report = json.loads(answer.stdout)
    assert [b["jobs"] for b in report["buckets"]] == [1, 1, 1]
    # the first quick job had no history: its estimate was its 600 s limit
    assert report["buckets"][0]["mae_s"] == pytest.approx(600, abs=2)
    assert report["buckets"][0]["limit_mae_s"] == report["buckets"][0]["mae_s"]
    # the second was estimated from the first: within the seconds they differ
    assert report["buckets"][1]["mae_s"] < 2
    assert report["overall"]["jobs"] == 3
    table = gpufleet(live, "ops", "predict", "report", "--buckets", "3")
    assert table.returncode == 0 and table.stdout.splitlines()[-1].startswith("all "), table


def test_bad_input_is_one_line_and_status_2(live: Up) -> None:
    one_error(gpufleet(live, "ops", "predict", "report", "--buckets", "0"), "--buckets")
    one_error(gpufleet(live, "ada", "predict", "report"), "operator")
