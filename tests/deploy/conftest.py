from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.series import exported_series

DEPLOY = Path(__file__).parents[2] / "deploy"


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, frozenset[str]]:
    """Every series name gpufleet serves, with its labels (see ``deploy.series``)."""
    return exported_series(tmp_path_factory.mktemp("exported"))


def promtool() -> str:
    """Debian's promtool (package ``prometheus``, which ``.ci/run`` installs)."""
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install prometheus (.ci/run does)"
    return found
