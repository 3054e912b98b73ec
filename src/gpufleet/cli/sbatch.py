"""sbatch-style options and script directives, turned into a ``JobSubmit``.

``parse_submission`` follows sbatch's rules:

- directives (``#SBATCH`` or ``#GPUFLEET`` and then options, as on the
  command line) are read from the top of the script up to the first line
  that is neither blank nor a comment; later ones are ordinary comments.
  ``##SBATCH`` and ``# SBATCH`` are comments too, which is how people
  switch a directive off. A ``#`` after whitespace starts a trailing comment.
- command-line options override directives: directives are applied first.
- ``--opt=value``, ``--opt value``, ``-o value`` and ``-ovalue`` all work.

Every option sets one thing and the last setting wins: the GPU request
(``--gres``, ``--gpus``, ``--gpus-per-node``, ``--gpu-fraction``,
``--gpu-milli``, ``--mig``) is one setting, and so is the memory request
(``--mem``, ``--mem-per-cpu``, ``--mem-per-gpu``). The settings that depend
on others (GPUs over nodes, memory per CPU) are resolved once, at the end.

Nothing is ignored: an unknown option, a refused Slurm option and a bad
value all raise ``SbatchError``, one line naming the option and, for a
directive, ``SCRIPT:LINE``. This module does no I/O of its own: the caller
passes the script loader, the working directory, the environment and the
time. docs/cli.md has the table of options and how each maps.
"""

from __future__ import annotations

import difflib
import posixpath
import re
import shlex
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from pydantic import ValidationError

from gpufleet.adapters.inventory import expand_hostlist
from gpufleet.api.schemas import (
    MAX_ARRAY_TASKS,
    MAX_CPUS_PER_TASK,
    MAX_GPUS_PER_NODE,
    MAX_MEM_MIB,
    MAX_NODES,
    MAX_SCRIPT_BYTES,
    MAX_TIME_S,
    JobSubmit,
    unknown_output_pattern,
)
from gpufleet.core.mig import unknown_profile

MAGIC_WORDS = ("#SBATCH", "#GPUFLEET")
DEFAULT_NICE = 100
"""What a bare ``--nice`` adds, as in Slurm."""
MAX_NICE = 10_000
"""``--nice`` takes -MAX_NICE..MAX_NICE, the API's range."""
DEFAULT_SIGNAL_TIME_S = 60
CREDENTIAL_VARIABLES = frozenset({"GPUFLEET_TOKEN"})
"""Never copied into a job's environment by ``--export=ALL``: the store would keep them."""


class SbatchError(ValueError):
    """A submission that cannot be built; the message is one line naming the option."""


class _Bad(ValueError):
    """A bad value; the caller prefixes where it came from."""


Arg = Literal["required", "none", "optional"]
GpuKind = Literal["per_node", "total", "milli", "mig"]
MemKind = Literal["node", "cpu", "gpu"]


@dataclass(frozen=True)
class _Gpu:
    kind: GpuKind
    count: int
    gpu_type: str | None
    where: str
    mig_profile: str | None = None


@dataclass
class _Draft:
    """What the options said so far; ``origin`` remembers where each field was set."""

    fields: dict[str, object] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    gpu: _Gpu | None = None
    mem: tuple[MemKind, int, str] | None = None
    nodes: tuple[int, str] | None = None
    ntasks: tuple[int, str] | None = None
    ntasks_per_node: tuple[int, str] | None = None
    export: tuple[str, str] = ("ALL", "--export")
    wrap: str | None = None

    def set(self, name: str, value: object, where: str) -> None:
        self.fields[name] = value
        self.origin[name] = where


@dataclass(frozen=True)
class _Context:
    cwd: str
    environ: Mapping[str, str]
    now: datetime


Apply = Callable[[_Draft, str | None, str, _Context], None]
"""Record one option's value in the draft; raise _Bad for a bad value."""


@dataclass(frozen=True)
class _Option:
    long: str
    short: str | None
    arg: Arg
    apply: Apply
    help: str


# ---------------------------------------------------------------- values


_DIGITS = re.compile(r"[0-9]{1,18}")


