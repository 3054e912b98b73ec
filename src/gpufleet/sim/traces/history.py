"""gpufleet's own job history: JSON Lines, one finished job per line.

Each line is a JSON object with the ``TraceJob`` fields, ``request`` nested
with the ``Request`` fields (``gpu_models`` as a list)::

    {"id": "42", "submit_time": 3600, "duration_s": 120,
     "request": {"gpus": 4, "cpu_milli": 8000, "memory_mib": 65536, "nodes": 1},
     "user": "ana", "account": "vision", "qos": "normal", "partition": "gpu",
     "time_limit_s": 7200, "preemptible": false, "priority_class": "normal",
     "checkpoint_interval_s": null, "labels": {"vc": "6c71a0"},
     "after": null, "think_s": 0}

``after`` and ``think_s`` make a job follow another of the file (its id),
submitted ``think_s`` after that one ends (``TraceJob``); a name of no job
of the file, or a cycle, is an error on the follower's line.
``dump_history`` writes every field; a reader accepts any omitted optional
field as its default. Unknown keys are errors, so a misspelt field is never
silently dropped. Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from gpufleet.core.model import Request
from gpufleet.sim.openb import TraceError, open_text
from gpufleet.sim.traces.fields import located, repeated_ids
from gpufleet.sim.traces.record import TraceJob, by_submit, follow_problems

_NULL = type(None)
_JOB_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "submit_time": (int,),
    "duration_s": (int,),
    "request": (dict,),
    "user": (str,),
    "account": (str,),
    "qos": (str,),
    "partition": (str,),
    "time_limit_s": (int, _NULL),
    "preemptible": (bool,),
    "priority_class": (str,),
    "checkpoint_interval_s": (int, _NULL),
    "labels": (dict,),
    "after": (str, _NULL),
    "think_s": (int,),
}
_REQUEST_TYPES: dict[str, tuple[type, ...]] = {
    f.name: (str,) if f.name == "mig_profile" else (list,) if f.name == "gpu_models" else (int,)
    for f in fields(Request)
}
_REQUIRED = ("id", "submit_time", "duration_s", "request")
# A Request's complaint keeps its "request." prefix here, as the JSON nests it.
_NESTED = {f"request.{name}": f"request.{name}" for name in _REQUEST_TYPES}


def dump_history(path: Path | str, jobs: Iterable[TraceJob]) -> None:
    """Write ``jobs`` as JSON Lines that ``load_history`` reads back unchanged."""
    with Path(path).open("w", encoding="utf-8") as out:
        for job in jobs:
            record = asdict(job)
            record["request"]["gpu_models"] = sorted(job.request.gpu_models)
            out.write(json.dumps(record, separators=(",", ":")) + "\n")


def load_history(path: Path | str) -> list[TraceJob]:
    """Jobs of a history file, by submit time. TraceError names the line and field."""
    path = Path(path)
    jobs, lines = [], []
    with open_text(path) as handle:
        for line, text in enumerate(handle, start=1):
            if text.strip():
                jobs.append(_job(path, line, text))
                lines.append(line)
    if not jobs:
        raise TraceError(path, None, None, "holds no jobs")
    if repeated := repeated_ids(path, [j.id for j in jobs], lines, "id"):
        raise repeated[0]
    problems = follow_problems(jobs)
    if problems:
        i, reason = problems[0]
        raise TraceError(path, lines[i], "after", reason)
    return by_submit(jobs)


def _job(path: Path, line: int, text: str) -> TraceJob:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(path, line, None, f"not JSON: {e.msg}") from None
    if not isinstance(record, dict):
        raise TraceError(path, line, None, "must be a JSON object")
    _check_keys(path, line, record, _JOB_TYPES, "")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise TraceError(path, line, missing[0], "missing")
    values = {k: _typed(path, line, k, v, _JOB_TYPES[k]) for k, v in record.items()}
    raw = record["request"]
    if not isinstance(raw, dict):
        raise TraceError(path, line, "request", "must be a JSON object")
    _check_keys(path, line, raw, _REQUEST_TYPES, "request.")
    spec = {k: _typed(path, line, f"request.{k}", v, _REQUEST_TYPES[k]) for k, v in raw.items()}
    labels = values.get("labels", {})
    if not all(isinstance(v, str) for v in labels.values()):
        raise TraceError(path, line, "labels", "must map names to strings")
    if "gpu_models" in spec:
        spec["gpu_models"] = frozenset(spec["gpu_models"])
    with located(path, line, _NESTED):
        values["request"] = Request(**spec)
        return TraceJob(**values)


def _check_keys(
    path: Path, line: int, record: Mapping[str, Any], known: Mapping[str, Any], prefix: str
) -> None:
    unknown = [k for k in record if k not in known]
    if unknown:
        raise TraceError(
            path, line, prefix + unknown[0], f"unknown field (known: {', '.join(known)})"
        )


def _typed(path: Path, line: int, name: str, value: Any, allowed: tuple[type, ...]) -> Any:
    """``value`` if it has one of the ``allowed`` JSON types, else TraceError."""
    # bool is an int to Python, never to a trace.
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        wanted = " or ".join("null" if t is _NULL else t.__name__ for t in allowed)
        raise TraceError(path, line, name, f"must be {wanted}, got {json.dumps(value)}")
    if isinstance(value, list) and not all(isinstance(m, str) for m in value):
        raise TraceError(path, line, name, "must be a list of strings")
    return value
