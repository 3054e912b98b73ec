"""The README's simulator example shows its point: jobs queue, and the policy changes it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from gpufleet.cli.main import main

ROOT = Path(__file__).parents[2]


def test_the_readme_compare_example_shows_contention_and_a_difference(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"^```sh run\n(gpufleet sim compare .*?)^```", readme, re.S | re.M)
    args = shlex.split(command.replace("\\\n", " "))
    monkeypatch.chdir(ROOT)  # the README's paths are relative to the clone
    assert main([*args[1:], "--json"]) == 0
    summaries = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["profiles"]
    fifo, multifactor = summaries["fifo"], summaries["multifactor"]
    for summary in (fifo, multifactor):
        assert summary["completed"] == summary["jobs"]
        assert summary["queue_mean_s"] > 300  # jobs wait: the cluster is contended
        assert summary["gpu_alloc_mean_pct"] > 50
    # The policies part ways by more than noise.
    assert fifo["jct_mean_s"] > 1.5 * multifactor["jct_mean_s"]


def test_the_readme_prediction_example_prints_the_figures_it_quotes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```sh run\n(#[^\n]*\ngpufleet sim compare .*?)^```", readme, re.S | re.M)
    (block,) = blocks
    command = block.split("\n", 1)[1]
    quoted = re.search(
        r"mean JCT is ([\d,]+) s by the limits, ([\d,]+) s by the estimates and ([\d,]+) s",
        " ".join(readme.split()),
    )
    assert quoted is not None
    monkeypatch.chdir(ROOT)
    assert main([*shlex.split(command.replace("\\\n", " "))[1:], "--json"]) == 0
    summaries = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["profiles"]
    printed = [round(summaries[p]["jct_mean_s"]) for p in ("sjf", "predict", "sjf-oracle")]
    assert printed == [int(x.replace(",", "")) for x in quoted.groups()]
