"""sbatch-style scripts and options, as people write them, turned into submissions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.api.schemas import JobSubmit
from gpufleet.cli.sbatch import (
    OPTIONS,
    REFUSED,
    SbatchError,
    option_summary,
    parse_begin,
    parse_submission,
    parse_time,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)  # a Wednesday, noon UTC
ENV = {"PATH": "/usr/bin", "HOME": "/home/ada", "GPUFLEET_TOKEN": "gf_secret"}


def submit(script: str | None, *argv: str, env: dict[str, str] | None = None) -> JobSubmit:
    args: Sequence[str] = (["job.sh"] if script is not None else []) + list(argv)
    return parse_submission(
        args,
        load_script=lambda name: script or "",
        cwd="/home/ada/run",
        environ=ENV if env is None else env,
        now=NOW,
    )


def fields(job: JobSubmit, *names: str) -> dict[str, Any]:
    return {name: getattr(job, name) for name in names}


# (script, what the submission must hold)
SCRIPTS = [
    pytest.param(
        "#!/bin/bash\n#SBATCH --gres=gpu:a100:4\n#SBATCH --time=04:00:00\npython train.py\n",
        {"gpus_per_node": 4, "gpu_type": "a100", "time_limit_s": 4 * 3600, "name": "job.sh"},
        id="gres-with-type",
    ),
    pytest.param(
        # 2 nodes x 4 tasks x 8 CPUs per task = 32 CPUs per node
        "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=4\n#SBATCH -c 8\nsrun hostname\n",
        {"nodes": 2, "cpus_per_task": 32},
        id="ntasks-per-node",
    ),
    pytest.param(
        # mixed spacing, tabs, a quoted name and trailing comments
        '#!/bin/sh\n#SBATCH   --job-name="big run"   # the name\n#SBATCH\t-p gpu\t# partition\n'
        "#SBATCH --mem 16G\n\n# a plain comment\n#SBATCH -t 30\nexec ./run\n",
        {"name": "big run", "partition": "gpu", "mem_mib": 16384, "time_limit_s": 1800},
        id="spacing-quotes-comments",
    ),
    pytest.param(
        # the first command ends the directives, as in Slurm
        "#!/bin/bash\n#SBATCH -p gpu\nmodule load cuda\n#SBATCH -p debug\n#SBATCH --bogus\n",
        {"partition": "gpu"},
        id="directives-after-a-command-are-comments",
    ),
    pytest.param(
        # ##SBATCH and # SBATCH switch a directive off
        "#!/bin/bash\n##SBATCH --partition=debug\n# SBATCH --qos=high\n#SBATCH -q low\ntrue\n",
        {"partition": None, "qos": "low"},
        id="disabled-directives",
    ),
    pytest.param(
        "#!/bin/bash\n#GPUFLEET --mig=1g.10gb:2\n#SBATCH -J mig\ntrue\n",
        {"mig_profile": "1g.10gb", "mig_count": 2, "gpus_per_node": 0, "name": "mig"},
        id="gpufleet-mig",
    ),
    pytest.param(
        "#!/bin/bash\n#GPUFLEET --gpu-fraction 0.25\ntrue\n",
        {"gpu_milli": 250, "gpus_per_node": 0},
        id="gpufleet-fraction",
    ),
    pytest.param(
        # 8 GPUs over 2 nodes -> 4 per node
        "#!/bin/bash\n#SBATCH --nodes=2-4\n#SBATCH --gpus=h100:8\ntrue\n",
        {"nodes": 2, "gpus_per_node": 4, "gpu_type": "h100"},
        id="gpus-total-and-node-range",
    ),
    pytest.param(
        # 4 CPUs x 2 GB per CPU = 8 GiB
        "#!/bin/bash\n#SBATCH -c 4 --mem-per-cpu=2G\ntrue\n",
        {"cpus_per_task": 4, "mem_mib": 8192},
        id="mem-per-cpu",
    ),
    pytest.param(
        # 2 GPUs x 40 GB per GPU = 80 GiB
        "#!/bin/bash\n#SBATCH --gres=gpu:2 --mem-per-gpu=40G\ntrue\n",
        {"gpus_per_node": 2, "mem_mib": 81920},
        id="mem-per-gpu",
    ),
    pytest.param(
        "#!/bin/bash\n#SBATCH -o logs/%x-%j.out -e logs/%x-%j.err\n#SBATCH -D /scratch/ada\n",
        {"stdout": "logs/%x-%j.out", "stderr": "logs/%x-%j.err", "workdir": "/scratch/ada"},
        id="output-and-chdir",
    ),
    pytest.param(
        "#!/bin/bash\n#SBATCH --array=0-999%50 --dependency=afterok:12:13_2,afterany:7\n",
        {"array": "0-999%50", "dependency": "afterok:12:13_2,afterany:7"},
        id="array-and-dependency",
    ),
    pytest.param(
        "#!/bin/bash\n#SBATCH -w node[01-03] -x node07 -C 'a100&nvlink' --exclusive\n",
        {
            "nodelist": ["node01", "node02", "node03"],
            "exclude": ["node07"],
            "constraint": "a100&nvlink",
            "exclusive": True,
        },
        id="hostlists-and-constraint",
    ),
    pytest.param(
        "#!/bin/bash\n#SBATCH --no-requeue -H --nice --signal=USR1@120\n",
        {"requeue": False, "hold": True, "nice": 100, "signal": "USR1@120"},
        id="flags",
    ),
    pytest.param(
        "#!/bin/bash\n#SBATCH --time=UNLIMITED --gres=gpu\n",
        {"time_limit_s": 0, "gpus_per_node": 1, "gpu_type": None},
        id="unlimited-and-bare-gres",
    ),
]


@pytest.mark.parametrize(("script", "expected"), SCRIPTS)
def test_scripts_as_people_write_them(script: str, expected: dict[str, Any]) -> None:
    job = submit(script)
    assert fields(job, *expected) == expected
    assert job.script == script


def test_command_line_overrides_directives() -> None:
    script = "#!/bin/bash\n#SBATCH -p debug --gres=gpu:4 -J fromscript\ntrue\n"
    job = submit(script, "--partition=gpu", "--gpus-per-node", "2", "-Jcli")
    assert fields(job, "partition", "gpus_per_node", "name") == {
        "partition": "gpu",
        "gpus_per_node": 2,
        "name": "cli",
    }


def test_options_may_follow_the_script() -> None:
    job = parse_submission(
        ["-p", "a", "job.sh", "-q", "b"],
        load_script=lambda name: "#!/bin/sh\ntrue\n",
        cwd="/",
        environ={},
        now=NOW,
    )
    assert (job.partition, job.qos) == ("a", "b")


def test_wrap_makes_a_sh_script_named_wrap() -> None:
    job = submit(None, "--wrap", "python train.py --lr 0.1", "-c", "2")
    assert job.script == "#!/bin/sh\npython train.py --lr 0.1\n"
    assert (job.name, job.cpus_per_task, job.workdir) == ("wrap", 2, "/home/ada/run")


def test_relative_chdir_is_taken_from_the_current_directory() -> None:
    assert submit(None, "--wrap=x", "-D", "../data").workdir == "/home/ada/data"


def test_export_all_copies_the_environment_without_the_token() -> None:
    # ALL is the default; the token is a credential the store would keep.
    assert submit(None, "--wrap=x").env == {"PATH": "/usr/bin", "HOME": "/home/ada"}
    assert submit(None, "--wrap=x", "--export=ALL,LR=0.1").env["LR"] == "0.1"


def test_export_names_alone_are_the_whole_environment() -> None:
    assert submit(None, "--wrap=x", "--export=NONE").env == {}
    assert submit(None, "--wrap=x", "--export=PATH,LR=1").env == {"PATH": "/usr/bin", "LR": "1"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90 * 60),  # bare: minutes
        ("5:30", 330),  # MM:SS
        ("1:02:03", 3723),  # HH:MM:SS
        ("2-12", 2 * 86400 + 12 * 3600),  # D-HH
        ("1-00:30", 86400 + 1800),  # D-HH:MM
        ("1-00:00:05", 86405),  # D-HH:MM:SS
        ("UNLIMITED", 0),  # 0: no limit, as the API takes it
        ("infinite", 0),
        ("0", 0),  # Slurm: zero means no limit
    ],
)
def test_time_formats(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("now+60", NOW + timedelta(seconds=60)),  # bare: seconds
        ("now+1hour", NOW + timedelta(hours=1)),
        ("now+2days", NOW + timedelta(days=2)),
        ("2024-06-01T08:30", datetime(2024, 6, 1, 8, 30, tzinfo=UTC)),
        ("2024-06-01", datetime(2024, 6, 1, tzinfo=UTC)),
        ("16:00", NOW.replace(hour=16)),  # later today
        ("09:15:30", NOW.replace(hour=9, minute=15, second=30) + timedelta(days=1)),  # passed
        ("midnight", NOW.replace(hour=0) + timedelta(days=1)),
        ("teatime", NOW.replace(hour=16)),
        ("tomorrow", NOW.replace(hour=0) + timedelta(days=1)),
    ],
)
def test_begin_formats(text: str, expected: datetime) -> None:
    assert parse_begin(text, NOW) == int(expected.timestamp())


# (argv, script or None, the one-line message, exactly)
SH = "#!/bin/sh\ntrue\n"
# (argv, script or None, how the one-line message starts)
ERRORS = [
    (["--gpus=3", "-N", "2"], SH, "--gpus: 3 GPUs do not divide evenly over 2 nodes"),
    (["--gress=gpu:1"], SH, "--gress: unknown option (did you mean --gres?)"),
    (["-Z"], SH, "-Z: unknown option"),
    (["--mail-type=END"], SH, "--mail-type: not supported (gpufleet sends no mail)"),
    (["--gres=shard:2"], SH, "--gres: 'shard': only the gpu GRES is supported"),
    (["--mem=0"], SH, "--mem: 0 (all of a node's memory) is not supported; use --exclusive"),
    (["--mem=lots"], SH, "--mem: 'lots' is not a size like 4096, 500M, 16G or 1T"),
    (["--array=5-1"], SH, "--array: range '5-1' runs backwards"),
    (["--array=0-100000"], SH, "--array: index 100000 is above the maximum 99999"),
    (
        ["--dependency=afterok:1?afterany:2"],
        SH,
        "--dependency: any-of dependencies ('?') are not supported; ',' requires all of them",
    ),
    (
        ["-d", "after:5"],
        SH,
        "--dependency: 'after:5': use afterok, afterany or afternotok with job ids, or singleton",
    ),
    (["--signal=R:USR1"], SH, "--signal: R: is not supported; only B: (the batch shell alone) is"),
    (["--signal=WAT"], SH, "--signal: 'WAT' is not a signal name"),
    (["--exclusive=user"], SH, "--exclusive: =user: only a plain --exclusive"),
    (["--gpu-fraction=1.5"], SH, "--gpu-fraction: '1.5' is not a fraction between 0 and 1"),
    (["--mig=2g.11gb"], SH, "--mig: unknown MIG profile '2g.11gb' (known: "),
    (["-N", "2", "--ntasks=3"], SH, "--ntasks: 3 tasks do not divide evenly over 2 nodes"),
    (["--export=PATH,NOPE"], SH, "--export: NOPE is not set in the submitting environment"),
    (["-w", "node[3-1]"], SH, "--nodelist: "),
    (["--hold=yes"], SH, "--hold: takes no value"),
    (["-t"], SH, "-t: needs a value"),
    (["-c", "5000"], SH, "--cpus-per-task: 5000 is out of range 1..4096"),
    (["--gres=gpu:65"], SH, "--gres: 65 is out of range 0..64"),
    # --nice takes the API's range, negative values included, and says so.
    (["--nice=999999999"], SH, "--nice: 999999999 is out of range -10000..10000"),
    (["--nice=-10001"], SH, "--nice: -10001 is out of range -10000..10000"),
    (["--nice=--5"], SH, "--nice: '--5' is not a whole number"),
    (["--nice=5-"], SH, "--nice: '5-' is not a whole number"),
    (["--job-name=" + "x" * 300], SH, "--job-name: string should have at most 256 characters"),
    (["b"], SH, "'b': script arguments are not supported; put them in the script"),
    ([], None, "give a script (- for standard input) or --wrap COMMAND"),
    (["--wrap=x"], "#!/bin/sh\n", "--wrap: give a script or --wrap, not both"),
    # directives name the script and the line
    ([], "#!/bin/bash\n#SBATCH -p a\n#SBATCH --gres=gpu:v:x\n", "job.sh:3: --gres: 'x' is not"),
    ([], "#!/bin/bash\n\n#SBATCH --frobnicate\n", "job.sh:3: --frobnicate: unknown option"),
    ([], "#!/bin/bash\n#SBATCH --time=2:99:99:99\n", "job.sh:2: --time: '2:99:99:99' is not"),
    ([], "#!/bin/bash\n#SBATCH-p gpu\n", "job.sh:2: #SBATCH: expected a space after #SBATCH"),
    ([], "#!/bin/bash\n#SBATCH -J 'open\n", "job.sh:2: #SBATCH: no closing quotation"),
    ([], "#!/bin/bash\n#SBATCH -p gpu extra\n", "job.sh:2: #SBATCH: unexpected argument 'extra'"),
    ([], "#!/bin/bash\n#SBATCH --wrap=ls\n", "job.sh:2: --wrap: is only valid on the command line"),
    ([], "#!/bin/bash\n#GPUFLEET --gpu-milli=1000\n", "job.sh:2: --gpu-milli: 1000 is out"),
    ([], "echo no shebang\n", "job.sh: the first line must start with #! and an interpreter"),
    ([], "#!/bin/sh\r\ntrue\r\n", "job.sh: has DOS line breaks"),
    # a late resolution still names the directive's line
    ([], "#!/bin/bash\n#SBATCH -N 3\n#SBATCH -G 4\n", "job.sh:3: --gpus: 4 GPUs do not divide"),
]


@pytest.mark.parametrize(("argv", "script", "message"), ERRORS)
def test_bad_input_is_one_line_naming_the_option(
    argv: list[str], script: str | None, message: str
) -> None:
    with pytest.raises(SbatchError) as caught:
        submit(script, *argv)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(message), text


@pytest.mark.parametrize(("text", "nice"), [("-10000", -10000), ("-5", -5), ("10000", 10000)])
def test_nice_takes_minus_to_plus_ten_thousand(text: str, nice: int) -> None:
    assert submit(SH, f"--nice={text}").nice == nice


def test_an_unreadable_script_is_named() -> None:
    def missing(name: str) -> str:
        raise FileNotFoundError(2, "No such file or directory")

    with pytest.raises(SbatchError, match=r"^nope\.sh: cannot read the script: No such file"):
        parse_submission(["nope.sh"], load_script=missing, cwd="/", environ={}, now=NOW)


def test_help_lists_every_option() -> None:
    summary = option_summary()
    for name in ("--gres", "--gpu-fraction", "--mig", "-J, --job-name", "--nice[=VALUE]"):
        assert name in summary


OPTION_WORDS = st.sampled_from(
    ["-N", "-G", "-t", "-c", "--gres", "--gpus", "--mem", "--array", "--begin", "--signal",
     "--export", "--dependency", "-w", "--nice", "--mig", "--gpu-fraction", "--exclusive", "="]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    body=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(lambda o, v: f"#SBATCH {o} {v}", OPTION_WORDS, st.text(max_size=12)),
            st.builds(lambda o, v: f"#GPUFLEET {o}={v}", OPTION_WORDS, st.text(max_size=12)),
        ),
        max_size=8,
    ),
    argv=st.lists(st.one_of(OPTION_WORDS, st.text(max_size=12)), max_size=6),
)
def test_the_parser_raises_only_its_own_error(body: list[str], argv: list[str]) -> None:
    script = "#!/bin/sh\n" + "\n".join(body)
    try:
        job = submit(script, *argv)
    except SbatchError as e:
        assert "\n" not in str(e)
    else:
        assert isinstance(job, JobSubmit)


def test_the_docs_list_every_option_and_every_refusal() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    missing = [f"--{o.long}" for o in OPTIONS if f"`--{o.long}" not in docs]
    missing += [f"--{name}" for name in REFUSED if f"`--{name}`" not in docs]
    assert missing == []
