"""A seeded generator of realistic mixed GPU workloads.

``generate(n_jobs, seed=..., gpus_total=...)`` draws, for each job, all at
once with numpy (100,000 jobs take well under a second to draw):

* **Size** from ``WorkloadShape.size_mix``: GPUs per job, where a fraction
  (0.25) is a share of one GPU, and a job wider than a node is a gang of
  whole nodes. Sizes larger than the cluster are left out of the mix. The
  default keeps 1-GPU jobs the most common, with a fifth of jobs fractional
  and a few percent multi-node, the shape the Philly, Helios and PAI traces
  report: most jobs are small, most GPU time goes to the large ones.
* **Duration** from a log-normal (heavy-tailed: the p99 is about 66 times
  the median at the default ``duration_sigma`` 1.8), with the median growing
  as ``gpus ** size_duration_exponent`` (larger jobs run longer), clipped to
  ``[min_duration_s, max_duration_s]``.
* **Arrival** from a Poisson process whose rate makes the offered load
  (GPU-seconds asked per second over ``gpus_total``) equal ``load`` for the
  sizes and durations drawn. With ``daily_swing`` a > 0 the rate follows
  the day: ``rate x (1 + a cos(2 pi (t - peak_hour h) / 24 h))``, highest
  at ``peak_hour`` and lowest twelve hours later, the same mean load
  (arrivals are the same draws, moved along the day; time 0 is midnight).
* **User** from a Zipf law over ``users`` users (exponent ``user_skew``, so
  a few users submit most jobs); each user belongs to one of ``accounts``
  accounts, themselves drawn by a Zipf law, so accounts differ in size.
* **Scripts** (``scripts`` > 0): each user runs that many scripts, and a
  job is one of its user's, drawn equally often and named ``script<k>``
  (the ``name`` label). A script has a typical duration, drawn as above for
  one GPU; its jobs last that, grown with their GPUs as above, times
  1 +- ``script_jitter``. Arrivals are rescaled to keep ``load``. This is
  what runtime predictors learn from: the same script run again.
* **Priority** from ``priority_mix`` (the QoS is named after the class;
  ``low`` jobs are preemptible), a time limit the user overestimates by
  ``limit_overestimate_min`` (1) to ``limit_overestimate`` times and
  rounds up to an hour, and a
  checkpoint every ``checkpoint_interval_s`` for ``checkpoint_share`` of
  the jobs that run longer than that.
* **Limit habits** (``limit_habits``): users do not size each limit to its
  job. Each user overestimates by one factor of their own, drawn once from
  the same range, and asks for a round value from ``LIMIT_LADDER_H``
  (1, 2, 4, 8, 12, 24, 48, 72 or 168 hours, the values sites see most),
  the smallest that covers that factor times what the job is expected to
  run: its script's typical duration grown with its GPUs (the same line in
  the same batch script, whatever this run's jitter), or its own duration
  without scripts. A share ``limit_fixed_share`` of users never sets a
  limit and gets the site's default, ``limit_default_h`` (24 hours), unless
  a job needs more. Such limits rank jobs only coarsely (most short jobs ask
  for the same hour or two, and the default's users all alike), as the
  modal, round estimates of production logs do. With ``limit_per_user``
  a user does not even look at the script: they pick one rung once, the
  smallest that covers their factor times their typical job (the geometric
  mean of their scripts' typical durations, or the workload's median
  without scripts), and ask for it every time, for a job that would outrun
  it the smallest rung that lets it finish. Limits then say who submitted
  a job more than how long it runs. With ``limit_per_job`` each job gets a
  factor of its own from the range instead, times its own runtime, and the
  user rounds that up to one of a few round values, ``MODAL_LIMITS_H`` (15
  minutes, 1 hour, 4 hours, 1 day) or the partition's maximum,
  ``limit_default_h``, which is also what the users who set no limit get:
  limits then err per job, and are modal as in production logs.
* **Debugging bursts** (``fail_share`` > 0, with scripts): a share of the
  jobs are failed runs. Before some runs of a script, its user first
  submits it 1 to ``fail_burst`` times (equally often) with a bug: each
  such run has the same user, name, size, priority and limit as the run
  that follows (the user changes the code, not the request), and ends
  after a failure time drawn once per burst, uniform from 1 minute to
  ``fail_within_s`` (never longer than the fixed run), times 1 +-
  ``script_jitter`` per run: the same bug fails at about the same point.
  The burst is closed-loop (``TraceJob.after``): its first run arrives at
  the drawn arrival time, and each later run, the fixed one last, follows
  the run before it, submitted only once that one has ended and its user
  has looked at the failure and fixed the code, a think time drawn
  log-uniformly from ``THINK_MIN_S`` (1 minute) to ``think_max_s`` (20
  minutes, the think time past which Zakay and Feitelson, JSSPP 2012, end a
  user's session: a resubmission after longer is no longer the same sitting
  of debugging). Its ``submit_time`` is the burst's first run's, the
  earliest it can go in. Bursts precede a share of the runs chosen so that
  failed runs are ``fail_share`` of the jobs; arrivals are rescaled to keep
  ``load``, and the ``n_jobs`` first submitted are kept (a follower after
  what it follows). A failed run's ``labels["status"]`` is ``Failed``, as
  PAI's trace says (for reports: no policy can know it at submission).
* **MIG** for ``mig_share`` of the jobs (0 by default): one instance of a
  profile drawn equally often from ``mig_profile`` (``|``-separated, such as
  ``1g.10gb|3g.40gb``) instead of the drawn size, counted in the offered load
  as the profile's share of the 7 compute slices, with CPU and memory in
  that proportion.

The same arguments and seed always give the same jobs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpufleet.core.mig import COMPUTE_SLICES, unknown_profile
from gpufleet.core.model import MILLI, InvalidSpec, Request
from gpufleet.policies.validation import key_path, message
from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.record import PRIORITY_CLASSES, TraceJob, whole_gpus

FloatArray = NDArray[np.float64]

MAX_JOBS = 1_000_000
"""The most jobs one call generates: every job is drawn at once, so a typo of a
few zeros would otherwise ask numpy for terabytes."""

LIMIT_LADDER_H = (1, 2, 4, 8, 12, 24, 48, 72, 168)
"""The round time limits (hours) users with limit habits pick from."""

THINK_MIN_S = 60
"""The shortest think time before a debugging burst's next run: reading the error and
resubmitting takes a minute at least."""

MODAL_LIMITS_H = (0.25, 1, 4, 24)
"""The round limits (hours) below the partition's maximum that ``limit_per_job`` rounds up to."""

