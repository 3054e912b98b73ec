#!/usr/bin/env python3
"""A job that checkpoints: it counts to STEPS, saving the count after each step.

It resumes from the count saved in $GPUFLEET_CHECKPOINT_DIR (the same
directory for every run of the job), touches $GPUFLEET_CHECKPOINT_MARK after
each complete save, and stops when a later run of the job has started: a
run left behind on a node the cluster gave up on must not write over it.
"""

import os
import pathlib
import sys
import time

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
ckpt = pathlib.Path(os.environ["GPUFLEET_CHECKPOINT_DIR"])
run = int(os.environ["GPUFLEET_RESTART_COUNT"])
node = os.environ["GPUFLEET_NODE"]
saved = ckpt / "step"
step = int(saved.read_text()) if saved.exists() else 0
(ckpt / f"started.{run}").write_text(node)
print(f"run {run} on {node}: starting from step {step}", flush=True)
while step < STEPS:
    if (ckpt / f"started.{run + 1}").exists():
        sys.exit(0)  # superseded
    time.sleep(0.5)  # the work of one step
    step += 1
    (ckpt / "step.tmp").write_text(str(step))
    os.replace(ckpt / "step.tmp", saved)  # a save is whole or absent
    pathlib.Path(os.environ["GPUFLEET_CHECKPOINT_MARK"]).touch()
print(f"run {run} on {node}: done at step {step}", flush=True)
