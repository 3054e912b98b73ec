"""``gpufleet sim fill`` on a cluster file with MIG layouts and a pod list with MIG pods
(``examples/mig-fill.toml`` and ``examples/mig-pods.csv``, as docs/fill.md runs them).

The placements are checked from the files alone: every MIG pod holds as many
instances as it asked for, each on a partitioned GPU, no GPU gives more than
its seven compute slices, whole and shared pods never land on a partitioned
GPU, and the allocation curve rebuilt from the rows is the one reported.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from gpufleet.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLUSTER = (EXAMPLES / "mig-fill.toml").read_text()
PODS = (EXAMPLES / "mig-pods.csv").read_text()
HEADER = PODS.splitlines(keepends=True)[0]
PARTITIONED = {(f"a{i}", g) for i in (1, 2) for g in (0, 1, 2)}
SLICES = {"1g.10gb": 1, "3g.40gb": 3}


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_mig_fill_from_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    (tmp_path / "pods.csv").write_text(PODS)
    out = tmp_path / "out"
    args = ["--nodes", str(tmp_path / "cluster.toml"), "--pods", str(tmp_path / "pods.csv")]
    status = main(["sim", "fill", *args, "--policy", "default,fgd", "--seeds", "1-2"])
    assert status == 0
    status = main(["sim", "fill", *args, "--seeds", "1", "--workers", "1", "--json"])
    assert status == 0
    types = json.loads(capsys.readouterr().out.splitlines()[-1])["results"]["default"]
    assert {"mig:1g.10gbx1 cpu<=4 mem<=16G", "mig:3g.40gbx1 cpu<=4 mem<=16G"} <= set(
        types["refused_by_type"]
    )
    assert main(["sim", "fill", *args, "--seeds", "1", "--workers", "1", "--out", str(out)]) == 0

    pods = {p["name"]: p for p in read(tmp_path / "pods.csv")}
    capacity = 16 * 1000  # 16 GPUs, the partitioned ones included
    slices: defaultdict[tuple[str, int], int] = defaultdict(int)
    arrived = allocated = 0
    curve: list[float] = []
    for row in read(out / "placements-default-1.csv"):
        pod = pods[row["pod"]]
        count, profile = int(pod["num_gpu"]), pod["mig_profile"]
        share = SLICES[profile] * 1000 // 7 if profile else int(pod["gpu_milli"])
        arrived += count * share
        gpus = [(row["node"], int(g)) for g in row["gpus"].split("|")] if row["node"] else []
        if gpus:
            assert len(gpus) == count
            assert int(row["gpu_milli"]) == share
            # MIG work only on partitioned GPUs, and nothing else on them.
            assert all((g in PARTITIONED) == bool(profile) for g in gpus)
            for g in gpus:
                slices[g] += SLICES.get(profile, 0)
            allocated += count * share
        while arrived * 100 >= len(curve) * capacity and len(curve) <= 130:
            curve.append(100 * allocated / capacity)
    assert slices and max(slices.values()) <= 7
    with (out / "curves.csv").open(newline="") as handle:
        reported = next(r for r in csv.reader(handle) if r[2] == "alloc_pct")
    assert [float(x) for x in reported[3:]] == pytest.approx(curve, abs=1e-3)
    assert max(curve) <= 100


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("m,2000,8192,1,100,,1g.10gb", "row 2: gpu_milli: a MIG pod asks for 0 (its profile)"),
        ("m,2000,8192,0,0,,1g.10gb", "row 2: num_gpu: must be more than zero, got 0"),
        ("m,2000,8192,1,0,,1g.11gb", "row 2: mig_profile: unknown MIG profile '1g.11gb'"),
    ],
)
def test_a_bad_mig_pod_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, row: str, message: str
) -> None:
    (tmp_path / "cluster.toml").write_text(CLUSTER)
    (tmp_path / "pods.csv").write_text(HEADER + row + "\n")
    args = ["--nodes", str(tmp_path / "cluster.toml"), "--pods", str(tmp_path / "pods.csv")]
    assert main(["sim", "fill", *args, "--workers", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {tmp_path / 'pods.csv'}, {message}")
    assert err.count("\n") == 1
