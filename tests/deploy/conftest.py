from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.series import exported_names

DEPLOY = Path(__file__).parents[2] / "deploy"


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name gpufleet serves (see ``deploy.series``)."""
    return exported_names(tmp_path_factory.mktemp("exported"))


def promtool() -> str:
    """Debian's promtool (package ``prometheus``, which ``.ci/run`` installs)."""
    found = shutil.which("promtool")
    assert found, "promtool is missing: apt-get install prometheus (.ci/run does)"
    return found
