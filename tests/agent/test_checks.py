"""Node health checks: NHC-style scripts, mounts with backoff, GPU faults, remediation."""

from __future__ import annotations

import sys
from pathlib import Path

from gpufleet.agent.checks import CheckSettings, NodeChecks
from gpufleet.api.agent_schemas import GpuReading


def script(tmp_path: Path, name: str, body: str) -> tuple[str, ...]:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return (str(path),)


def test_nhc_exit_codes_and_the_last_line_as_reason(tmp_path: Path) -> None:
    good = script(tmp_path, "good", "echo fine; exit 0")
    bad = script(tmp_path, "bad", "echo checking; echo 'ERROR: ib0 is down'; exit 1")
    quiet = script(tmp_path, "quiet", "exit 3")
    slow = script(tmp_path, "slow", "sleep 5")
    settings = CheckSettings(scripts=(good, bad, quiet, slow), script_timeout_s=0.5)
    health = NodeChecks(settings).run([])
    assert not health.ok
    assert health.reason == (
        f"{bad[0]}: ERROR: ib0 is down; {quiet[0]}: exit 3; {slow[0]}: no answer within 0.5 s"
    )
    assert NodeChecks(CheckSettings(scripts=(good,))).run([]).ok
    missing = NodeChecks(CheckSettings(scripts=((str(tmp_path / "nope"),),))).run([])
    assert missing.reason == f"{tmp_path / 'nope'}: No such file or directory"


def test_mounts_are_tried_again_with_backoff(tmp_path: Path) -> None:
    pauses: list[float] = []
    settings = CheckSettings(mounts=("/", str(tmp_path)), mount_tries=3, backoff_s=0.5)
    health = NodeChecks(settings, sleep=pauses.append).run([])
    assert health.reason == f"mount {tmp_path}: not mounted"
    assert pauses == [0.5, 1.0]  # "/" answered at once; the other was tried three times
    gone = NodeChecks(CheckSettings(mounts=(str(tmp_path / "gone"),), mount_tries=1)).run([])
    assert gone.reason == f"mount {tmp_path / 'gone'}: No such file or directory"


def test_a_gpu_fault_masks_the_gpu_or_fails_the_node() -> None:
    gpus = [
        GpuReading(index=0),
        GpuReading(index=1, xid_last=48, healthy=False, health_reason="xid 48 (reset class)"),
        GpuReading(index=2, xid_last=79, healthy=False, health_reason="xid 79 (reboot class)"),
    ]
    health = NodeChecks(CheckSettings()).run(gpus[:2])
    assert (health.ok, health.masked_gpus) == (True, [1])
    health = NodeChecks(CheckSettings()).run(gpus)
    assert (health.ok, health.reason, health.masked_gpus) == (
        False,
        "gpu 2: xid 79 (reboot class)",
        [1],
    )


def test_remediation_runs_once_per_failure(tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    check = script(tmp_path, "check", f'[ -e {flag} ] || {{ echo "not fixed"; exit 1; }}')
    log = tmp_path / "remediated"
    fix = (sys.executable, "-c", f"open({str(log)!r}, 'a').write('x'); open({str(flag)!r}, 'w')")
    checks = NodeChecks(CheckSettings(scripts=(check,), remediation=fix))
    failing = checks.run([])
    assert (failing.ok, failing.reason) == (False, f"{check[0]}: not fixed")
    assert checks.remediate(failing) == f"ran {sys.executable}: exit 0"
    assert checks.remediate(failing) == ""  # the same failure: not twice
    assert checks.run([]).ok and log.read_text() == "x"
    flag.unlink()  # a new failure after a pass: remediation may run again
    assert checks.remediate(checks.run([])) == f"ran {sys.executable}: exit 0"
    broken = NodeChecks(CheckSettings(scripts=(check,), remediation=(str(tmp_path / "nope"),)))
    flag.unlink()
    result = broken.remediate(broken.run([]))
    assert result == f"ran {tmp_path / 'nope'}: No such file or directory"
    assert broken.remediate(NodeChecks(CheckSettings()).run([])) == ""  # healthy: nothing
