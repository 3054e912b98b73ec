"""The live controller's providers: where its pools' nodes come from.

Both implement ``engine.fleet.Provider``; neither waits for anything. A node
asked for joins when its agent registers with the token the controller
issued for it (``NodeSpec.token``); the controller revokes that token when
it deletes the node.

**command** runs a site's own programs, as argument lists (never through a
shell): ``create`` when a node is wanted, ``delete`` when it is not. Each
gets the node's spec as one JSON object on stdin (``NodeSpec.as_json``:
``action``, ``node``, ``pool``, ``inventory`` (the node's cluster-file
group), ``server``, ``token``, ``boot_s``, ``price_gpu_hour``; ``delete``
gets ``action``, ``node`` and ``pool``) and as environment variables:
``GPUFLEET_ACTION``, ``GPUFLEET_NODE``, ``GPUFLEET_POOL``, and for ``create``
``GPUFLEET_URL`` and ``GPUFLEET_AGENT_TOKEN`` (which ``gpufleet agent``
reads). A program that exits non-zero is logged with the end of its stderr;
a node whose agent never registers is given up after its boot timeout
(``engine.fleet``) and ``delete`` runs for it.

**local** starts ``gpufleet agent`` processes on this machine, for tests
and demos: each node gets ``STATE_DIR/NAME/node.toml`` (its declared
inventory, so a GPU-less machine can pretend), its runs' state under
``STATE_DIR/NAME/agent`` and its log in ``STATE_DIR/NAME/agent.log``.
Deleting a node stops its agent (SIGTERM); ``close`` stops them all (their
runs go on), and a restarted controller's provider starts them again for
the nodes it adopts (``adopt``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.adapters.inventory import group_table
from gpufleet.core.model import Node
from gpufleet.core.pools import NodePool

if TYPE_CHECKING:
    from gpufleet.controller.setup import ControllerSetup

log = logging.getLogger(__name__)

STDERR_TAIL = 400
"""Characters of a failed program's stderr put in the log."""
STOP_WAIT_S = 15.0
"""Seconds a local agent has to stop after SIGTERM before SIGKILL: it needs about 2.5,
but far more on a busy host, and a killed agent leaves no last log line."""

TokenFn = Callable[[str], str]
"""Issues a node token for the node named (the controller's, revoking older ones)."""


class ProviderConfig(BaseModel):
    """The ``[provider]`` table of the controller's configuration."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["command", "local"]
    server: str = Field(
        "", description="the URL a new node's agent reaches us at; '': where we listen"
    )
    create: tuple[str, ...] = Field((), description="command: the program and its arguments")
    delete: tuple[str, ...] = Field((), description="command: the program and its arguments")
    state_dir: str = Field("", description="local: where the agents' files go")

    @model_validator(mode="after")
    def _complete(self) -> ProviderConfig:
        if self.kind == "command" and not (self.create and self.delete):
            raise ValueError("kind 'command' needs create and delete, each a program and args")
        if self.kind == "local" and not self.state_dir:
            raise ValueError("kind 'local' needs state_dir")
        return self


class LiveProvider(Protocol):
    """A provider the controller can also close (when it stops) and hand the nodes a
    restarted controller holds (``adopt``: up or still booting)."""

    def create(self, pool: NodePool, node: Node, now: int) -> None: ...

    def delete(self, pool: NodePool, name: str, now: int) -> None: ...

    def adopt(self, pool: NodePool, name: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class NodeSpec:
    """What a new node needs to know: itself, where to register, and with what token."""

    pool: NodePool
    node: Node
    server: str
    token: str

    def as_json(self) -> dict[str, Any]:
        return {
            "action": "create",
            "node": self.node.name,
            "pool": self.pool.name,
            "inventory": group_table(self.node),
            "server": self.server,
            "token": self.token,
            "boot_s": self.pool.boot_s,
            "price_gpu_hour": self.pool.price_gpu_hour,
        }


def provider(config: ProviderConfig, token_for: TokenFn) -> LiveProvider:
    """The provider ``config`` describes; ValueError without a ``server`` URL."""
    if not config.server:
        raise ValueError("provider.server: the URL agents reach the controller at is not known")
    if config.kind == "command":
        return CommandProvider(config.create, config.delete, config.server, token_for)
    return LocalProvider(config.server, Path(config.state_dir), token_for)


class CommandProvider:
    """Runs the site's ``create`` and ``delete`` programs (module docstring)."""

    def __init__(
        self, create: Sequence[str], delete: Sequence[str], server: str, token_for: TokenFn
    ) -> None:
        self.create_argv = list(create)
        self.delete_argv = list(delete)
        self.server = server
        self.token_for = token_for

    def create(self, pool: NodePool, node: Node, now: int) -> None:
        spec = NodeSpec(pool, node, self.server, self.token_for(node.name))
        env = {"GPUFLEET_URL": self.server, "GPUFLEET_AGENT_TOKEN": spec.token}
        self._run(self.create_argv, spec.as_json(), env)

    def delete(self, pool: NodePool, name: str, now: int) -> None:
        self._run(self.delete_argv, {"action": "delete", "node": name, "pool": pool.name}, {})

    def adopt(self, pool: NodePool, name: str) -> None:
        """Nothing: the site's node runs its own agent, which outlives the controller."""

    def close(self) -> None:
        """Programs under way finish on their own."""

    def _run(self, argv: list[str], spec: dict[str, Any], env: dict[str, str]) -> None:
        environment = {
            **os.environ,
            **env,
            "GPUFLEET_ACTION": spec["action"],
            "GPUFLEET_NODE": spec["node"],
            "GPUFLEET_POOL": spec["pool"],
        }
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=environment,
                start_new_session=True,  # a controller's Ctrl-C does not cut a creation short
            )
        except OSError as e:
            log.error("%s %s: cannot run %s: %s", spec["action"], spec["node"], argv[0], e)
            return
        body = json.dumps(spec).encode()
        threading.Thread(
            target=_finish, args=(proc, body, spec), name=f"provider-{spec['node']}", daemon=True
        ).start()