def _int(text: str, low: int, high: int) -> int:
    """A plain decimal integer in ``low..high`` (no underscores, no sign but a minus
    where ``low`` is negative)."""
    if _DIGITS.fullmatch(text.removeprefix("-") if low < 0 else text) is None:
        raise _Bad(f"{text!r} is not a whole number")
    value = int(text)
    if not low <= value <= high:
        raise _Bad(f"{value} is out of range {low}..{high}")
    return value


_TIME_FORMS = (
    # (pattern, seconds per group); Slurm's forms, minutes alone being the bare one
    (re.compile(r"(\d{1,9})"), (60,)),
    (re.compile(r"(\d{1,9}):(\d{1,2})"), (60, 1)),
    (re.compile(r"(\d{1,9}):(\d{1,2}):(\d{1,2})"), (3600, 60, 1)),
    (re.compile(r"(\d{1,6})-(\d{1,2})"), (86400, 3600)),
    (re.compile(r"(\d{1,6})-(\d{1,2}):(\d{1,2})"), (86400, 3600, 60)),
    (re.compile(r"(\d{1,6})-(\d{1,2}):(\d{1,2}):(\d{1,2})"), (86400, 3600, 60, 1)),
)


def parse_time(text: str) -> int:
    """A Slurm time limit in seconds; 0 (no limit) for ``UNLIMITED``, ``INFINITE`` or ``0``.

    Forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM and D-HH:MM:SS.
    """
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return 0
    for pattern, scale in _TIME_FORMS:
        match = pattern.fullmatch(text)
        if match is not None:
            seconds = sum(int(g) * s for g, s in zip(match.groups(), scale, strict=True))
            if seconds > MAX_TIME_S:
                raise _Bad(f"{text!r} is longer than the {MAX_TIME_S // 86400}-day maximum")
            return seconds  # Slurm: a limit of zero means none, as the API's 0
    raise _Bad(
        f"{text!r} is not a time: use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS "
        "or UNLIMITED"
    )


_MEMORY = re.compile(r"([0-9]{1,15})([KMGT]?)B?", re.IGNORECASE)
_KIB_PER_UNIT = {"K": 1, "M": 1024, "G": 1024**2, "T": 1024**3}


def parse_memory(text: str) -> int:
    """A size in MiB: a number with an optional K, M, G or T suffix (M without one)."""
    match = _MEMORY.fullmatch(text)
    if match is None:
        raise _Bad(f"{text!r} is not a size like 4096, 500M, 16G or 1T")
    mib = -(-int(match[1]) * _KIB_PER_UNIT[(match[2] or "M").upper()] // 1024)  # round K up
    if mib == 0:
        raise _Bad("0 (all of a node's memory) is not supported; use --exclusive")
    if mib > MAX_MEM_MIB:
        raise _Bad(f"{text!r} is more than the {MAX_MEM_MIB // (1024 * 1024)} TiB maximum")
    return mib


_ARRAY_PART = re.compile(r"(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?")


def parse_array(text: str) -> str:
    """An array spec (``0-999%50``, ``1,3,5``, ``0-15:4``), checked and returned.

    Indices stay below ``MAX_ARRAY_TASKS``, which also bounds the task count.
    """
    spec, percent, limit = text.partition("%")
    if percent:
        _int(limit, 1, MAX_ARRAY_TASKS)
    for part in spec.split(","):
        match = _ARRAY_PART.fullmatch(part)
        if match is None:
            raise _Bad(f"{part!r} is not an index, a range like 0-15 or a stepped range 0-15:4")
        low = int(match[1])
        high = int(match[2] or low)
        step = int(match[3] or 1)
        if high < low:
            raise _Bad(f"range {part!r} runs backwards")
        if step == 0:
            raise _Bad(f"range {part!r} has a step of 0")
        if high >= MAX_ARRAY_TASKS:
            raise _Bad(f"index {high} is above the maximum {MAX_ARRAY_TASKS - 1}")
    return text


_DEPENDENCY = re.compile(r"(afterok|afterany|afternotok)((?::\d{1,18}(?:_\d{1,9})?)+)")


def parse_dependency(text: str) -> str:
    """``afterok:1:2,afterany:3``, ``afternotok:4`` or ``singleton``, checked and returned."""
    if "?" in text:
        raise _Bad("any-of dependencies ('?') are not supported; ',' requires all of them")
    for part in text.split(","):
        if part == "singleton":
            continue
        if _DEPENDENCY.fullmatch(part) is None:
            kind = part.partition(":")[0]
            if kind in ("afterok", "afterany", "afternotok"):
                raise _Bad(f"{part!r}: give job ids like {kind}:123:124_7")
            raise _Bad(f"{part!r}: use afterok, afterany or afternotok with job ids, or singleton")
    return text


_BEGIN_OFFSET = re.compile(r"now(?:([+-])(\d{1,9})([a-z]*))?")
_OFFSET_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_BEGIN_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2}))?)?")
_BEGIN_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_BEGIN_WORDS = {"midnight": (0, 0), "noon": (12, 0), "fika": (15, 0), "teatime": (16, 0)}


