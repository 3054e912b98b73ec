"""The controller as Prometheus sees it: a collector that reads it at scrape time.

Two kinds of series (``docs/metrics.md`` lists every one):

* ``gpufleet_*``: the queue, the scheduler, nodes, partitions and fairshare,
  from ``Controller.observe()`` and its ``SchedulerMetrics``.
* Each GPU's readings from its agent's last sync, under dcgm-exporter's
  names, types' units and labels (``gpu``, ``UUID``, ``device``,
  ``modelName``, ``Hostname``), so dashboards and rules written for
  dcgm-exporter work unchanged; plus the holders of the GPU as ``hpc_job``
  (the label dcgm-exporter's HPC job mapping uses; ``job`` is the scrape
  job's), ``user`` and ``account``. Jobs sharing a GPU are listed joined by
  commas. Only nodes whose agent syncs report readings: a down node's
  series end rather than repeat old values, and so do a node's whose agent
  has sent no readings for ``STALE_INTERVALS`` heartbeat intervals (its
  source has none now). A GPU without a UUID (a declared one) gets
  ``NODE/gpuINDEX``, unique and stable, but no NVIDIA UUID.
  ``gpufleet_gpu_healthy``'s ``reason`` is the code of the worst problem
  (``agent.health.REASON_CODES``), never its text with live values.

dcgm-exporter declares some DCGM fields counters, but their names lack the
``_total`` suffix that prometheus_client's counters add; they are exposed
untyped under their exact names (``rate`` and ``increase`` work the same).

The per-GPU series are most of a scrape (16 per GPU: 128,000 on 1,000
nodes of 8 GPUs), so they are written in the text format here, each GPU's
label set once for all its series, rather than through prometheus_client,
which checks and escapes every label name of every sample (about 30 us a
sample, seconds a scrape). The rest goes through prometheus_client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from gpufleet.agent.health import reason_code
from gpufleet.api.agent_schemas import GpuReading
from gpufleet.controller.metrics import GpuView, Holder, Observation
from gpufleet.controller.readings import NodeReadings
from gpufleet.controller.service import Controller

STALE_INTERVALS = 2.0
"""Readings older than this many heartbeat intervals are not exported: every sync of an
agent whose source reads the GPUs carries fresh ones."""

# (name, Prometheus type, help, reading) in dcgm-exporter's units.
DCGM_FIELDS: tuple[tuple[str, str, str, Callable[[GpuReading], float | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilisation (%).", lambda r: r.util_pct),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory in use (MiB).", lambda r: r.mem_used_mib),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB).", lambda r: r.mem_free_mib),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C).", lambda r: r.temp_c),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W).", lambda r: r.power_w),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "NVML clocks-event (throttle) reasons bitmask.",
        lambda r: r.throttle_reasons,
    ),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "The last XID error seen (0: none).", lambda r: r.xid_last),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "untyped",
        "Single-bit ECC errors since the driver loaded (a counter).",
        lambda r: r.ecc_sbe_volatile,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "untyped",
        "Double-bit (uncorrectable) ECC errors since the driver loaded (a counter).",
        lambda r: r.ecc_dbe_volatile,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "untyped",
        "Memory rows remapped for correctable errors (a counter).",
        lambda r: r.remap_correctable,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "untyped",
        "Memory rows remapped for uncorrectable errors (a counter).",
        lambda r: r.remap_uncorrectable,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "1 while a row remap waits for a GPU reset.",
        lambda r: r.remap_pending,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "1 when a row remap has failed.",
        lambda r: r.remap_failure,
    ),
)


class ControllerCollector:
    """A prometheus_client collector over one observation of a controller: the scheduler's,
    the nodes', the partitions' and fairshare's families, and the controller's counters."""

    def __init__(self, controller: Controller, view: Observation) -> None:
        self.controller = controller
        self.view = view

    def collect(self) -> Iterator[Metric]:
        yield from scheduler_families(self.view)
        yield from self.controller.metrics.collect()


def exposition(controller: Controller) -> bytes:
    """The controller's metrics in Prometheus' text format, read afresh."""
    view = controller.observe()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(controller, view))
    up = {n.name for n in view.nodes if n.up}
    oldest = view.now - STALE_INTERVALS * view.heartbeat_interval_s
    readings = [r for name, r in controller.gpu_readings().items() if name in up and r.at >= oldest]
    return generate_latest(registry) + gpu_text(view.gpus, readings).encode()


def scheduler_families(view: Observation) -> Iterator[Metric]:
    """The queue, nodes, partitions and fairshare of one observation."""
    pending = GaugeMetricFamily(
        "gpufleet_jobs_pending",
        "Pending jobs by partition, QoS, account and pending reason.",
        labels=("partition", "qos", "account", "reason"),
    )
    for labels, count in sorted(view.pending.items()):
        pending.add_metric(labels, count)
    running = GaugeMetricFamily(
        "gpufleet_jobs_running",
        "Running jobs (stopping ones included) by partition, QoS and account.",
        labels=("partition", "qos", "account"),
    )
    for group, count in sorted(view.running.items()):
        running.add_metric(group, count)
    wait = GaugeMetricFamily(
        "gpufleet_jobs_pending_longest_wait_seconds",
        "The longest a pending job has waited since submission, by partition and reason.",
        labels=("partition", "reason"),
    )
    for where, seconds in sorted(view.oldest_pending.items()):
        wait.add_metric(where, seconds)
    yield from (pending, running, wait)
    yield from _node_families(view)
    yield from _partition_families(view)
    yield from _fairshare_families(view)
    yield from _pool_families(view)


def _pool_families(view: Observation) -> Iterator[Metric]:
    nodes = GaugeMetricFamily(
        "gpufleet_pool_nodes",
        "Nodes of each autoscaled pool, booting (asked for, not yet registered) and up.",
        labels=("pool", "state"),
    )
    cost = GaugeMetricFamily(
        "gpufleet_pool_cost",
        "What each pool's nodes have cost since the controller started (node-hours x GPUs "
        "x price per GPU-hour, booting included).",
        labels=("pool",),
    )
    for p in view.pools:
        nodes.add_metric((p.name, "booting"), p.booting)
        nodes.add_metric((p.name, "up"), p.up)
        cost.add_metric((p.name,), p.cost)
    yield nodes
    yield cost


def _node_families(view: Observation) -> Iterator[Metric]:
    state = GaugeMetricFamily(
        "gpufleet_node_state",
        "1 for each node's state as the node list shows it (idle, mixed, allocated, "
        "drain, draining, down, unknown).",
        labels=("node", "state"),
    )
    up = GaugeMetricFamily(
        "gpufleet_node_up", "1 while the node's agent syncs, drained or not.", labels=("node",)
    )
    age = GaugeMetricFamily(
        "gpufleet_node_heartbeat_age_seconds",
        "Seconds since the node's agent last synced.",
        labels=("node",),
    )
    for n in view.nodes:
        state.add_metric((n.name, n.state), 1)
        up.add_metric((n.name,), float(n.up))
        if n.heartbeat_age_s is not None:
            age.add_metric((n.name,), n.heartbeat_age_s)
    interval = GaugeMetricFamily(
        "gpufleet_heartbeat_interval_seconds",
        "How often agents are asked to sync.",
        value=view.heartbeat_interval_s,
    )
    yield from (state, up, age, interval)


def _partition_families(view: Observation) -> Iterator[Metric]:
    gpus = GaugeMetricFamily(
        "gpufleet_partition_gpus",
        "GPUs on the partition's usable nodes (up and not drained).",
        labels=("partition",),
    )
    idle = GaugeMetricFamily(
        "gpufleet_partition_gpus_idle",
        "Wholly free GPUs on the partition's usable nodes.",
        labels=("partition",),
    )
    for p in view.partitions:
        gpus.add_metric((p.name,), p.gpus)
        idle.add_metric((p.name,), p.idle_gpus)
    yield from (gpus, idle)


def _fairshare_families(view: Observation) -> Iterator[Metric]:
    labels = ("account", "user")
    shares = GaugeMetricFamily(
        "gpufleet_fairshare_shares_normalized",
        "Each association's entitlement: its share of the whole cluster (0..1).",
        labels=labels,
    )
    usage = GaugeMetricFamily(
        "gpufleet_fairshare_usage_billable_gpu_seconds",
        "Decayed billable GPU-seconds, rolled up the account tree.",
        labels=labels,
    )
    norm = GaugeMetricFamily(
        "gpufleet_fairshare_usage_normalized",
        "Each association's part of the whole cluster's decayed usage (0..1).",
        labels=labels,
    )
    ratio = GaugeMetricFamily(
        "gpufleet_fairshare_usage_ratio",
        "Normalised usage over normalised shares: 1 at its entitlement, 2 at twice it.",
        labels=labels,
    )
    factor = GaugeMetricFamily(
        "gpufleet_fairshare_factor",
        "A user association's fairshare factor (0..1; higher schedules sooner).",
        labels=labels,
    )
    for row in view.fairshare:
        key = (row.account, row.user or "")
        shares.add_metric(key, row.normalized_shares)
        usage.add_metric(key, row.usage)
        norm.add_metric(key, row.normalized_usage)
        if row.normalized_shares > 0:
            ratio.add_metric(key, row.normalized_usage / row.normalized_shares)
        if row.factor is not None:
            factor.add_metric(key, row.factor)
    yield from (shares, usage, norm, ratio, factor)


def gpu_text(gpus: Sequence[GpuView], readings: Iterable[NodeReadings]) -> str:
    """Every GPU's allocation, and the DCGM-named series of every reading, labelled with
    the GPU's inventory and holders, in the text format."""
    inventory: Mapping[tuple[str, int], GpuView] = {(g.node, g.index): g for g in gpus}
    allocated = [
        f"{_labels(g.node, g.index, g.uuid, g.model, g.holders)} {float(g.allocated)!r}"
        for g in gpus
    ]
    lines: list[list[str]] = [[] for _ in DCGM_FIELDS]
    xids, healthy = [], []
    for node in sorted(readings, key=lambda r: r.node):
        for r in node.gpus:
            known = inventory.get((node.node, r.index))
            labels = _labels(
                node.node,
                r.index,
                r.uuid or (known.uuid if known else ""),
                r.model or (known.model if known else ""),
                known.holders if known else (),
            )
            for out, (_, _, _, read) in zip(lines, DCGM_FIELDS, strict=True):
                value = read(r)
                if value is not None:  # a value the source could not read has no sample
                    out.append(f"{labels} {float(value)!r}")
            xids.append(f"{labels} {float(r.xid_count)!r}")
            reason = "}" if r.healthy else f',reason="{reason_code(r.health_reason)}"}}'
            healthy.append(f"{labels[:-1]}{reason} {float(r.healthy)!r}")
    families = [
        (
            "gpufleet_gpu_allocated",
            "gauge",
            "The allocated fraction of each GPU (a share, or its MIG slices in use).",
            allocated,
        ),
        *(
            (name, kind, doc, out)
            for (name, kind, doc, _), out in zip(DCGM_FIELDS, lines, strict=True)
        ),
        ("gpufleet_gpu_xid_errors_total", "counter", "XID errors the node's agent has seen.", xids),
        (
            "gpufleet_gpu_healthy",
            "gauge",
            "1 while the agent finds the GPU healthy; reason is the code of the worst problem.",
            healthy,
        ),
    ]
    text = []
    for name, kind, doc, samples in families:
        text.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        text.extend(f"{name}{sample}\n" for sample in samples)
    return "".join(text)


_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


def _escape(value: str) -> str:
    """A label value as the text format writes it."""
    return value.translate(_ESCAPES)


def _labels(node: str, index: int, uuid: str, model: str, holders: Sequence[Holder]) -> str:
    """``{...}``: dcgm-exporter's labels of one GPU, then its holders' (joined by commas;
    left out when the GPU is free, as Prometheus drops empty labels anyway)."""
    # A node without NVML registers its GPUs by index (what CUDA_VISIBLE_DEVICES takes
    # there): no UUID, and the same on every node, so the label is made unique instead.
    named = [
        ("gpu", str(index)),
        ("UUID", f"{node}/gpu{index}" if uuid in ("", str(index)) else uuid),
        ("device", f"nvidia{index}"),
        ("modelName", model),
        ("Hostname", node),
        ("hpc_job", ",".join(dict.fromkeys(h.job_id for h in holders))),
        ("user", ",".join(dict.fromkeys(h.user for h in holders))),
        ("account", ",".join(dict.fromkeys(h.account for h in holders))),
    ]
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in named if v) + "}"
