"""Parsing of ``gpufleet sim fill`` option values."""

from __future__ import annotations

import pytest

from gpufleet.cli.sim import MAX_SEEDS, OptionError, parse_policies, parse_seeds


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("42", [42]),
        ("42-44", [42, 43, 44]),  # ranges include both ends
        ("7,42-43, 1", [7, 42, 43, 1]),  # order given is kept; spaces around parts are fine
        ("0-0", [0]),
    ],
)
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "'' is not a seed"),
        ("42,", "'' is not a seed"),
        ("4x", "'4x' is not a seed"),
        ("-3", "'-3' is not a seed"),  # seeds are non-negative
        ("42-", "'42-' is not a seed"),
        ("1.5", "'1.5' is not a seed"),
        ("51-42", "range '51-42' runs backwards"),
        ("42-51,45", "seed 45 is given twice"),
        (f"0-{MAX_SEEDS}", f"more than {MAX_SEEDS} seeds"),  # 0..MAX_SEEDS is one too many
    ],
)
def test_parse_seeds_rejects(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=r"^--seeds: ") as caught:
        parse_seeds(text)
    assert message in str(caught.value)


def test_parse_policies_keeps_order() -> None:
    assert parse_policies("random, best-fit,fgd") == ["random", "best-fit", "fgd"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus", "unknown placement policy 'bogus' (known: "),
        ("best-fit,,fgd", "empty name"),
        ("fgd,fgd", "'fgd' is given twice"),
    ],
)
def test_parse_policies_rejects(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=r"^--policy: ") as caught:
        parse_policies(text)
    assert message in str(caught.value)