def parse_begin(text: str, now: datetime) -> int:
    """A ``--begin`` time as Unix seconds, relative to ``now`` (timezone-aware).

    Forms: ``now[+-N[unit]]`` (seconds, minutes, hours, days or weeks; seconds
    when bare), ``YYYY-MM-DD[THH:MM[:SS]]``, ``HH:MM[:SS]`` (today, or
    tomorrow when that time has passed), ``midnight``, ``noon``, ``fika``,
    ``teatime``, ``today`` and ``tomorrow``, all in ``now``'s timezone.
    """
    lowered = text.lower()
    try:
        if (match := _BEGIN_OFFSET.fullmatch(lowered)) is not None:
            unit = _OFFSET_UNITS.get(match[3] or "")
            if unit is None:
                raise _Bad(f"{text!r}: unknown unit {match[3]!r} (seconds..weeks)")
            sign = -1 if match[1] == "-" else 1
            return int(now.timestamp()) + sign * int(match[2] or 0) * unit
        if (match := _BEGIN_DATE.fullmatch(text)) is not None:
            year, month, day, hour, minute, second = (int(g or 0) for g in match.groups())
            at = datetime(year, month, day, hour, minute, second, tzinfo=now.tzinfo)
            return int(at.timestamp())
        today = now.replace(hour=0, minute=0, second=0, microsecond=0)
        if lowered == "today":
            return int(today.timestamp())
        if lowered == "tomorrow":
            return int((today + timedelta(days=1)).timestamp())
        if (match := _BEGIN_CLOCK.fullmatch(text)) is not None:
            clock = (int(match[1]), int(match[2]), int(match[3] or 0))
        elif lowered in _BEGIN_WORDS:
            clock = (*_BEGIN_WORDS[lowered], 0)
        else:
            raise _Bad(
                f"{text!r} is not a time: use now+1hour, YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], "
                "midnight, noon, teatime, today or tomorrow"
            )
        at = today.replace(hour=clock[0], minute=clock[1], second=clock[2])
        if at <= now:
            at += timedelta(days=1)
        return int(at.timestamp())
    except (ValueError, OverflowError) as e:
        if isinstance(e, _Bad):
            raise
        raise _Bad(f"{text!r} is not a valid date or time ({e})") from None


_SIGNAL = re.compile(r"(?:([A-Z]+):)?([A-Z0-9]{1,12})(?:@(\d{1,9}))?")


def parse_signal(text: str) -> str:
    """``[B:]SIG[@seconds]`` with SIG a name (USR1, SIGUSR1) or number; returned normalised."""
    match = _SIGNAL.fullmatch(text.upper())
    if match is None:
        raise _Bad(f"{text!r} is not [B:]SIG[@seconds], like B:USR1@90")
    scope, sig, at = match.groups()
    if scope not in (None, "B"):
        raise _Bad(f"{scope}: is not supported; only B: (the batch shell alone) is")
    if sig.isdigit():
        number = _int(sig, 1, 64)
        try:
            name = signal.Signals(number).name[3:]
        except ValueError:  # a real-time signal without a name of its own
            name = str(number)
    else:
        name = sig.removeprefix("SIG")
        if "SIG" + name not in signal.Signals.__members__:
            raise _Bad(f"{sig!r} is not a signal name")
    seconds = DEFAULT_SIGNAL_TIME_S if at is None else _int(at, 0, 65535)
    return f"{'B:' if scope else ''}{name}@{seconds}"


_GPU_TYPE = re.compile(r"[A-Za-z0-9][\w.-]{0,127}")


def _typed_count(text: str, high: int) -> tuple[str | None, int]:
    """``[type:]N``: a GPU type (or None) and a count in ``0..high``."""
    gpu_type, colon, count = text.rpartition(":")
    if colon and _GPU_TYPE.fullmatch(gpu_type) is None:
        raise _Bad(f"{gpu_type!r} is not a GPU type")
    return (gpu_type or None), _int(count, 0, high)


