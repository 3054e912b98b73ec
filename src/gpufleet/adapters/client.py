"""A typed HTTP client for the controller's API (``/v1``), used by the command line.

Where the controller is: ``GPUFLEET_URL`` and ``GPUFLEET_TOKEN``, each
falling back to ``url`` and ``token`` in ``client.toml`` under
``$XDG_CONFIG_HOME/gpufleet/`` (``~/.config/gpufleet/`` by default), and the
URL finally to ``DEFAULT_URL``. The token goes out as ``Authorization:
Bearer``.

Every failure is a ``ClientError`` whose message is one line:

- ``ApiError``: the controller answered with an error. A problem+json body
  names the field (``body.nodes: ...``); 4xx means the request was wrong.
- ``Unreachable``: no answer (connection refused, DNS, timeout).
- ``ClientConfigError``: the settings themselves are wrong.

Retries: a request that never reached the controller (connection refused or
a connect timeout) is retried, whatever it is; one that may have reached it
(a read timeout, a dropped connection, 502/503/504) is retried only when
repeating it is harmless: reads, and submissions, which carry a
``request_id`` (a uuid4 set once per submission) so that the controller
returns the job a retry already created instead of queueing a second one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.api.schemas import (
    Identity,
    JobOut,
    JobPage,
    JobStateName,
    JobSubmit,
    Problem,
    Submitted,
)
from gpufleet.controller.views import (
    AccountOut,
    FairshareRow,
    NodeOut,
    OutputChunk,
    PartitionOut,
    PredictionReport,
    QosOut,
    ReservationOut,
    UsageKey,
    UsageRow,
)

DEFAULT_URL = "http://127.0.0.1:6817"
CONFIG_KEYS = ("url", "token")
RETRY_STATUSES = frozenset({502, 503, 504})
PAGE_SIZE = 500
JobAction = Literal["cancel", "hold", "release", "requeue"]

M = TypeVar("M", bound=BaseModel)


class ClientError(Exception):
    """A request that did not succeed; the message is one line. ``exit_code`` is for a CLI:
    2 when the request itself was wrong, 1 when the controller could not serve it."""

    exit_code = 1


class ClientConfigError(ClientError):
    """The client's settings (environment or client.toml) are unusable."""

    exit_code = 2


class BadArgument(ClientError):
    """An argument that cannot name anything, refused before a request."""

    exit_code = 2


class Unreachable(ClientError):
    """No answer from the controller."""


