"""Every file the simulator reads is UTF-8: a byte-order mark is accepted, and
a byte that is not UTF-8 is refused with the file and the line it is on."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.adapters.inventory import ClusterFileError, load_cluster
from gpufleet.adapters.textfile import UnreadableText, read_text
from gpufleet.cli.main import main
from gpufleet.sim.openb import TraceError, load_nodes, load_pods
from gpufleet.sim.traces import dump_history, load_trace

FIXTURES = Path(__file__).parent / "fixtures"
NODES = Path(__file__).parents[1] / "fixtures" / "nodes8x8.csv"
CLUSTER = Path(__file__).parents[2] / "fixtures" / "cluster.toml"

Loader = Callable[[Path], object]


def history(tmp_path: Path) -> Path:
    path = tmp_path / "history.jsonl"
    dump_history(path, load_trace(f"generic:{FIXTURES / 'generic.csv'}"))
    return path


def loader(name: str) -> Loader:
    """The format's loader with its default options, as ``--trace NAME:PATH`` reads."""
    return lambda path: load_trace(f"{name}:{path}")


def case(loader: Loader, name: str) -> tuple[Loader, Callable[[Path], Path]]:
    return loader, lambda _tmp: FIXTURES / name


CASES = {
    "openb": case(loader("openb"), "openb_pods.csv"),
    "swf": case(loader("swf"), "tiny.swf"),
    "tiresias": case(loader("tiresias"), "tiresias.csv"),
    "sacct": case(loader("sacct"), "sacct.psv"),
    "generic": case(loader("generic"), "generic.csv"),
    "history": (loader("history"), history),
    "openb pods": case(load_pods, "openb_pods.csv"),
    "openb nodes": (load_nodes, lambda _tmp: NODES),
    "cluster file": (load_cluster, lambda _tmp: CLUSTER),
}


def rewritten(source: Path, target: Path, edit: Callable[[list[bytes]], bytes]) -> Path:
    target.write_bytes(edit(source.read_bytes().splitlines(keepends=True)))
    return target


@pytest.mark.parametrize("name", CASES)
def test_a_byte_order_mark_is_accepted(name: str, tmp_path: Path) -> None:
    loader, source = CASES[name]
    original = source(tmp_path)
    marked = rewritten(
        original, tmp_path / f"bom{original.suffix}", lambda ls: codecs.BOM_UTF8 + b"".join(ls)
    )
    assert loader(marked) == loader(original)


@pytest.mark.parametrize("name", CASES)
def test_a_latin1_byte_names_the_file_and_its_line(name: str, tmp_path: Path) -> None:
    loader, source = CASES[name]

    def latin1_on_line_3(lines: list[bytes]) -> bytes:
        assert len(lines) >= 3 and lines[2].strip()
        lines[2] = lines[2][:1] + b"\xe9" + lines[2][1:]
        return b"".join(lines)

    original = source(tmp_path)
    bad = rewritten(original, tmp_path / f"latin1{original.suffix}", latin1_on_line_3)
    with pytest.raises((TraceError, ClusterFileError)) as info:
        loader(bad)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(bad))
    assert "3: not UTF-8 text (byte 0xe9)" in message


@pytest.mark.parametrize(
    ("data", "line"),
    [(b"\xff", 1), (b"a\n\xff", 2), (b"a\r\nb\r\nc\xff", 3), (b"a\rb\r\xff", 3)],
)
def test_the_line_counts_every_kind_of_line_end(data: bytes, line: int, tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(codecs.BOM_UTF8 + data)
    with pytest.raises(UnreadableText) as info:
        read_text(path)
    assert info.value.line == line


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["sim", "fill", "--seeds", "1"], "--pods"),
        (["sim", "fill", "--seeds", "1"], "--nodes"),
        (["sim", "run", "--trace", "synthetic:n_jobs=5,seed=1,gpus_total=8"], "--cluster"),
        (["sim", "run", "--cluster", str(NODES)], "--trace"),
    ],
)
def test_the_cli_says_one_line_and_exits_2(
    command: list[str], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = NODES if flag in ("--nodes", "--cluster") else FIXTURES / "openb_pods.csv"
    bad = tmp_path / source.name
    bad.write_bytes(source.read_bytes().replace(b"\n", b"\n\xe9", 2).replace(b"\n\xe9", b"\n", 1))
    value = f"openb:{bad}" if flag == "--trace" else str(bad)
    assert main([*command, flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {bad}, row 3: ")
    assert "\n" not in err