def parse_gres(text: str) -> tuple[str | None, int] | None:
    """``gpu``, ``gpu:N``, ``gpu:TYPE`` or ``gpu:TYPE:N`` per node; None for ``none``."""
    if text == "none":
        return None
    parts = text.split(",")
    if len(parts) > 1:
        raise _Bad(f"{text!r}: only one GRES, gpu, is supported")
    name, _, rest = text.partition(":")
    if name != "gpu":
        raise _Bad(f"{name!r}: only the gpu GRES is supported")
    if not rest:
        return None, 1
    if ":" not in rest and _DIGITS.fullmatch(rest) is None:
        if _GPU_TYPE.fullmatch(rest) is None:
            raise _Bad(f"{text!r} is not gpu[:type][:count]")
        return rest, 1
    return _typed_count(rest, MAX_GPUS_PER_NODE)


_FRACTION = re.compile(r"0?\.\d{1,6}")


def parse_fraction(text: str) -> tuple[str | None, int]:
    """``[type:]F`` with 0 < F < 1, as milli-GPU."""
    gpu_type, colon, number = text.rpartition(":")
    if colon and _GPU_TYPE.fullmatch(gpu_type) is None:
        raise _Bad(f"{gpu_type!r} is not a GPU type")
    if _FRACTION.fullmatch(number) is None:
        raise _Bad(f"{number!r} is not a fraction between 0 and 1, like 0.25")
    milli = round(float(number) * 1000)
    if not 1 <= milli <= 999:
        raise _Bad(f"{number!r} rounds to {milli} milli-GPU; use 0.001..0.999 or --gpus")
    return gpu_type or None, milli


def parse_mig(text: str) -> tuple[str, int]:
    """``PROFILE[:count]``: a known MIG profile name and how many instances (default 1)."""
    name, colon, count = text.partition(":")
    if problem := unknown_profile(name):
        raise _Bad(problem)
    return name, _int(count, 1, 56) if colon else 1


_NODES = re.compile(r"(\d{1,9})(?:-(\d{1,9}))?")


