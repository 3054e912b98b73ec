"""Per-job node constraints: the nodes a job names, excludes, or selects by feature.

A job may name the nodes it must run on (``nodelist``, Slurm's
``--nodelist``: here the job runs only on nodes of the list, a gang of N on
N of them), exclude nodes (``--exclude``) and select nodes by feature
(``--constraint``). A feature is a node label key (the node has the label)
or ``key=value`` (the label has that value). A constraint combines features
with ``&`` (and) and ``|`` (or); ``&`` binds tighter, and parentheses group::

    a100&ib | zone=eu-1&(h100|a100)

``node_mask`` turns a job's constraints into a boolean mask over nodes; the
cycle intersects it with the partition's nodes. Names the cluster does not
have select nothing.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from gpufleet.core.model import InvalidSpec, Node
from gpufleet.core.state import BoolArray, ClusterState

Feature = tuple[str, str | None]
"""A label key and the value it must have (None: any value)."""
Clause = tuple[Feature, ...]
"""Features that must all hold."""

_TOKEN = re.compile(r"\s*(?:([()&|])|([A-Za-z0-9_.:/-]+(?:=[A-Za-z0-9_.:/-]*)?))")


@lru_cache(maxsize=1024)
def parse_constraint(text: str) -> tuple[Clause, ...]:
    """The constraint as an OR of AND clauses (empty text: no constraint, ``()``).

    Raises InvalidSpec naming ``job.constraint`` on a syntax error.
    """
    if not text.strip():
        return ()
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise InvalidSpec("job.constraint", f"unexpected {text[pos:].strip()[:20]!r}")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    parser = _Parser(text, tokens)
    dnf = parser.expr()
    if parser.at < len(tokens):
        raise InvalidSpec("job.constraint", f"unexpected {tokens[parser.at]!r} in {text!r}")
    return dnf


class _Parser:
    def __init__(self, text: str, tokens: list[str]) -> None:
        self.text, self.tokens, self.at = text, tokens, 0

    def _peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def expr(self) -> tuple[Clause, ...]:
        clauses = self.term()
        while self._peek() == "|":
            self.at += 1
            clauses = clauses + self.term()
        return clauses

    def term(self) -> tuple[Clause, ...]:
        clauses = self.factor()
        while self._peek() == "&":
            self.at += 1
            right = self.factor()
            clauses = tuple(a + b for a in clauses for b in right)
        return clauses

    def factor(self) -> tuple[Clause, ...]:
        tok = self._peek()
        if tok == "(":
            self.at += 1
            inner = self.expr()
            if self._peek() != ")":
                raise InvalidSpec("job.constraint", f"missing ')' in {self.text!r}")
            self.at += 1
            return inner
        if not tok or tok in "&|)":
            raise InvalidSpec("job.constraint", f"a feature is missing in {self.text!r}")
        self.at += 1
        key, eq, value = tok.partition("=")
        return (((key, value if eq else None),),)


def has_features(node: Node, clause: Clause) -> bool:
    """Does ``node`` have every feature of ``clause``?"""
    labels = node.labels
    return all(k in labels and (v is None or labels[k] == v) for k, v in clause)


def node_mask(
    state: ClusterState, nodelist: tuple[str, ...], exclude: tuple[str, ...], constraint: str
) -> BoolArray:
    """The nodes a job with these constraints may run on."""
    if nodelist:
        mask = np.zeros(state.num_nodes, dtype=np.bool_)
        mask[[state.index[n] for n in nodelist if n in state.index]] = True
    else:
        mask = np.ones(state.num_nodes, dtype=np.bool_)
    mask[[state.index[n] for n in exclude if n in state.index]] = False
    dnf = parse_constraint(constraint)
    if dnf:
        mask &= np.array(
            [any(has_features(n, c) for c in dnf) for n in state.nodes], dtype=np.bool_
        )
    return mask


def idle_nodes(state: ClusterState) -> BoolArray:
    """Nodes where nothing is allocated: what an exclusive job may take."""
    idle: BoolArray = (state.cpu_free == state.cpu_total) & (state.mem_free == state.mem_total)
    idle &= state.gpu_free_sum == state.gpu_milli_total_sum
    if len(state.mig_free):
        taken = np.bincount(state.mig_node[~state.mig_free], minlength=state.num_nodes)
        idle &= taken == 0
    return idle
