"""``gpufleet import``: another scheduler's configuration as gpufleet's files.

``gpufleet import slurm SLURM_CONF --out DIR`` writes ``DIR/cluster.toml``
and ``DIR/policy.toml`` (a simulator profile) from a Slurm site's files; see
``adapters.slurmconf`` and docs/slurm.md. What gpufleet does not model is
named in one ``warning:`` line on stderr. Bad input ends with one line
``error: ...`` and exit status 2, and nothing is written.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Annotated

import tomli_w
import typer

from gpufleet.adapters.inventory import ClusterFileError, nodes_from_groups
from gpufleet.adapters.slurmconf import SlurmImportError, import_slurm
from gpufleet.cli.output import fail
from gpufleet.cli.sim_run import check_out_dir
from gpufleet.sim.profile import ProfileError, profile_from_dict

importer = typer.Typer(help="Import another scheduler's configuration.", no_args_is_help=True)


def _models(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in values:
        gres_type, eq, model = text.partition("=")
        if not eq or not gres_type or not model:
            fail("--gpu-model", f"{text!r} is not TYPE=MODEL (e.g. h100=H100-80GB)")
        out[gres_type] = model
    return out


@importer.command("slurm")
def slurm(
    slurm_conf: Annotated[Path, typer.Argument(help="The site's slurm.conf.")],
    out: Annotated[
        Path, typer.Option("--out", help="Where to write cluster.toml and policy.toml.")
    ],
    gres: Annotated[Path | None, typer.Option("--gres", help="gres.conf (GPU types).")] = None,
    qos: Annotated[
        Path | None, typer.Option("--qos", help="Output of sacctmgr show qos -P.")
    ] = None,
    assoc: Annotated[
        Path | None,
        typer.Option("--assoc", help="Output of sacctmgr show assoc -P (with ParentName)."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option("--cluster", help="The cluster whose --assoc rows to read, if several."),
    ] = None,
    gpu_model: Annotated[
        list[str] | None,
        typer.Option(
            "--gpu-model",
            help="GRES GPU type = catalog model, e.g. h100=H100-80GB; gpu=MODEL for untyped GPUs.",
        ),
    ] = None,
) -> None:
    """Translate a Slurm configuration into DIR/cluster.toml and DIR/policy.toml."""
    if cluster is not None and assoc is None:
        fail("--cluster", "chooses among --assoc's clusters: give --assoc too")
    try:
        imported = import_slurm(
            slurm_conf,
            gres=gres,
            qos=qos,
            assoc=assoc,
            gpu_models=_models(gpu_model or []),
            cluster=cluster,
        )
        # What is written must load: check both documents before writing either.
        nodes_from_groups(imported.cluster["nodes"], "cluster.toml")
        profile_from_dict(imported.policy, "policy")
        check_out_dir(out)
        _write_both(
            {
                out / "cluster.toml": tomli_w.dumps(imported.cluster),
                out / "policy.toml": tomli_w.dumps(imported.policy),
            }
        )
    except (SlurmImportError, ClusterFileError, ProfileError) as e:
        fail("", str(e))
    except OSError as e:
        fail("--out", f"{e.filename}: {e.strerror}")
    if imported.unmodelled:
        typer.echo("warning: not modelled, left out: " + ", ".join(imported.unmodelled), err=True)
    typer.echo(f"wrote {out / 'cluster.toml'} and {out / 'policy.toml'}", err=True)


def _write_both(files: dict[Path, str]) -> None:
    """Write every file or none: each to a temporary file beside it, renamed over
    the target only once all are written and no target is a directory."""
    temps: list[Path] = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, text in files.items():
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            temps.append(Path(name))
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(name, 0o666 & ~umask)  # mkstemp's 0600: give what open() would
        for path in files:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        for temp, path in zip(temps, files, strict=True):
            temp.replace(path)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