def parse_nodes(text: str) -> int:
    """``N`` or ``N-M``; a range asks for its minimum (gpufleet places a fixed count)."""
    match = _NODES.fullmatch(text)
    if match is None:
        raise _Bad(f"{text!r} is not a node count N or a range N-M")
    low = _int(match[1], 1, MAX_NODES)
    if match[2] is not None and int(match[2]) < low:
        raise _Bad(f"range {text!r} runs backwards")
    return low


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_export(text: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The job's environment for an ``--export`` value.

    ``ALL`` copies the submitting environment (less ``CREDENTIAL_VARIABLES``),
    ``NONE`` copies nothing, and ``NAME`` or ``NAME=value`` entries add
    variables: without ``ALL`` they are the whole environment, as in Slurm.
    """
    env: dict[str, str] = {}
    keywords = set()
    for entry in text.split(","):
        name, equals, value = entry.partition("=")
        if not equals and name in ("ALL", "NONE"):
            keywords.add(name)
        elif _VARIABLE.fullmatch(name) is None:
            raise _Bad(f"{entry!r} is not ALL, NONE, NAME or NAME=value")
        elif equals:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
        else:
            raise _Bad(f"{name} is not set in the submitting environment")
    if keywords == {"ALL", "NONE"}:
        raise _Bad("ALL and NONE contradict each other")
    if "ALL" in keywords:
        copied = {k: v for k, v in environ.items() if k not in CREDENTIAL_VARIABLES}
        env = copied | env
    return env


def _output_path(text: str) -> str:
    bad = unknown_output_pattern(text)  # the API's own check
    if bad is not None:
        raise _Bad(
            f"{bad} is not a known pattern (%j job id, %A array job id, "
            "%a array index, %x name, %u user, %% a percent sign)"
        )
    if not text:
        raise _Bad("an empty path")
    return text


_CONSTRAINT = re.compile(r"[\w.-]+(?:[&|][\w.-]+)*")


def _hosts(text: str) -> list[str]:
    if "/" in text:
        raise _Bad(f"{text!r}: node list files are not supported; give a hostlist")
    try:
        return expand_hostlist(text)
    except ValueError as e:
        raise _Bad(str(e)) from None


# ---------------------------------------------------------------- the option table


def _field(name: str, convert: Callable[[str], object] = str) -> Apply:
    def apply(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
        assert value is not None
        draft.set(name, convert(value), where)

    return apply


def _flag(name: str, setting: object) -> Apply:
    def apply(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
        draft.set(name, setting, where)

    return apply


def _gpu(kind: GpuKind, parse: Callable[[str], tuple[str | None, int] | None]) -> Apply:
    def apply(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
        assert value is not None
        parsed = parse(value)
        draft.gpu = None if parsed is None else _Gpu(kind, parsed[1], parsed[0], where)

    return apply


def _mig(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    name, count = parse_mig(value)
    draft.gpu = _Gpu("mig", count, None, where, mig_profile=name)


def _mem(kind: MemKind) -> Apply:
    def apply(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
        assert value is not None
        draft.mem = (kind, parse_memory(value), where)

    return apply


def _nodes(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.nodes = (parse_nodes(value), where)


def _ntasks(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.ntasks = (_int(value, 1, MAX_CPUS_PER_TASK * MAX_NODES), where)


def _ntasks_per_node(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.ntasks_per_node = (_int(value, 1, MAX_CPUS_PER_TASK), where)


def _chdir(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    if not value:
        raise _Bad("an empty path")
    draft.set("workdir", posixpath.normpath(posixpath.join(ctx.cwd, value)), where)


def _begin(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.set("begin", max(0, parse_begin(value, ctx.now)), where)


def _time(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.set("time_limit_s", parse_time(value), where)


def _array(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.set("array", parse_array(value), where)


def _nice(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    if value is None:
        draft.set("nice", DEFAULT_NICE, where)
        return
    draft.set("nice", _int(value, -MAX_NICE, MAX_NICE), where)


def _exclusive(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    if value is not None:
        raise _Bad(f"={value}: only a plain --exclusive (whole nodes) is supported")
    draft.set("exclusive", True, where)


def _export(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    parse_export(value, ctx.environ)  # check now, so the error names this line
    draft.export = (value, where)


def _constraint(value: str) -> str:
    if _CONSTRAINT.fullmatch(value) is None:
        raise _Bad(f"{value!r}: give feature names joined by & (all) or | (any)")
    return value


def _text(value: str) -> str:
    if not value:
        raise _Bad("an empty value")
    return value


def _wrap(draft: _Draft, value: str | None, where: str, ctx: _Context) -> None:
    assert value is not None
    draft.wrap = value


OPTIONS: tuple[_Option, ...] = (
    _Option("job-name", "J", "required", _field("name"), "the job's name"),
    _Option("output", "o", "required", _field("stdout", _output_path), "stdout file"),
    _Option("error", "e", "required", _field("stderr", _output_path), "stderr file"),
    _Option("chdir", "D", "required", _chdir, "working directory (default: here)"),
    _Option("partition", "p", "required", _field("partition", _text), "partition"),
    _Option("qos", "q", "required", _field("qos", _text), "quality of service"),
    _Option("account", "A", "required", _field("account", _text), "account to charge"),
    _Option("nodes", "N", "required", _nodes, "node count N (N-M: the minimum)"),
    _Option("ntasks", "n", "required", _ntasks, "tasks: CPUs = tasks x cpus-per-task"),
    _Option("ntasks-per-node", None, "required", _ntasks_per_node, "tasks on each node"),
    _Option(
        "cpus-per-task",
        "c",
        "required",
        _field("cpus_per_task", lambda v: _int(v, 1, MAX_CPUS_PER_TASK)),
        "CPUs per task",
    ),
    _Option("mem", None, "required", _mem("node"), "memory per node (K/M/G/T, M if bare)"),
    _Option("mem-per-cpu", None, "required", _mem("cpu"), "memory per CPU"),
    _Option("mem-per-gpu", None, "required", _mem("gpu"), "memory per whole GPU"),
    _Option("gres", None, "required", _gpu("per_node", parse_gres), "gpu[:type][:N] per node"),
    _Option(
        "gpus",
        "G",
        "required",
        _gpu("total", lambda v: _typed_count(v, MAX_GPUS_PER_NODE * MAX_NODES)),
        "[type:]N GPUs in all, split evenly over the nodes",
    ),
    _Option(
        "gpus-per-node",
        None,
        "required",
        _gpu("per_node", lambda v: _typed_count(v, MAX_GPUS_PER_NODE)),
        "[type:]N GPUs on each node",
    ),
    _Option("gpu-fraction", None, "required", _gpu("milli", parse_fraction), "[type:]F of one GPU"),
    _Option(
        "gpu-milli",
        None,
        "required",
        _gpu("milli", lambda v: _typed_count(v, 999)),
        "[type:]N thousandths of one GPU",
    ),
    _Option("mig", None, "required", _mig, "PROFILE[:count] MIG instances, e.g. 1g.10gb"),
    _Option("time", "t", "required", _time, "time limit (minutes, HH:MM:SS, D-HH, UNLIMITED)"),
    _Option("array", "a", "required", _array, "array indices: 0-999%50, 1,3,5, 0-15:4"),
    _Option(
        "dependency",
        "d",
        "required",
        _field("dependency", parse_dependency),
        "afterok:ID[:ID],afterany:ID,afternotok:ID or singleton",
    ),
    _Option("exclusive", None, "optional", _exclusive, "whole nodes"),
    _Option("constraint", "C", "required", _field("constraint", _constraint), "node features"),
    _Option("nodelist", "w", "required", _field("nodelist", _hosts), "only these nodes"),
    _Option("exclude", "x", "required", _field("exclude", _hosts), "not these nodes"),
    _Option("begin", "b", "required", _begin, "not before: now+1hour, YYYY-MM-DDTHH:MM, HH:MM"),
    _Option("requeue", None, "none", _flag("requeue", True), "may be requeued (default)"),
    _Option("no-requeue", None, "none", _flag("requeue", False), "never requeue"),
    _Option("signal", None, "required", _field("signal", parse_signal), "[B:]SIG[@seconds]"),
    _Option("container", None, "required", _field("container", _text), "run in this image"),
    _Option(
        "checkpoint",
        None,
        "required",
        _field("checkpoint_s", lambda v: _int(v, 1, MAX_TIME_S)),
        "checkpoints every N seconds (touching $GPUFLEET_CHECKPOINT_MARK)",
    ),
    _Option("hold", "H", "none", _flag("hold", True), "submit held"),
    _Option("nice", None, "optional", _nice, "lower the priority by N (default 100)"),
    _Option("export", None, "required", _export, "ALL (default), NONE, NAME[=value],..."),
    _Option("wrap", None, "required", _wrap, "run this command line under /bin/sh"),
)
_LONG = {o.long: o for o in OPTIONS}
_SHORT = {o.short: o for o in OPTIONS if o.short}

REFUSED = {
    **dict.fromkeys(("mail-type", "mail-user"), "gpufleet sends no mail"),
    **dict.fromkeys(
        ("gpus-per-task", "cpus-per-gpu", "ntasks-per-gpu", "gpu-bind", "cpu-bind", "mem-bind"),
        "ask per node: --gpus-per-node, --cpus-per-task, --ntasks-per-node",
    ),
    **dict.fromkeys(
        ("sockets-per-node", "cores-per-socket", "threads-per-core", "hint", "distribution"),
        "gpufleet places CPUs by count only",
    ),
    "reservation": "the scheduler applies reservations by itself",
    "licenses": "gpufleet tracks no licenses",
    "open-mode": "the output mode is not configurable",
    "get-user-env": "use --export",
    "deadline": "gpufleet has no deadlines",
    "time-min": "gpufleet uses the fixed --time",
    "oversubscribe": "share a GPU with --gpu-fraction or --gpu-milli",
    "priority": "lower a job's priority with --nice",
}
"""Slurm options gpufleet knows and refuses, with what to do instead."""


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Setting:
    option: _Option
    value: str | None
    where: str


def _unknown(name: str, where: str) -> SbatchError:
    spelled = f"-{name}" if len(name) == 1 else f"--{name}"
    if name in REFUSED:
        return SbatchError(f"{where}{spelled}: not supported ({REFUSED[name]})")
    close = difflib.get_close_matches(name, list(_LONG), n=1)
    hint = f" (did you mean --{close[0]}?)" if close and len(name) > 1 else ""
    return SbatchError(f"{where}{spelled}: unknown option{hint}")


def _scan(tokens: Sequence[str], where: str) -> tuple[list[_Setting], list[str]]:
    """The option settings in ``tokens``, in order, and the other arguments.

    ``where`` prefixes every message (``job.sh:4: `` or nothing).
    """
    settings: list[_Setting] = []
    positional: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            positional.extend(tokens[i:])
            break
        if token.startswith("--"):
            name, equals, value = token[2:].partition("=")
            option = _LONG.get(name)
            if option is None:
                raise _unknown(name, where)
            spelled = f"--{name}"
            attached = value if equals else None
        elif token.startswith("-") and len(token) > 1:
            option = _SHORT.get(token[1])
            if option is None:
                raise _unknown(token[1], where)
            spelled = f"-{token[1]}"
            attached = token[2:] or None
        else:
            positional.append(token)
            continue
        if option.arg == "none" and attached is not None:
            raise SbatchError(f"{where}{spelled}: takes no value")
        if option.arg == "required" and attached is None:
            if i == len(tokens):
                raise SbatchError(f"{where}{spelled}: needs a value")
            attached = tokens[i]
            i += 1
        settings.append(_Setting(option, attached, f"{where}--{option.long}"))
    return settings, positional


def _split_directive(text: str) -> list[str]:
    """Shell-like words of a directive, up to a ``#`` that starts a word (a trailing comment)."""
    quote = ""
    for k, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or text[k - 1].isspace()):
            text = text[:k]
            break
    try:
        return shlex.split(text)
    except ValueError as e:
        raise _Bad(str(e).lower()) from None


