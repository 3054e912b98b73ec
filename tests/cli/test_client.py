"""The HTTP client against the real API app on 127.0.0.1 (over a stand-in service)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import httpx
import pytest
from standin import StandIn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.live import serve
from gpufleet.adapters.client import (
    DEFAULT_URL,
    ApiError,
    BadArgument,
    Client,
    ClientConfigError,
    Unreachable,
    client_settings,
)
from gpufleet.api.app import create_app
from gpufleet.api.schemas import JobSubmit

SPEC = JobSubmit(name="t", script="#!/bin/sh\ntrue\n", workdir="/tmp")


def no_sleep(_: float) -> None:
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_submit_sets_a_request_id_and_reads_jobs_back(
    controller_url: str, stand_in: StandIn
) -> None:
    with Client(controller_url, "gf_ada") as client:
        submitted = client.submit(SPEC)
        job = client.job(submitted.job_id)
    assert stand_in.submissions[0].request_id  # a uuid4 was added
    assert (job.state, job.user, job.stdout_path) == ("PENDING", "ada", "/tmp/slurm-1.out")


def test_listing_follows_every_page(controller_url: str) -> None:
    with Client(controller_url, "gf_ada") as client:
        ids = [client.submit(SPEC).job_id for _ in range(7)]
        listed = [job.job_id for job in client.jobs(page_size=3)]  # pages of 3, 3 and 1
    assert listed == ids[::-1]  # newest first


class LoseFirstAnswer:
    """Serves each request, but replaces the first answer to a submission with a 503,
    as a proxy would when the controller's answer is lost after it committed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.lost = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or self.lost:
            await self.app(scope, receive, send)
            return
        self.lost += 1

        async def swallow(message: Message) -> None:
            pass

        await self.app(scope, receive, swallow)
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"unavailable"})


def test_a_retried_submission_creates_one_job(stand_in: StandIn) -> None:
    flaky = LoseFirstAnswer(create_app(stand_in))  # type: ignore[arg-type]
    with serve(flaky) as url, Client(url, "gf_ada", sleep=no_sleep) as client:
        submitted = client.submit(SPEC)
    assert flaky.lost == 1
    assert submitted.duplicate
    assert len(stand_in.jobs) == 1


def test_problem_json_names_the_field(controller_url: str) -> None:
    with Client(controller_url, "gf_ada") as client, pytest.raises(ApiError) as caught:
        client.submit(SPEC.model_copy(update={"partition": "nope"}))
    assert str(caught.value) == "body.partition: no partition 'nope'"
    assert (caught.value.status, caught.value.exit_code) == (422, 2)


def test_not_found_and_conflict_are_one_line(controller_url: str) -> None:
    with Client(controller_url, "gf_ada") as client:
        with pytest.raises(ApiError, match=r"^not found: job 9 not found$"):
            client.job("9")
        job_id = client.submit(SPEC).job_id
        client.job_action(job_id, "cancel")
        with pytest.raises(ApiError, match=r"^conflict: job 1 is cancelled$"):
            client.job_action(job_id, "hold")


def test_a_missing_token_says_how_to_give_one(controller_url: str) -> None:
    with Client(controller_url) as client, pytest.raises(ApiError) as caught:
        client.nodes()
    assert caught.value.status == 401
    assert "set GPUFLEET_TOKEN" in str(caught.value)


def test_a_user_cannot_drain(controller_url: str) -> None:
    with Client(controller_url, "gf_ada") as client, pytest.raises(ApiError) as caught:
        client.node_action("node01", "drain", "bad fan")
    assert caught.value.status == 403


def test_connection_refused_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    slept: list[float] = []
    with Client(url, "gf_ada", sleep=slept.append) as client, pytest.raises(Unreachable) as e:
        client.submit(SPEC)
    assert str(e.value) == (
        f"cannot reach the controller at {url} (is it running? see `gpufleet up`)"
    )
    assert slept == [0.2, 0.4]  # three attempts, backing off


def test_a_non_problem_error_is_still_one_line() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(502, text="<html>bad</html>"))
    client = Client("http://x", attempts=1, transport=transport)
    with pytest.raises(ApiError, match=r"^HTTP 502 Bad Gateway$"):
        client.nodes()


def test_an_answer_of_the_wrong_shape_is_reported() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"jobs": 3}))
    with pytest.raises(ApiError, match="unexpected answer from the controller: jobs"):
        list(Client("http://x", transport=transport).jobs())


def test_names_stay_one_path_segment() -> None:
    seen: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(404, json={"title": "Not Found", "status": 404})

    client = Client("http://x", transport=httpx.MockTransport(record))
    with pytest.raises(ApiError):
        client.node_action("a/../../jobs", "drain", "r")
    assert seen == ["/v1/nodes/a%2F..%2F..%2Fjobs/drain"]
    with pytest.raises(BadArgument):
        client.job("..")


def test_settings_from_the_environment_then_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "gpufleet"
    folder.mkdir()
    (folder / "client.toml").write_text('url = "http://ctl:6817/"\ntoken = "gf_file"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert client_settings(env, tmp_path).url == "http://ctl:6817"
    assert client_settings(env, tmp_path).token == "gf_file"
    env |= {"GPUFLEET_TOKEN": "gf_env"}
    assert client_settings(env, tmp_path).token == "gf_env"
    assert client_settings({}, tmp_path / "nohome").url == DEFAULT_URL


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('url = "http://a"\ntokn = "x"\n', "tokn: unknown key (known: url, token)"),
        ("url = 3\n", "url: must be a non-empty string"),
        ('url = "ftp://a"\n', "'ftp://a' is not an http:// or https:// URL"),
        ("url = \n", "not valid TOML"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "gpufleet").mkdir()
    (tmp_path / "gpufleet" / "client.toml").write_text(text)
    with pytest.raises(ClientConfigError, match=re.escape(message)):
        client_settings({"XDG_CONFIG_HOME": str(tmp_path)}, tmp_path)