DEFAULT_SIZE_MIX: dict[float, float] = {
    0.25: 0.08,
    0.5: 0.12,
    1: 0.45,
    2: 0.10,
    4: 0.10,
    8: 0.09,
    16: 0.03,
    32: 0.02,
    64: 0.01,
}


class WorkloadShape(BaseModel):
    """The knobs of the synthetic workload; see the module docstring for each."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    load: float = Field(0.85, gt=0, le=10, description="offered GPU load, 1.0 = cluster-sized")
    gpus_per_node: int = Field(8, gt=0)
    size_mix: dict[float, float] = Field(default_factory=lambda: dict(DEFAULT_SIZE_MIX))
    duration_median_s: float = Field(1200, gt=0)
    duration_sigma: float = Field(1.8, ge=0)
    size_duration_exponent: float = Field(0.3, ge=0)
    min_duration_s: int = Field(10, gt=0)
    max_duration_s: int = Field(7 * 86400, gt=0)
    users: int = Field(100, gt=0)
    accounts: int = Field(10, gt=0)
    user_skew: float = Field(1.1, ge=0)
    priority_mix: dict[str, float] = Field(
        default_factory=lambda: {"high": 0.1, "normal": 0.7, "low": 0.2}
    )
    limit_overestimate: float = Field(4.0, ge=1)
    limit_overestimate_min: float = Field(1.0, ge=1)
    limit_habits: bool = False
    limit_per_user: bool = False
    limit_per_job: bool = False
    limit_fixed_share: float = Field(0.25, ge=0, le=1)
    limit_default_h: int = Field(24, gt=0)
    scripts: int = Field(0, ge=0)
    script_jitter: float = Field(0.1, ge=0, lt=1)
    fail_share: float = Field(0.0, ge=0, lt=1)
    fail_burst: int = Field(3, gt=0)
    fail_within_s: int = Field(600, ge=60)
    think_max_s: int = Field(1200, ge=THINK_MIN_S)
    checkpoint_interval_s: int = Field(1800, gt=0)
    checkpoint_share: float = Field(0.5, ge=0, le=1)
    cpu_milli_per_gpu: int = Field(8000, ge=0)
    memory_mib_per_gpu: int = Field(64 * 1024, ge=0)
    partition: str = "gpu"
    mig_share: float = Field(0.0, ge=0, le=1)
    mig_profile: str = ""
    daily_swing: float = Field(0.0, ge=0, lt=1)
    peak_hour: float = Field(14.0, ge=0, lt=24)

    @property
    def mig_profiles(self) -> list[str]:
        return [p.strip() for p in self.mig_profile.split("|") if p.strip()]

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadShape:
        for name in self.mig_profiles:
            if problem := unknown_profile(name):
                raise ValueError(f"mig_profile: {problem}")
        if self.mig_share and not self.mig_profiles:
            raise ValueError("mig_profile: required when mig_share is above 0")
        for size, weight in self.size_mix.items():
            fraction = 0 < size < 1 and 0 < round(size * MILLI) < MILLI
            whole = size >= 1 and size == int(size)
            if not (fraction or whole):
                raise ValueError(f"size_mix: {size} is neither a GPU fraction nor whole GPUs")
            if whole and size > self.gpus_per_node and size % self.gpus_per_node:
                raise ValueError(
                    f"size_mix: {size} GPUs is not whole {self.gpus_per_node}-GPU nodes"
                )
            if weight < 0:
                raise ValueError(f"size_mix: weight of {size} is negative")
        for name, weight in self.priority_mix.items():
            if name not in PRIORITY_CLASSES or weight < 0:
                known = ", ".join(PRIORITY_CLASSES)
                raise ValueError(f"priority_mix: {name}={weight} (classes: {known}, weights >= 0)")
        if sum(self.priority_mix.values()) <= 0:
            raise ValueError("priority_mix: weights sum to zero")
        if self.limit_overestimate_min > self.limit_overestimate:
            raise ValueError("limit_overestimate_min: must not exceed limit_overestimate")
        if self.limit_per_user and not self.limit_habits:
            raise ValueError("limit_per_user: needs limit_habits")
        if self.limit_per_job and not self.limit_habits:
            raise ValueError("limit_per_job: needs limit_habits")
        if self.limit_per_job and self.limit_per_user:
            raise ValueError("limit_per_job: not with limit_per_user")
        if self.fail_share and not self.scripts:
            raise ValueError("fail_share: needs scripts (a burst reruns one)")
        if self.min_duration_s > self.max_duration_s:
            raise ValueError("min_duration_s: must not exceed max_duration_s")
        return self


def generate(
    n_jobs: int, *, seed: int, gpus_total: int, shape: WorkloadShape | None = None
) -> list[TraceJob]:
    """``n_jobs`` jobs for a cluster of ``gpus_total`` GPUs, by submit time.

    Raises InvalidSpec (a ValueError) when the counts are not positive, ``n_jobs`` is over
    ``MAX_JOBS``, or no size of the mix fits the cluster.
    """
    if n_jobs <= 0:
        raise InvalidSpec("n_jobs", f"must be more than zero, got {n_jobs}")
    if n_jobs > MAX_JOBS:
        raise InvalidSpec("n_jobs", f"must be at most {MAX_JOBS}, got {n_jobs}")
    if gpus_total <= 0:
        raise InvalidSpec("gpus_total", f"must be more than zero, got {gpus_total}")
    shape = shape or WorkloadShape()
    rng = np.random.default_rng(seed)
    mix = {size: w for size, w in sorted(shape.size_mix.items()) if size <= gpus_total and w > 0}
    if not mix:
        raise InvalidSpec("size_mix", f"no size with weight fits {gpus_total} GPUs")
    sizes = np.array(list(mix), dtype=np.float64)
    size_index = rng.choice(len(sizes), size=n_jobs, p=_normalised(list(mix.values())))
    gpus = sizes[size_index]
    mig_names = shape.mig_profiles
    mig_pick = np.full(n_jobs, -1, dtype=np.int64)
    if shape.mig_share:  # drawn only then, so the other jobs stay as they were
        chosen = rng.random(n_jobs) < shape.mig_share
        mig_pick = np.where(chosen, rng.integers(len(mig_names), size=n_jobs), -1)
        slices = np.array([_slices(p) for p in mig_names], dtype=np.float64) / COMPUTE_SLICES
        gpus = np.where(chosen, slices[np.maximum(mig_pick, 0)], gpus)

    median = shape.duration_median_s * np.maximum(gpus, 1.0) ** shape.size_duration_exponent
    raw = median * np.exp(shape.duration_sigma * rng.standard_normal(n_jobs))
    durations = np.clip(np.rint(raw), shape.min_duration_s, shape.max_duration_s).astype(np.int64)

    # Rate that makes GPU-seconds asked per second equal load x capacity.
    rate = shape.load * gpus_total / float(np.mean(gpus * durations))
    submits = np.floor(np.cumsum(rng.exponential(1 / rate, size=n_jobs))).astype(np.int64)

    users = rng.choice(shape.users, size=n_jobs, p=_zipf(shape.users, shape.user_skew))
    account_of_user = rng.choice(
        shape.accounts, size=shape.users, p=_zipf(shape.accounts, shape.user_skew)
    ).tolist()

    classes = list(shape.priority_mix)
    priority = rng.choice(
        len(classes), size=n_jobs, p=_normalised(list(shape.priority_mix.values()))
    )
    factor = rng.uniform(shape.limit_overestimate_min, shape.limit_overestimate, size=n_jobs)
    script = np.full(n_jobs, -1, dtype=np.int64)
    expected = durations.astype(np.float64)  # what a user expects a job to run
    usual = np.full(shape.users, shape.duration_median_s)  # a user's typical job
    if shape.scripts:  # drawn only then, so the other workloads stay as they were
        script = rng.integers(shape.scripts, size=n_jobs)
        typical = shape.duration_median_s * np.exp(
            shape.duration_sigma * rng.standard_normal((shape.users, shape.scripts))
        )
        jitter = rng.uniform(1 - shape.script_jitter, 1 + shape.script_jitter, size=n_jobs)
        raw = typical[users, script] * np.maximum(gpus, 1.0) ** shape.size_duration_exponent
        expected = np.clip(raw, shape.min_duration_s, shape.max_duration_s)
        usual = np.exp(np.mean(np.log(typical), axis=1))
        was = float(np.mean(gpus * durations))
        durations = np.clip(np.rint(raw * jitter), shape.min_duration_s, shape.max_duration_s)
        durations = durations.astype(np.int64)
        # The same Poisson arrivals at the rate that keeps the offered load.
        submits = np.floor(submits * float(np.mean(gpus * durations)) / was).astype(np.int64)
    if shape.daily_swing:
        submits = _daily(submits, shape.daily_swing, shape.peak_hour)
    if shape.limit_habits:
        if shape.limit_per_user:
            expected = usual[users]
        limits = _habit_limits(rng, shape, users, durations, expected)
    else:
        limits = (np.ceil(durations * factor / 3600) * 3600).astype(np.int64)
    checkpoints = (durations > shape.checkpoint_interval_s) & (
        rng.random(n_jobs) < shape.checkpoint_share
    )
    failed = np.zeros(n_jobs, dtype=np.bool_)
    follows = np.full(n_jobs, -1, dtype=np.int64)
    think = np.zeros(n_jobs, dtype=np.int64)
    if shape.fail_share:  # drawn only then, so the other workloads stay as they were
        bursts = _debug_bursts(rng, shape, n_jobs, gpus, submits, durations, checkpoints)
        copies, submits, durations, checkpoints, failed, follows, think = bursts
        size_index, mig_pick, users, priority, limits, script = (
            column[copies] for column in (size_index, mig_pick, users, priority, limits, script)
        )

    # Python values and names built once: indexing numpy per job costs more than the draws.
    requests = [_request(size, shape) for size in mix]
    mig_requests = [_mig_request(name, shape) for name in mig_names]
    user_names = [f"user{u:0{len(str(shape.users - 1))}d}" for u in range(shape.users)]
    account_names = [f"acct{a:0{len(str(shape.accounts - 1))}d}" for a in range(shape.accounts)]
    id_width = len(str(n_jobs - 1))
    checkpoint = shape.checkpoint_interval_s
    rows = zip(
        submits.tolist(),
        durations.tolist(),
        size_index.tolist(),
        mig_pick.tolist(),
        users.tolist(),
        priority.tolist(),
        limits.tolist(),
        checkpoints.tolist(),
        script.tolist(),
        failed.tolist(),
        follows.tolist(),
        think.tolist(),
        strict=True,
    )
    return [
        TraceJob(
            id=f"syn{i:0{id_width}d}",
            submit_time=submit,
            duration_s=duration,
            request=mig_requests[mig] if mig >= 0 else requests[size],
            user=user_names[user],
            account=account_names[account_of_user[user]],
            qos=classes[cls],
            partition=shape.partition,
            time_limit_s=limit,
            preemptible=classes[cls] == "low",
            priority_class=classes[cls],
            checkpoint_interval_s=checkpoint if checkpointed else None,
            labels=({"name": f"script{k}"} | ({"status": "Failed"} if fails else {}))
            if k >= 0
            else {},
            after=f"syn{previous:0{id_width}d}" if previous >= 0 else None,
            think_s=pause,
        )
        for i, (
            submit, duration, size, mig, user, cls, limit, checkpointed, k, fails, previous, pause
        ) in enumerate(rows)
    ]


def generate_from_options(text: str) -> list[TraceJob]:
    """Jobs from ``key=value`` pairs separated by commas, as in a trace spec.

    ``n_jobs``, ``seed`` and ``gpus_total`` are required; any scalar
    ``WorkloadShape`` field may follow (``load=0.9,users=50``). Raises
    TraceError naming the bad option, or one given twice.
    """
    options: dict[str, str] = {}
    for pair in filter(None, text.split(",")):
        key, eq, value = pair.partition("=")
        if not eq:
            raise TraceError("synthetic", None, key.strip(), "expected key=value")
        if key.strip() in options:
            raise TraceError("synthetic", None, key.strip(), "given twice")
        options[key.strip()] = value.strip()
    counts = {}
    for key in ("n_jobs", "seed", "gpus_total"):
        if key not in options:
            raise TraceError("synthetic", None, key, "required")
        try:
            counts[key] = int(options.pop(key))
        except ValueError:
            raise TraceError("synthetic", None, key, "must be a whole number") from None
    try:
        shape = WorkloadShape.model_validate(options)
        return generate(
            counts["n_jobs"], seed=counts["seed"], gpus_total=counts["gpus_total"], shape=shape
        )
    except ValidationError as e:
        first = e.errors()[0]
        field = key_path(options, first["loc"]) or None
        raise TraceError("synthetic", None, field, message(WorkloadShape, first)) from None
    except InvalidSpec as e:
        raise TraceError("synthetic", None, e.field, e.reason) from None


DAY_S = 86_400


def _daily(submits: NDArray[np.int64], swing: float, peak_hour: float) -> NDArray[np.int64]:
    """Arrivals of a constant rate moved so that the rate follows the day (module docstring).

    With the cumulative rate L(t) = t + a D / 2 pi (sin(w t - p) + sin p), w = 2 pi / D,
    an arrival at u of the constant-rate process moves to L^-1(u) (L grows strictly
    for a < 1, so the order is kept).
    """
    phase = 2 * np.pi * peak_hour / 24
    horizon = float(submits[-1]) * 1.5 + 2 * DAY_S
    t = np.arange(0.0, horizon, 60.0)
    cumulative = t + swing * DAY_S / (2 * np.pi) * (
        np.sin(2 * np.pi * t / DAY_S - phase) + np.sin(phase)
    )
    moved: NDArray[np.int64] = np.floor(np.interp(submits, cumulative, t)).astype(np.int64)
    return moved


def _request(size: float, shape: WorkloadShape) -> Request:
    """One task of a job of ``size`` GPUs, with CPU and memory in proportion."""
    if size < 1:
        milli = round(size * MILLI)
        return Request(
            gpu_milli=milli,
            cpu_milli=shape.cpu_milli_per_gpu * milli // MILLI,
            memory_mib=shape.memory_mib_per_gpu * milli // MILLI,
        )
    gpus = int(size)
    per_task = min(gpus, shape.gpus_per_node)
    return whole_gpus(
        gpus,
        shape.gpus_per_node,
        cpu_milli=shape.cpu_milli_per_gpu * per_task,
        memory_mib=shape.memory_mib_per_gpu * per_task,
    )


def _slices(profile: str) -> int:
    """Compute slices of a MIG profile name such as ``3g.40gb``."""
    return int(profile.split("g.", 1)[0])


def _mig_request(profile: str, shape: WorkloadShape) -> Request:
    """One instance of ``profile``, with CPU and memory for its share of a GPU."""
    slices = _slices(profile)
    return Request(
        mig_profile=profile,
        mig_count=1,
        cpu_milli=shape.cpu_milli_per_gpu * slices // COMPUTE_SLICES,
        memory_mib=shape.memory_mib_per_gpu * slices // COMPUTE_SLICES,
    )


def _habit_limits(
    rng: np.random.Generator,
    shape: WorkloadShape,
    users: NDArray[np.int64],
    durations: NDArray[np.int64],
    expected: FloatArray,
) -> NDArray[np.int64]:
    """Round limits from each user's habits (see the module docstring), never below the
    job's duration: a job its limit would cut short is not what a user resubmits."""
    low, high = shape.limit_overestimate_min, shape.limit_overestimate
    if shape.limit_per_job:
        factor = rng.uniform(low, high, len(durations))
        hours = [h for h in MODAL_LIMITS_H if h < shape.limit_default_h] + [shape.limit_default_h]
        need = factor * durations
    else:
        factor = rng.uniform(low, high, shape.users)[users]
        hours = list(LIMIT_LADDER_H)
        need = np.maximum(factor * expected, durations)
    fixed = rng.random(shape.users) < shape.limit_fixed_share
    ladder = np.array(hours, dtype=np.float64) * 3600
    rung = np.minimum(np.searchsorted(ladder, need), len(ladder) - 1)
    limits = np.maximum(ladder[rung], durations)
    # A user who sets no limit gets the default, and says more only when a job needs more.
    limits = np.where(fixed[users], np.maximum(limits, shape.limit_default_h * 3600), limits)
    result: NDArray[np.int64] = limits.astype(np.int64)
    return result