def script_directives(script: str, source: str) -> list[_Setting]:
    """The settings of the script's directives, read as sbatch reads them."""
    settings: list[_Setting] = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or (number == 1 and stripped.startswith("#!")):
            continue
        if not stripped.startswith("#"):
            break  # the first command: what follows is the script's business
        magic = next((m for m in MAGIC_WORDS if stripped.startswith(m)), None)
        if magic is None:
            continue
        rest = stripped[len(magic) :]
        where = f"{source}:{number}: "
        if rest and not rest[0].isspace():
            raise SbatchError(f"{where}{magic}: expected a space after {magic}")
        try:
            words = _split_directive(rest)
        except _Bad as e:
            raise SbatchError(f"{where}{magic}: {e}") from None
        found, extra = _scan(words, where)
        if extra:
            raise SbatchError(f"{where}{magic}: unexpected argument {extra[0]!r}")
        if any(s.option.long == "wrap" for s in found):  # the script is already the job
            raise SbatchError(f"{where}--wrap: is only valid on the command line")
        settings.extend(found)
    return settings


def check_script(script: str, source: str) -> None:
    """Refuse what cannot run as a batch script, as sbatch does."""
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise SbatchError(f"{source}: larger than {MAX_SCRIPT_BYTES:,} bytes")
    if "\0" in script:
        raise SbatchError(f"{source}: a binary file, not a script")
    if not script.startswith("#!"):
        raise SbatchError(
            f"{source}: the first line must start with #! and an interpreter, such as #!/bin/bash"
        )
    if "\r\n" in script:
        raise SbatchError(f"{source}: has DOS line breaks (\\r\\n); convert it with dos2unix")