def _finish(proc: subprocess.Popen[bytes], body: bytes, spec: dict[str, Any]) -> None:
    """Feed the spec, wait for the program, log its failure."""
    _, err = proc.communicate(body)
    if proc.returncode:
        tail = err.decode(errors="replace")[-STDERR_TAIL:].strip()
        log.error(
            "%s %s (pool %s): exit status %d: %s",
            spec["action"], spec["node"], spec["pool"], proc.returncode, tail,
        )  # fmt: skip
    else:
        log.info("%s %s (pool %s): done", spec["action"], spec["node"], spec["pool"])


class LocalProvider:
    """``gpufleet agent`` processes on this machine (module docstring)."""

    def __init__(self, server: str, root: Path, token_for: TokenFn) -> None:
        self.server = server
        self.root = root
        self.token_for = token_for
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.Lock()

    def create(self, pool: NodePool, node: Node, now: int) -> None:
        home = self.root / node.name
        home.mkdir(parents=True, exist_ok=True)
        (home / "node.toml").write_text(tomli_w.dumps({"nodes": [group_table(node)]}))
        self._start(pool, node.name)

    def adopt(self, pool: NodePool, name: str) -> None:
        """Start the agent of a node made before the controller restarted again, on its
        files: ``close`` stopped it, and the new one re-attaches to the runs still going.
        Nothing for a node this provider has no files of. An agent that outlived the
        controller (killed, not stopped) keeps its state directory: the new one exits."""
        with self.lock:
            running = name in self.agents
        if not running and (self.root / name / "node.toml").is_file():
            self._start(pool, name)

    def _start(self, pool: NodePool, name: str) -> None:
        home = self.root / name
        argv = [
            sys.executable, "-m", "gpufleet.cli.main", "agent",
            "--server", self.server, "--inventory", str(home / "node.toml"), "--node", name,
            "--state-dir", str(home / "agent"), "--same-user",
        ]  # fmt: skip
        env = {**os.environ, "GPUFLEET_AGENT_TOKEN": self.token_for(name)}
        with (home / "agent.log").open("ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env
            )
        with self.lock:
            self.agents[name] = proc
        log.info("node %s (pool %s): agent started, pid %d", name, pool.name, proc.pid)

    def delete(self, pool: NodePool, name: str, now: int) -> None:
        with self.lock:
            proc = self.agents.pop(name, None)
        if proc is not None:  # stopped aside: the controller calls this inside a cycle
            threading.Thread(target=_stop, args=(proc,), name=f"stop-{name}", daemon=True).start()
            log.info("node %s (pool %s): agent told to stop", name, pool.name)

    def close(self) -> None:
        with self.lock:
            procs, self.agents = list(self.agents.values()), {}
        for proc in procs:
            _stop(proc)


def served_at(setup: ControllerSetup, url: str) -> ControllerSetup:
    """``setup`` with its provider's ``server`` set to ``url`` (where the controller listens)
    when the configuration left it empty."""
    config = setup.provider
    if config is None or config.server:
        return setup
    return replace(setup, provider=config.model_copy(update={"server": url}))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it lingers; reaped either way."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