Bursts = tuple[
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.int64],
    NDArray[np.bool_],
    NDArray[np.bool_],
    NDArray[np.int64],
    NDArray[np.int64],
]
"""Per kept job: the drawn job it copies, submit time, duration, whether it checkpoints,
whether it is a failed run, the position of the job it follows (-1: none), think time."""


def _debug_bursts(
    rng: np.random.Generator,
    shape: WorkloadShape,
    n_jobs: int,
    gpus: FloatArray,
    submits: NDArray[np.int64],
    durations: NDArray[np.int64],
    checkpoints: NDArray[np.bool_],
) -> Bursts:
    """Failed runs before some jobs (see the module docstring), the ``n_jobs`` first
    submitted, by submit time (``Bursts``)."""
    bursts = rng.integers(1, shape.fail_burst + 1, size=n_jobs)
    # A job has a burst with the chance that makes failed runs fail_share of all.
    chance = min(1.0, shape.fail_share / (1 - shape.fail_share) / float(np.mean(bursts)))
    bursts = np.where(rng.random(n_jobs) < chance, bursts, 0)
    fail_at = np.minimum(rng.uniform(60, shape.fail_within_s, n_jobs), durations)
    copies = np.repeat(np.arange(n_jobs), bursts + 1)
    # How many runs of its burst are still to come: 0 for the fixed run.
    to_come = np.cumsum(bursts + 1)[copies] - 1 - np.arange(len(copies))
    failed = to_come > 0
    jitter = rng.uniform(1 - shape.script_jitter, 1 + shape.script_jitter, size=len(copies))
    ran = np.where(failed, fail_at[copies] * jitter, durations[copies])
    ran = np.clip(np.rint(ran), shape.min_duration_s, durations[copies]).astype(np.int64)
    # The same Poisson arrivals stretched to keep the offered load with the failed runs.
    stretch = float(np.sum(gpus[copies] * ran)) / float(np.sum(gpus * durations))
    # Every run of a burst may go in from the burst's arrival; all but the first follow
    # the run before (the rows of one burst are consecutive), after a think time.
    at = np.floor(submits * stretch).astype(np.int64)[copies]
    first = np.r_[True, copies[1:] != copies[:-1]]
    low, high = np.log(THINK_MIN_S), np.log(shape.think_max_s)
    think = np.where(first, 0, np.rint(np.exp(rng.uniform(low, high, len(copies)))))
    order = np.argsort(at, kind="stable")[:n_jobs]  # stable: a burst's runs stay in order
    position = np.full(len(copies), -1, dtype=np.int64)
    position[order] = np.arange(len(order))
    previous = np.where(first, -1, np.arange(len(copies)) - 1)
    follows = np.where(first, -1, position[np.maximum(previous, 0)])[order]
    checkpointed = checkpoints[copies] & ~failed
    return (
        copies[order],
        at[order],
        ran[order],
        checkpointed[order],
        failed[order],
        follows,
        think.astype(np.int64)[order],
    )


def _normalised(weights: list[float]) -> FloatArray:
    array = np.asarray(weights, dtype=np.float64)
    result: FloatArray = array / array.sum()
    return result


def _zipf(n: int, skew: float) -> FloatArray:
    """Probabilities of ranks 1..n under a Zipf law: rank r has weight r ** -skew."""
    return _normalised([rank**-skew for rank in range(1, n + 1)])