FIELD_OPTIONS = {
    "name": "--job-name",
    "workdir": "--chdir",
    "stdout": "--output",
    "stderr": "--error",
    "cpus_per_task": "--cpus-per-task",
    "mem_mib": "--mem",
    "env": "--export",
    "script": "--wrap",
    "nodelist": "--nodelist",
    "exclude": "--exclude",
}


def _resolve(draft: _Draft, ctx: _Context) -> dict[str, object]:
    """The JobSubmit fields, once every option is known."""
    out = dict(draft.fields)
    nodes = draft.nodes[0] if draft.nodes else 1
    out["nodes"] = nodes
    per_node = 1
    if draft.ntasks_per_node is not None:
        per_node, where = draft.ntasks_per_node
        if draft.ntasks is not None and draft.ntasks[0] != per_node * nodes:
            raise SbatchError(
                f"{draft.ntasks[1]}: {draft.ntasks[0]} tasks differ from {nodes} node(s) "
                f"x {per_node} tasks per node"
            )
    elif draft.ntasks is not None:
        tasks, where = draft.ntasks
        if tasks % nodes:
            raise SbatchError(f"{where}: {tasks} tasks do not divide evenly over {nodes} nodes")
        per_node = tasks // nodes
    per_task = draft.fields.get("cpus_per_task", 1)
    assert isinstance(per_task, int)
    cpus = per_task * per_node
    out["cpus_per_task"] = cpus
    gpus = 0
    if (gpu := draft.gpu) is not None:
        out["gpu_type"] = gpu.gpu_type
        draft.origin.update(dict.fromkeys(("gpus_per_node", "gpu_milli", "mig_count"), gpu.where))
        if gpu.kind == "total":
            if gpu.count % nodes:
                raise SbatchError(
                    f"{gpu.where}: {gpu.count} GPUs do not divide evenly over {nodes} nodes"
                )
            gpus = gpu.count // nodes
        elif gpu.kind == "per_node":
            gpus = gpu.count
        elif gpu.kind == "milli":
            out["gpu_milli"] = gpu.count
        else:
            out["mig_profile"], out["mig_count"] = gpu.mig_profile, gpu.count
    out["gpus_per_node"] = gpus
    if draft.mem is not None:
        kind, mib, where = draft.mem
        draft.origin["mem_mib"] = where
        if kind == "gpu" and gpus == 0:
            raise SbatchError(f"{where}: the job asks for no whole GPUs; use --mem")
        out["mem_mib"] = mib * {"node": 1, "cpu": cpus, "gpu": gpus}[kind]
    try:
        out["env"] = parse_export(draft.export[0], ctx.environ)
    except _Bad as e:
        raise SbatchError(f"{draft.export[1]}: {e}") from None
    return out


