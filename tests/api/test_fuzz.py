"""Fuzzing every operation of the OpenAPI document: no input gives a 500.

Schemathesis draws requests that follow the document (positive) and that
break it (negative: wrong types, out-of-range values, missing fields) for
every operation, sent with an admin token so that every route runs to the
service. Each answer must be below 500 and, when it is an error, a problem
document. The example counts are kept small so the whole run stays well
under a minute.
"""

from __future__ import annotations

import os
from typing import cast

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import APIOperation, GenerationMode

from api.conftest import Cluster
from gpufleet.api.app import create_app
from gpufleet.api.openapi import document
from gpufleet.api.problems import PROBLEM_JSON
from gpufleet.controller.service import Controller

# The document does not depend on the controller, so it is built once here.
SCHEMA = schemathesis.openapi.from_dict(document(create_app(cast(Controller, None))))
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
EXAMPLES = int(os.environ.get("GPUFLEET_FUZZ_EXAMPLES", "12"))  # more for a longer search
CASES = [
    pytest.param(operation, mode, id=f"{operation.label} {mode.value}")
    for operation in OPERATIONS
    for mode in GenerationMode
    # An operation without input has nothing to get wrong.
    if mode is GenerationMode.POSITIVE or operation.definition.raw.get("parameters")
    or operation.definition.raw.get("requestBody")
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_no_input_gives_a_server_error(
    cluster: Cluster, operation: APIOperation, mode: GenerationMode
) -> None:
    headers = {"Authorization": f"Bearer {cluster.tokens['admin']}"}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: schemathesis.Case) -> None:
        if isinstance(case.body, dict) and "wait_s" in case.body:
            case.body["wait_s"] = 0  # a long poll would only slow the run down
        # The generated header may be empty or junk: authenticate every case as an admin.
        case.headers = {**(case.headers or {}), **headers}
        response = case.call(base_url=cluster.url, timeout=30)
        assert response.status_code < 500, case.as_curl_command()
        if response.status_code >= 400:
            assert response.headers["content-type"] == [PROBLEM_JSON], case.as_curl_command()

    fuzz()
