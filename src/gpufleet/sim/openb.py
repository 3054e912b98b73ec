"""Loader for Alibaba's openb trace (cluster-trace-gpu-v2023, the FGD paper's data).

Node list columns: ``sn,cpu_milli,memory_mib,gpu,model``.
Pod list columns: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
pod_phase,creation_time,deletion_time,scheduled_time``. ``gpu_milli`` < 1000
with ``num_gpu`` = 1 is a fraction of one shared GPU; ``gpu_spec`` lists the
allowed GPU models separated by ``|`` (empty: any). Times are in seconds.

The first five pod columns say what a pod asks for and are required. The
published format treats the others as optional, so a missing one takes its
default: ``gpu_spec`` any model, ``qos`` none, ``creation_time`` and
``deletion_time`` 0 (the timed replay, ``traces.openb_timed``, requires
them); ``pod_phase`` and ``scheduled_time`` are not read.

``mig_profile`` is gpufleet's own optional column, for clusters with MIG: a
pod that names a profile (``1g.10gb``) asks for ``num_gpu`` instances of it,
with ``gpu_milli`` 0.

Every malformed row raises ``TraceError`` naming the file, the row (1-based,
counting the header as row 1) and the column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO

from gpufleet.adapters import textfile
from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.mig import unknown_profile
from gpufleet.core.model import (
    GPU,
    MAX_AMOUNT,
    MAX_GPUS_PER_NODE,
    MILLI,
    InvalidSpec,
    Node,
    Request,
)

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
NODE_FIELDS = {"name": "sn", "gpus": "gpu"}
"""The node list's column for each ``Node`` field whose name differs."""
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_FIELDS = {"mig_count": "num_gpu"}
"""The pod list's column for each ``Request`` field whose name differs."""
"""The pod list's required columns (the module docstring lists the optional ones)."""


class TraceError(ValueError):
    """A trace file that cannot be read, with where and why."""

    def __init__(self, path: Path | str, row: int | None, field: str | None, reason: str) -> None:
        self.row = row
        where = str(path) + (f", row {row}" if row is not None else "")
        what = f"{field}: " if field else ""
        super().__init__(f"{where}: {what}{reason}")


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    request: Request
    qos: str = ""
    creation_time: int = 0
    deletion_time: int = 0


def bundled(name: str) -> Path:
    """Path of a trace file shipped inside the package (``gpufleet/data``)."""
    return Path(str(resources.files("gpufleet") / "data" / name))


DEFAULT_NODES = "openb_node_list_gpu_node.csv"
# The same cluster with its 310 CPU-only nodes too (1,523 nodes); the paper's fill
# uses the GPU nodes only.
ALL_NODES = "openb_node_list_all_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"


def open_text(path: Path) -> TextIO:
    """A trace file's text (``textfile.open_text``), its errors as TraceError at the bad line."""
    try:
        return textfile.open_text(path)
    except textfile.UnreadableText as e:
        raise TraceError(path, e.line, None, e.reason) from None


def _rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with open_text(path) as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(path, 1, missing[0], "column missing from the header")
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise TraceError(path, reader.line_num, None, "wrong number of fields")
            yield reader.line_num, row


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    text = row[column].strip()
    try:
        number = float(text) if text else 0.0
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise TraceError(path, line, column, f"{text!r} is not a number")
    # Some exports write whole numbers as floats ("1000.0"); a fraction is a mistake.
    if not number.is_integer():
        raise TraceError(path, line, column, f"{text!r} is not a whole number")
    value = int(text) if text.lstrip("-").isdigit() else int(number)
    if value < 0:
        raise TraceError(path, line, column, f"must not be negative, got {value}")
    if value > MAX_AMOUNT:
        raise TraceError(path, line, column, f"must be at most {MAX_AMOUNT}, got {value}")
    return value


def load_nodes(path: Path | str) -> list[Node]:
    path = Path(path)
    nodes = []
    first_row: dict[str, int] = {}
    for line, row in _rows(path, NODE_COLUMNS):
        name = row["sn"].strip()
        if name in first_row:
            raise TraceError(path, line, "sn", f"{name!r} is also at row {first_row[name]}")
        first_row[name] = line
        count = _int(path, line, row, "gpu")
        if count > MAX_GPUS_PER_NODE:
            raise TraceError(path, line, "gpu", f"at most {MAX_GPUS_PER_NODE}, got {count}")
        model = row["model"].strip()
        gpus: tuple[GPU, ...] = ()
        try:
            if count:
                memory = gpu_memory_mib(model, "model")
                gpus = tuple(GPU(index=i, model=model, memory_mib=memory) for i in range(count))
            node = Node(
                name=name,
                cpu_milli=_int(path, line, row, "cpu_milli"),
                memory_mib=_int(path, line, row, "memory_mib"),
                gpus=gpus,
            )
        except InvalidSpec as e:
            field = e.field.removeprefix("node.")
            raise TraceError(path, line, NODE_FIELDS.get(field, field), e.reason) from None
        nodes.append(node)
    if not nodes:
        raise TraceError(path, None, None, "holds no nodes")
    return nodes


def load_pods(path: Path | str) -> list[TracePod]:
    path = Path(path)
    pods = []
    for line, row in _rows(path, POD_COLUMNS):
        num_gpu = _int(path, line, row, "num_gpu")
        milli = _int(path, line, row, "gpu_milli")
        spec = frozenset(filter(None, (m.strip() for m in row.get("gpu_spec", "").split("|"))))
        for model in spec:
            try:
                gpu_memory_mib(model, "gpu_spec")
            except InvalidSpec as e:
                raise TraceError(path, line, "gpu_spec", e.reason) from None
        mig_profile = row.get("mig_profile", "").strip()
        if mig_profile:
            if problem := unknown_profile(mig_profile):
                raise TraceError(path, line, "mig_profile", problem)
            if milli:
                raise TraceError(path, line, "gpu_milli", "a MIG pod asks for 0 (its profile)")
        elif num_gpu and not 0 < milli <= MILLI:
            raise TraceError(path, line, "gpu_milli", f"must be 1..1000 with num_gpu, got {milli}")
        elif num_gpu > 1 and milli != MILLI:
            raise TraceError(path, line, "gpu_milli", "a multi-GPU pod takes whole GPUs (1000)")
        try:
            request = Request(
                cpu_milli=_int(path, line, row, "cpu_milli"),
                memory_mib=_int(path, line, row, "memory_mib"),
                gpus=num_gpu if milli == MILLI else 0,
                gpu_milli=milli if num_gpu and milli < MILLI else 0,
                mig_profile=mig_profile,
                mig_count=num_gpu if mig_profile else 0,
                gpu_models=spec,
            )
        except InvalidSpec as e:
            field = e.field.removeprefix("request.") if e.field != "request" else "cpu_milli"
            raise TraceError(path, line, POD_FIELDS.get(field, field), e.reason) from None
        pods.append(
            TracePod(
                name=row["name"].strip(),
                request=request,
                qos=row.get("qos", "").strip(),
                creation_time=_int(path, line, row, "creation_time")
                if "creation_time" in row
                else 0,
                deletion_time=_int(path, line, row, "deletion_time")
                if "deletion_time" in row
                else 0,
            )
        )
    if not pods:
        raise TraceError(path, None, None, "holds no pods")
    return pods
