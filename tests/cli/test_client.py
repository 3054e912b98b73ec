"""The HTTP client against a real controller (``gpufleet up``) on 127.0.0.1."""

from __future__ import annotations

import re
import socket
import uuid
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from api.live import serve
from cli.live import Up
from gpufleet.adapters.client import (
    DEFAULT_URL,
    ApiError,
    BadArgument,
    Client,
    ClientConfigError,
    Unreachable,
    client_settings,
)
from gpufleet.api.schemas import JobSubmit


def spec(workdir: Path, name: str = "t") -> JobSubmit:
    return JobSubmit(name=name, script="#!/bin/sh\ntrue\n", workdir=str(workdir))


def no_sleep(_: float) -> None:
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_submit_reads_the_job_back(live: Up, tmp_path: Path) -> None:
    with Client(live.url, live.tokens["ada"]) as client:
        submitted = client.submit(spec(tmp_path))
        job = client.job(submitted.job_id)
    assert not submitted.duplicate
    assert (job.user, job.account, job.partition) == ("ada", "lab", "gpu")
    assert job.stdout_path == f"{tmp_path}/slurm-{submitted.job_id}.out"
    assert live.wait_final(submitted.job_id, "ada") == "COMPLETED"


def test_listing_follows_every_page(live: Up, tmp_path: Path) -> None:
    with Client(live.url, live.tokens["bob"]) as client:
        ids = [client.submit(spec(tmp_path)).job_id for _ in range(7)]
        listed = [job.job_id for job in client.jobs(page_size=3)]  # pages of 3, 3 and 1
    assert listed[:7] == ids[::-1]  # newest first; bob's older jobs, if any, follow


FORWARDED = ("authorization", "content-type")


class LoseFirstAnswer:
    """A proxy to the controller that forwards every request, but answers the first
    submission with a 503 after the controller committed it, as a proxy does when
    the controller's answer is lost on the way back."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.lost = 0

    async def __call__(self, scope: dict[str, object], receive: object, send: object) -> None:
        request = Request(scope, receive)  # type: ignore[arg-type]
        async with httpx.AsyncClient(base_url=self.upstream) as upstream:
            forwarded = await upstream.request(
                request.method,
                request.url.path,
                params=str(request.query_params),
                headers={k: v for k, v in request.headers.items() if k in FORWARDED},
                content=await request.body(),
            )
        if request.method == "POST" and not self.lost:
            self.lost += 1
            answer = Response(b"unavailable", status_code=503)
        else:
            kind = forwarded.headers.get("content-type")
            answer = Response(forwarded.content, forwarded.status_code, media_type=kind)
        await answer(scope, receive, send)  # type: ignore[arg-type]


def test_a_retried_submission_creates_one_job(live: Up, tmp_path: Path) -> None:
    name = f"once-{uuid.uuid4().hex[:8]}"
    flaky = LoseFirstAnswer(live.url)
    with serve(flaky) as url, Client(url, live.tokens["ada"], sleep=no_sleep) as client:  # type: ignore[arg-type]
        submitted = client.submit(spec(tmp_path, name))  # no request_id: the client adds one
        named = [job.job_id for job in client.jobs() if job.name == name]
    assert flaky.lost == 1
    assert submitted.duplicate
    assert named == [submitted.job_id]


def test_problem_json_names_the_field(live: Up, tmp_path: Path) -> None:
    with Client(live.url, live.tokens["ada"]) as client, pytest.raises(ApiError) as caught:
        client.submit(spec(tmp_path).model_copy(update={"partition": "nope"}))
    assert str(caught.value) == "body.partition: no partition 'nope'"
    assert (caught.value.status, caught.value.exit_code) == (422, 2)


def test_not_found_and_conflict_are_one_line(live: Up, tmp_path: Path) -> None:
    with Client(live.url, live.tokens["ada"]) as client:
        with pytest.raises(ApiError, match=r"^not found: job 999999: no such job$"):
            client.job("999999")
        job_id = client.submit(spec(tmp_path).model_copy(update={"begin": 4_000_000_000})).job_id
        client.job_action(job_id, "cancel")
        assert live.wait_final(job_id, "ada") == "CANCELLED"  # not COMPLETING any more
        with pytest.raises(ApiError) as caught:
            client.job_action(job_id, "hold")
    message = f"conflict: job {job_id}: cannot hold a job that is CANCELLED"
    assert (str(caught.value), caught.value.status) == (message, 409)


def test_another_users_job_is_not_found(live: Up, tmp_path: Path) -> None:
    with Client(live.url, live.tokens["ada"]) as ada:
        job_id = ada.submit(spec(tmp_path)).job_id
    with Client(live.url, live.tokens["bob"]) as bob, pytest.raises(ApiError) as caught:
        bob.job(job_id)
    assert caught.value.status == 404


def test_a_missing_token_says_how_to_give_one(live: Up) -> None:
    with Client(live.url) as client, pytest.raises(ApiError) as caught:
        client.nodes()
    assert caught.value.status == 401
    assert "set GPUFLEET_TOKEN" in str(caught.value)


def test_a_user_cannot_drain(live: Up) -> None:
    with Client(live.url, live.tokens["ada"]) as client, pytest.raises(ApiError) as caught:
        client.node_action("local", "drain", "bad fan")
    assert caught.value.status == 403


def test_connection_refused_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    slept: list[float] = []
    with Client(url, "gf_ada", sleep=slept.append) as client, pytest.raises(Unreachable) as e:
        client.submit(spec(Path("/tmp")))
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


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # httpx would raise on each of these only once the request is built or sent.
        ({"GPUFLEET_URL": "http://[::1"}, "GPUFLEET_URL: 'http://[::1' is not a valid URL"),
        ({"GPUFLEET_URL": "http://"}, "GPUFLEET_URL: 'http://' names no host"),
        ({"GPUFLEET_URL": "http://a b"}, "GPUFLEET_URL: 'http://a b' contains white space"),
        ({"GPUFLEET_URL": "http://a:99999"}, "port 99999 is not 1..65535"),
        ({"GPUFLEET_TOKEN": "gf_\u00fc"}, "GPUFLEET_TOKEN: the token must be printable ASCII"),
        ({"GPUFLEET_TOKEN": "gf_a\nb"}, "GPUFLEET_TOKEN: the token must be printable ASCII"),
        ({"GPUFLEET_TOKEN": "gf_a b"}, "GPUFLEET_TOKEN: the token must be printable ASCII"),
    ],
)
def test_a_url_or_token_no_request_could_carry_is_refused(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ClientConfigError, match=re.escape(message)):
        client_settings(env, tmp_path)


def test_a_bad_token_in_the_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "gpufleet").mkdir()
    path = tmp_path / "gpufleet" / "client.toml"
    path.write_text('token = "gf_\u00fc"\n')
    with pytest.raises(ClientConfigError, match=re.escape(f"{path}: the token must be")):
        client_settings({"XDG_CONFIG_HOME": str(tmp_path)}, tmp_path)