class ApiError(ClientError):
    """The controller answered with an error status; ``problem`` is its body, if one."""

    def __init__(self, status: int, message: str, problem: Problem | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem
        self.exit_code = 2 if 400 <= status < 500 else 1


@dataclass(frozen=True)
class ClientSettings:
    """Where the controller is, the token to show it, and where they came from."""

    url: str
    token: str | None
    source: str


def config_path(environ: Mapping[str, str], home: Path) -> Path:
    """``client.toml`` under ``$XDG_CONFIG_HOME/gpufleet`` or ``~/.config/gpufleet``."""
    base = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(base) / "gpufleet" / "client.toml"


def client_settings(environ: Mapping[str, str], home: Path) -> ClientSettings:
    """The settings from the environment, then client.toml, then the defaults."""
    path = config_path(environ, home)
    file: dict[str, Any] = {}
    if path.exists():
        try:
            file = read_toml(path)
        except UnreadableToml as e:
            raise ClientConfigError(f"{path}: {e}") from None
        for key, value in file.items():
            if key not in CONFIG_KEYS:
                raise ClientConfigError(f"{path}: {key}: unknown key (known: url, token)")
            if not isinstance(value, str) or not value:
                raise ClientConfigError(f"{path}: {key}: must be a non-empty string")
    url = environ.get("GPUFLEET_URL") or file.get("url") or DEFAULT_URL
    token = environ.get("GPUFLEET_TOKEN") or file.get("token") or None
    source = "GPUFLEET_URL" if environ.get("GPUFLEET_URL") else str(path) if file else "default"
    check_url(source, url)
    if token is not None:
        check_token("GPUFLEET_TOKEN" if environ.get("GPUFLEET_TOKEN") else str(path), token)
    return ClientSettings(url=url.rstrip("/"), token=token, source=source)


def check_url(source: str, url: str) -> None:
    """Refuse a URL (from ``source``) that httpx would fail on only when a request is
    made, or that no request could reach."""
    if not url.startswith(("http://", "https://")):
        raise ClientConfigError(f"{source}: {url!r} is not an http:// or https:// URL")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise ClientConfigError(f"{source}: {url!r} is not a valid URL: {e}") from None
    # httpx takes these, and percent-encodes the space, but no request could succeed.
    if any(c.isspace() for c in url):
        raise ClientConfigError(f"{source}: {url!r} contains white space")
    if not parsed.host:
        raise ClientConfigError(f"{source}: {url!r} names no host")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ClientConfigError(f"{source}: {url!r}: port {parsed.port} is not 1..65535")


def check_token(source: str, token: str) -> None:
    """Refuse a token (from ``source``) that cannot go into an HTTP header as it is
    (httpx would raise, or a newline would end the header): gpufleet's own tokens are
    printable ASCII."""
    if not all("!" <= c <= "~" for c in token):
        raise ClientConfigError(f"{source}: the token must be printable ASCII without spaces")


def problem_message(status: int, body: Problem) -> str:
    """One line: the first bad field and what is wrong with it, else the detail."""
    if body.errors:
        first = body.errors[0]
        more = len(body.errors) - 1
        extra = f" (and {more} more)" if more else ""
        return f"{first.get('field', 'request')}: {first.get('message', body.title)}{extra}"
    text = f"{body.title.lower()}: {body.detail}" if body.detail else body.title.lower()
    if status == 401:
        text += " (set GPUFLEET_TOKEN or token in client.toml)"
    return text.replace("\n", " ")


class Client:
    """The controller's API; use as a context manager to close the connection pool.

    ``transport`` and ``sleep`` are for tests. ``attempts`` counts the first
    try; ``backoff_s`` doubles after each retry.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        attempts: int = 3,
        backoff_s: float = 0.2,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )
        self._timeout_s = timeout_s
        self._attempts = max(1, attempts)
        self._backoff_s = backoff_s
        self._sleep = sleep

    @classmethod
    def from_settings(cls, settings: ClientSettings, **kwargs: Any) -> Client:
        return cls(settings.url, settings.token, **kwargs)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- plumbing ------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool,
        params: Sequence[tuple[str, str | int | float]] = (),
        body: Mapping[str, Any] | None = None,
        text: bool = False,
    ) -> Any:
        """The decoded JSON answer (``text``: a success's body as text); raise ApiError or
        Unreachable."""
        for attempt in range(self._attempts):
            last = attempt == self._attempts - 1
            try:
                response = self._http.request(method, path, params=list(params), json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                if last:  # nothing was sent: always safe to retry until now
                    raise Unreachable(
                        f"cannot reach the controller at {self.url} "
                        "(is it running? see `gpufleet up`)"
                    ) from e
            except httpx.TransportError as e:
                if last or not idempotent:
                    reason = (
                        f"no answer within {self._timeout_s:g}s"
                        if isinstance(e, httpx.TimeoutException)
                        else "the connection broke"
                    )
                    raise Unreachable(f"the controller at {self.url}: {reason}") from e
            else:
                if response.status_code in RETRY_STATUSES and idempotent and not last:
                    self._sleep(self._backoff_s * 2**attempt)
                    continue
                return response.text if text and response.is_success else self._decode(response)
            self._sleep(self._backoff_s * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _decode(self, response: httpx.Response) -> Any:
        if response.is_success:
            try:
                return response.json()
            except ValueError:
                raise ApiError(response.status_code, "the answer is not JSON") from None
        status = response.status_code
        try:
            problem = Problem.model_validate(response.json())
        except (ValueError, ValidationError):
            raise ApiError(status, f"HTTP {status} {response.reason_phrase}".strip()) from None
        raise ApiError(status, problem_message(status, problem), problem)

    def _get(self, path: str, **params: str | float | None) -> Any:
        pairs = [(k, v) for k, v in params.items() if v is not None]
        return self._request("GET", path, idempotent=True, params=pairs)

    def whoami(self) -> Identity:
        """Whom the token stands for."""
        return _validate(Identity, self._get("/v1/whoami"))

    # -- jobs ----------------------------------------------------------------------

    def submit(self, spec: JobSubmit) -> Submitted:
        """Queue ``spec``; a ``request_id`` is set if it has none, so retries are safe."""
        if spec.request_id is None:
            spec = spec.model_copy(update={"request_id": str(uuid.uuid4())})
        body = spec.model_dump(mode="json")
        return _validate(Submitted, self._request("POST", "/v1/jobs", idempotent=True, body=body))

    def jobs(
        self,
        *,
        user: str | None = None,
        states: Sequence[JobStateName] = (),
        partition: str | None = None,
        account: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[JobOut]:
        """Every job matching the filters, newest first, fetching page after page."""
        fixed: list[tuple[str, str | int | float]] = [("state", s) for s in states]
        for key, value in (("user", user), ("partition", partition), ("account", account)):
            if value is not None:
                fixed.append((key, value))
        cursor: str | None = None
        while True:
            params = [*fixed, ("limit", page_size)] + ([("cursor", cursor)] if cursor else [])
            data = self._request("GET", "/v1/jobs", idempotent=True, params=params)
            page = _validate(JobPage, data)
            yield from page.jobs
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def job(self, job_id: str) -> JobOut:
        return _validate(JobOut, self._get(f"/v1/jobs/{_segment(job_id)}"))

    def output(
        self, job_id: str, stream: Literal["stdout", "stderr"], offset: int = 0
    ) -> OutputChunk:
        """A slice of the job's output from ``offset`` (read by the controller)."""
        path = f"/v1/jobs/{_segment(job_id)}/output"
        return _validate(OutputChunk, self._get(path, stream=stream, offset=offset))

    def job_action(self, job_id: str, action: JobAction, reason: str = "") -> JobOut:
        """Cancel, hold, release or requeue a job; the job as it is afterwards.

        Not retried once sent: a repeated requeue would stop a second run.
        """
        body = {"reason": reason} if reason else None
        path = f"/v1/jobs/{_segment(job_id)}/{action}"
        return _validate(JobOut, self._request("POST", path, idempotent=False, body=body))

    # -- nodes and policy ----------------------------------------------------------

    def nodes(self) -> list[NodeOut]:
        return _validate_list(NodeOut, self._get("/v1/nodes"))

    def node_action(self, name: str, action: Literal["drain", "resume"], reason: str) -> NodeOut:
        body = {"reason": reason} if reason else None
        path = f"/v1/nodes/{_segment(name)}/{action}"
        return _validate(NodeOut, self._request("POST", path, idempotent=False, body=body))

    def partitions(self) -> list[PartitionOut]:
        return _validate_list(PartitionOut, self._get("/v1/partitions"))

    def qos(self) -> list[QosOut]:
        return _validate_list(QosOut, self._get("/v1/qos"))

    def accounts(self) -> list[AccountOut]:
        return _validate_list(AccountOut, self._get("/v1/accounts"))

    def reservations(self) -> list[ReservationOut]:
        return _validate_list(ReservationOut, self._get("/v1/reservations"))

    def fairshare(self) -> list[FairshareRow]:
        return _validate_list(FairshareRow, self._get("/v1/fairshare"))

    def prediction_report(self, *, buckets: int = 10) -> PredictionReport:
        """The runtime predictor's error over time (operators)."""
        return PredictionReport.model_validate(self._get("/v1/predict/report", buckets=buckets))

    def usage(
        self, *, start: float | None = None, end: float | None = None, by: UsageKey = "user"
    ) -> list[UsageRow]:
        """GPU-hours per key over [start, end) (the server's defaults: 0 and now)."""
        return _validate_list(UsageRow, self._get("/v1/usage", start=start, end=end, by=by))

    def usage_export(self, *, start: float | None = None, end: float | None = None) -> str:
        """The finished jobs submitted in [start, end) as history JSON Lines, the format of
        ``gpufleet sim run --trace history:FILE``."""
        pairs = [(k, v) for k, v in (("start", start), ("end", end)) if v is not None]
        answer: str = self._request(
            "GET", "/v1/usage/export", idempotent=True, params=pairs, text=True
        )
        return answer


def _segment(text: str) -> str:
    """``text`` as one path segment, so that no name can reach another route."""
    if text in ("", ".", ".."):
        raise BadArgument(f"{text!r} is not a name")
    return quote(text, safe="")


def _validate(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise _unexpected(e) from None


def _validate_list(model: type[M], data: Any) -> list[M]:
    try:
        return TypeAdapter(list[model]).validate_python(data)  # type: ignore[valid-type]
    except ValidationError as e:
        raise _unexpected(e) from None


def _unexpected(e: ValidationError) -> ApiError:
    """An answer of the wrong shape: a controller of another version, or not one at all."""
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return ApiError(200, f"unexpected answer from the controller: {where}: {first['msg']}")
