"""The fleet: naming, booting, billing and giving up on pool nodes."""

from __future__ import annotations

import pytest

from gpufleet.core.cycle import SchedulingProfile, run_cycle
from gpufleet.core.job import Job, Partition, QoS
from gpufleet.core.model import GPU, Node, Request
from gpufleet.core.plan import RESOURCES
from gpufleet.core.pools import NodePool
from gpufleet.engine.book import JobBook
from gpufleet.engine.fleet import Fleet, boot_timeout
from gpufleet.policies.autoscale import AutoscaleArgs, DemandScaler
from gpufleet.policies.queue import Fifo
from gpufleet.policies.registry import placement_profile

TEMPLATE = Node("t", 32_000, 256 * 1024, tuple(GPU(i, "L4", 24 * 1024) for i in range(4)))
POOL = NodePool("gpu", TEMPLATE, min_nodes=0, max_nodes=12, boot_s=100, price_gpu_hour=3.0)


def book() -> JobBook:
    return JobBook([], {"normal": QoS("normal")}, {"default": Partition("default")})


def submit(b: JobBook, jid: str, gpus: int, at: int) -> None:
    b.submit(Job(jid, "u", "a", "normal", "default", Request(gpus=gpus), at, 3600))


def fleet(**args: int) -> Fleet:
    return Fleet([POOL], DemandScaler(AutoscaleArgs(**args)))


def test_names_are_padded_and_reused() -> None:
    names = list(POOL.names())
    assert names[:2] == ["gpu-01", "gpu-02"] and names[-1] == "gpu-12" and len(names) == 12
    assert all(POOL.owns(n) for n in names)
    assert not any(POOL.owns(n) for n in ("gpu-1", "gpu-00", "gpu-13", "gpux-01", "gpu01"))
    f, b = fleet(pending_s=0, idle_s=50), book()
    for k in range(3):
        submit(b, f"j{k}", 4, 0)
    orders = f.step(b, dict.fromkeys(b.pending, RESOURCES), (), 10)
    assert [n.name for _, n in orders.create] == ["gpu-01", "gpu-02", "gpu-03"]
    assert all(n.pool == "gpu" for _, n in orders.create)
    # gpu-02 comes up, stays idle past idle_s (50 s) and goes; its name is free again
    for k in range(3):
        b.withdraw(f"j{k}")
    b.add_node(POOL.node("gpu-02"))
    f.joined("gpu-02", 110)
    orders = f.step(b, {}, (), 160)
    assert [name for _, name in orders.delete] == ["gpu-02"]
    # three more: gpu-01 and gpu-03, still booting, take two; the third gets gpu-02 again
    for k in range(3):
        submit(b, f"again{k}", 4, 160)
    orders = f.step(b, dict.fromkeys(b.pending, RESOURCES), (), 200)
    assert [n.name for _, n in orders.create] == ["gpu-02"]


def test_billing_from_request_to_deletion() -> None:
    f, b = fleet(pending_s=0, idle_s=1000), book()
    submit(b, "j", 4, 0)
    f.step(b, {"j": RESOURCES}, (), 0)  # gpu-01 asked for at 0
    assert f.counts() == {"gpu": (1, 0)}  # booting
    b.withdraw("j")
    b.add_node(POOL.node("gpu-01"))
    f.joined("gpu-01", 100)
    # 3600 s x 4 GPUs x 3.0 per GPU-hour = 12.0, booting included
    assert f.cost(3600) == pytest.approx(12.0)
    assert f.pool_costs(3600) == {"gpu": pytest.approx(12.0)}
    assert f.counts() == {"gpu": (0, 1)}  # none booting, one up
    assert f.gpu_hours(3600) == pytest.approx(4.0)
    orders = f.step(b, {}, (), 1100)  # idle since 100, 1000 s later
    assert [name for _, name in orders.delete] == ["gpu-01"]
    # billed 0..1100 only: 1100/3600 h x 4 x 3.0
    assert f.cost(99_999) == pytest.approx(1100 / 3600 * 12.0)


def test_a_boot_that_never_ends_is_given_up() -> None:
    f, b = fleet(pending_s=0), book()
    submit(b, "j", 4, 0)
    assert len(f.step(b, {"j": RESOURCES}, (), 0).create) == 1
    limit = boot_timeout(POOL)  # max(120, 3 x 100 s)
    assert limit == 300
    still = f.step(b, {"j": RESOURCES}, (), limit - 1)
    assert not still.create and not still.delete
    orders = f.step(b, {"j": RESOURCES}, (), limit)
    assert [name for _, name in orders.delete] == ["gpu-01"]
    assert [n.name for _, n in orders.create] == ["gpu-01"]  # asked for again


def test_adopt_only_pool_names() -> None:
    f = fleet()
    assert f.adopt("gpu-05", 0) and not f.adopt("dgx-01", 0)
    assert f.members["gpu-05"].joined == 0


def test_busy_nodes_are_not_idle() -> None:
    f, b = fleet(pending_s=0, idle_s=10), book()
    b.add_node(POOL.node("gpu-01"))
    f.adopt("gpu-01", 0)
    submit(b, "j", 4, 0)
    profile = SchedulingProfile(Fifo(), placement_profile("first-fit"))
    b.apply(run_cycle(b.snapshot(0), profile, 0), 0)
    assert not f.step(b, {}, (), 500).delete  # the run holds it
    b.finish("j", 600)
    assert not f.step(b, {}, (), 605).delete  # idle since 605
    assert [n for _, n in f.step(b, {}, (), 615).delete] == ["gpu-01"]


def test_a_restored_boot_counts_from_when_it_was_asked_for() -> None:
    f, b = fleet(pending_s=0), book()
    assert f.restore("gpu-02", "gpu", 50) and not f.restore("gpu-02", "gpu", 60)  # once
    assert not f.restore("dgx-01", "dgx", 50)  # no such pool
    assert f.counts() == {"gpu": (1, 0)} and f.created == 0  # asked for by the driver before
    submit(b, "j", 4, 100)
    # the job waits for gpu-02: nothing asked for; given up 300 s after 50, not after 100
    assert not f.step(b, {"j": RESOURCES}, (), 349).create
    assert [name for _, name in f.step(b, {"j": RESOURCES}, (), 350).delete] == ["gpu-02"]
    # billed 50..350: 300/3600 h x 4 GPUs x 3.0
    assert f.cost(350) == pytest.approx(300 / 3600 * 12.0)
    # asked for when the pool was larger (12 nodes max now): still waited for, given up
    # 300 s after 400; gpu-01, asked for at 350 above for j, 300 s after 350
    b.withdraw("j")
    assert f.restore("gpu-15", "gpu", 400) and not POOL.owns("gpu-15")
    assert [name for _, name in f.step(b, {}, (), 700).delete] == ["gpu-01", "gpu-15"]
