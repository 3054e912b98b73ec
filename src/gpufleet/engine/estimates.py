"""Runtime estimates as both drivers keep them (``policies.predict`` does the predicting).

A driver with a ``[predict]`` table holds one ``Estimates`` beside its job
book and tells it three things, the simulator in virtual time and the
controller in wall-clock time alike:

* a job is queued: ``stamp`` gives it its estimate before the book sees it;
* a job ended by itself (the book's ``finish``): ``finished`` tells the
  predictor the seconds it ran, all its runs together, and whether it failed;
* a cycle is due: ``revise`` estimates every waiting job again, once per
  batch of finishes, so an ordering or a backfill plan reads estimates that
  use every job known to be over and none that is not.

It is pure: what it learns comes only from these calls, in their order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpufleet.core.job import Job
from gpufleet.engine.book import JobBook
from gpufleet.policies.predict import Features, RuntimePredictor, with_estimate


class Estimates:
    """A predictor, and whether it learnt something since the queue was last estimated."""

    def __init__(self, predictor: RuntimePredictor) -> None:
        self.predictor = predictor
        self.learnt = False

    def stamp(self, job: Job, name: str) -> Job:
        """``job`` carrying its estimate, for the book's queue."""
        return with_estimate(job, self.predictor, name)

    def finished(self, job: Job, name: str, ran_s: int, *, failed: bool = False) -> None:
        """``job`` ended by itself after ``ran_s`` seconds of running (every run counted),
        ``failed`` when it ended in failure (a non-zero exit)."""
        self.predictor.observe(Features.of(job, name), ran_s, failed=failed)
        self.learnt = True

    def revise(self, book: JobBook, name: Callable[[str], str]) -> list[Job]:
        """Estimate the book's waiting jobs again if a job finished since the last time.

        ``name`` gives a job's name from its id ("" for none). The
        book gets each job whose estimate changed; they are returned, for a
        driver that keeps its own copy of its jobs.
        """
        if not self.learnt:
            return []
        self.learnt = False
        known: dict[Features, int] = {}
        changed = []
        for job in list(book.pending.values()):
            f = Features.of(job, name(job.id))
            estimate = known.get(f)
            if estimate is None:
                estimate = known[f] = self.predictor.predict(f)
            if estimate != job.runtime_estimate_s:
                job = replace(job, runtime_estimate_s=estimate)
                book.revise(job)
                changed.append(job)
        return changed
