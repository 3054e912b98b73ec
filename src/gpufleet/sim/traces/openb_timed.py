"""Timed replay of Alibaba's openb pod list (see ``sim.openb`` for its columns).

Each pod arrives at ``creation_time`` and runs for ``deletion_time -
creation_time`` seconds; pods whose deletion precedes their creation carry no
usable duration and are skipped. Every pod is kept whatever its
``pod_phase``, as the FGD paper's simulator replays them: pods still running
when the trace was cut are deleted at its end, so their duration is a lower
bound. ``qos`` maps to a priority class and preemptibility:

==============  ==============  ===========
qos             priority_class  preemptible
==============  ==============  ===========
LS, Guaranteed  high            no
Burstable       normal          no
BE              low             yes
==============  ==============  ===========
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.sim.openb import TraceError, load_pods
from gpufleet.sim.traces.fields import repeated_ids, table_rows
from gpufleet.sim.traces.record import TraceJob, by_submit

QOS_CLASSES: dict[str, tuple[str, bool]] = {
    "LS": ("high", False),
    "Guaranteed": ("high", False),
    "Burstable": ("normal", False),
    "BE": ("low", True),
}
"""openb qos -> (priority_class, preemptible)."""

TIMED_COLUMNS = ("qos", "creation_time", "deletion_time")


def load_openb_timed(path: Path) -> list[TraceJob]:
    """Pods of an openb pod list as timed jobs, by creation time.

    TraceError names the row and column of a malformed pod, including an
    unknown ``qos``.
    """
    pods = load_pods(path)
    jobs, lines = [], []
    # Same reader, same order: the lines give each pod its row for errors.
    rows = table_rows(path, TIMED_COLUMNS)
    for (line, row), pod in zip(rows, pods, strict=True):
        if pod.qos not in QOS_CLASSES:
            known = ", ".join(QOS_CLASSES)
            raise TraceError(path, line, "qos", f"unknown qos {row['qos']!r} (known: {known})")
        if pod.deletion_time < pod.creation_time:
            continue
        priority_class, preemptible = QOS_CLASSES[pod.qos]
        jobs.append(
            TraceJob(
                id=pod.name,
                submit_time=pod.creation_time,
                duration_s=pod.deletion_time - pod.creation_time,
                request=pod.request,
                qos=pod.qos,
                priority_class=priority_class,
                preemptible=preemptible,
            )
        )
        lines.append(line)
    if repeated := repeated_ids(path, [j.id for j in jobs], lines, "name"):
        raise repeated[0]
    return by_submit(jobs)
