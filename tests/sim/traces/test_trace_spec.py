"""Trace specs: the path and the options split apart whatever the path holds."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.sim.traces.spec import split

KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z0-9_]{1,8})?", fullmatch=True)
VALUES = st.text(st.characters(codec="utf-8", exclude_characters=",\n"), max_size=12)
# A path may hold commas, but not a comma followed by KEY=, which starts an option.
PATHS = st.text(
    st.characters(codec="utf-8", exclude_characters="\n"), min_size=1, max_size=30
).filter(lambda p: not re.search(r",[A-Za-z_][\w.]*=", p) and not p.startswith(","))


@given(path=PATHS, options=st.lists(st.tuples(KEYS, VALUES), max_size=5))
def test_split_gives_back_the_path_and_each_option(
    path: str, options: list[tuple[str, str]]
) -> None:
    pairs = [f"{key}={value}" for key, value in options]
    spec = ",".join([f"tiresias:{path}", *pairs])
    # a value may itself look like KEY=... only after its own '=', never after a comma
    assert split(spec) == ("tiresias", path, pairs)


def test_a_comma_in_a_path_stays_in_the_path() -> None:
    assert split("swf:/data/a,b/jobs.swf,procs_per_gpu=4") == (
        "swf",
        "/data/a,b/jobs.swf",
        ["procs_per_gpu=4"],
    )
