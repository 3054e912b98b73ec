"""Trace options on the command line: ``--trace FORMAT:PATH,KEY=VALUE`` for every format.

A bad option is one line on stderr and exit 2, before any replay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli.main import main

ROOT = Path(__file__).parents[2]
TIRESIAS = ROOT / "tests" / "sim" / "traces" / "fixtures" / "tiresias.csv"
CLUSTER_16X4 = ROOT / "examples" / "tiresias-cluster.toml"


def summary(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out
    result: dict[str, object] = json.loads(out.splitlines()[-1])
    return result


def test_node_size_reaches_the_loader(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sim", "run", "--cluster", str(CLUSTER_16X4), "--json"]
    # The 16-GPU job is 2 x 8 by default, which no 4-GPU node holds ...
    assert main([*args, "--trace", f"tiresias:{TIRESIAS}"]) == 0
    assert summary(capsys)["unschedulable"] == 1
    # ... and 4 x 4 on the cluster's own node size.
    assert main([*args, "--trace", f"tiresias:{TIRESIAS},gpus_per_node=4"]) == 0
    result = summary(capsys)
    assert (result["unschedulable"], result["completed"]) == (0, 3)


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        (
            f"tiresias:{TIRESIAS},gpus_per_node=0",
            "tiresias trace option: gpus_per_node: must be greater than 0",
        ),
        (
            f"tiresias:{TIRESIAS},gpu_per_node=4",
            "tiresias trace option: gpu_per_node: unknown key (known: gpus_per_node)",
        ),
        (
            f"swf:{TIRESIAS},procs_per_gpu=four",
            "swf trace option: procs_per_gpu: must be a whole number",
        ),
        (f"openb:{TIRESIAS},seed=1", "openb trace option: seed: openb takes no options"),
        (
            f"generic:{TIRESIAS},time=iso,time=s",
            "generic trace option: time: given twice",
        ),
    ],
)
def test_a_bad_option_is_one_line(
    capsys: pytest.CaptureFixture[str], trace: str, message: str
) -> None:
    assert main(["sim", "run", "--cluster", str(CLUSTER_16X4), "--trace", trace]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"