def parse_submission(
    argv: Sequence[str],
    *,
    load_script: Callable[[str], str],
    cwd: str,
    environ: Mapping[str, str],
    now: datetime,
) -> JobSubmit:
    """Build a submission from sbatch-style ``argv`` and the script it names.

    ``argv`` holds options and at most one script path (``-`` for standard
    input, which ``load_script`` reads like any other name); give ``--wrap``
    instead to run a command line. ``load_script`` returns a script's text
    and may raise OSError or UnicodeDecodeError. ``now`` (timezone-aware)
    anchors ``--begin``. Raise SbatchError, and only that, for bad input.
    """
    ctx = _Context(cwd=cwd, environ=environ, now=now)
    given, positional = _scan(argv, "")
    if len(positional) > 1:
        raise SbatchError(
            f"{positional[1]!r}: script arguments are not supported; put them in the script"
        )
    wraps = [s for s in given if s.option.long == "wrap"]
    if positional and wraps:
        raise SbatchError("--wrap: give a script or --wrap, not both")
    draft = _Draft()
    draft.set("workdir", cwd, "--chdir")
    settings = given
    if positional:
        source = positional[0]
        try:
            script = load_script(source)
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise SbatchError(f"{source}: cannot read the script: {reason}") from None
        check_script(script, source)
        draft.set("script", script, source)
        draft.set("name", "sbatch" if source == "-" else posixpath.basename(source), source)
        settings = script_directives(script, source) + given
    elif wraps:
        draft.set("name", "wrap", "--wrap")
    else:
        raise SbatchError("give a script (- for standard input) or --wrap COMMAND")
    for setting in settings:
        try:
            setting.option.apply(draft, setting.value, setting.where, ctx)
        except _Bad as e:
            raise SbatchError(f"{setting.where}: {e}") from None
    if draft.wrap is not None:
        draft.set("script", f"#!/bin/sh\n{draft.wrap}\n", "--wrap")
    fields = _resolve(draft, ctx)
    try:
        return JobSubmit.model_validate(fields)
    except ValidationError as e:
        error = e.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else ""
        where = draft.origin.get(name) or FIELD_OPTIONS.get(name) or f"--{name.replace('_', '-')}"
        message = error["msg"]
        raise SbatchError(f"{where}: {message[:1].lower()}{message[1:]}") from None


def option_summary() -> str:
    """One line per option, for ``gpufleet submit --help``."""
    lines = []
    for option in OPTIONS:
        short = f"-{option.short}, " if option.short else ""
        value = {"required": " VALUE", "none": "", "optional": "[=VALUE]"}[option.arg]
        lines.append(f"{short}--{option.long}{value}: {option.help}")
    return "\n".join(lines)
