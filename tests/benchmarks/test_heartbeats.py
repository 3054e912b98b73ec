"""benchmarks/heartbeats.py --quick: simulated agents heartbeating while the loop runs, and
the kill-the-agent failover with real agents and a real checkpointing job.

The failover is the integration test of the checkpoint contract: four agents
as separate processes, a Python job that saves its step in
``$GPUFLEET_CHECKPOINT_DIR``, its agent SIGKILLed, the node DOWN after three
missed heartbeats, the job NODE_FAIL and requeued, restarted on another
node within 60 s from the saved step (not from 0), and the killed agent,
restarted, cleaning up the orphaned run. The run is the documented
command's (``test_documented_commands`` checks its keys).
"""

from __future__ import annotations

from benchmark_commands import QuickRuns


def test_quick_run_heartbeats_and_fails_over_from_the_checkpoint(quick_runs: QuickRuns) -> None:
    result = quick_runs.of("heartbeats.py").result()
    assert result.keys() >= {"agents", "heartbeat_p99_ms", "failover_s"}
    assert result["agents"] == 50 and result["heartbeat_p99_ms"] > 0
    assert 0 < result["failover_s"] < 60
    # Resumed from what the first run saved before its agent was killed.
    assert all(step >= 3 for step in result["resumed_from_step"])
