"""tandem.job(): a Python program's place in a job started by ``tandem run``.

Inside the with-block the program's row of the job's control block (/dev/shm/tandem.<job>.ctl) says
running, a background thread beats its heartbeat, ``job.should_stop`` reads the launcher's stop
request, and ``job.report(...)`` writes the metrics record that ``tandem status``, the dashboard,
Prometheus /metrics and metrics.jsonl show, as they do the built-in programs'. Leaving it reports
stopping. Outside a job, tandem.job() raises NotInJobError in one line.
"""

from __future__ import annotations

import os
from typing import Optional

from . import _args, _tandem

__all__ = ["job", "Job", "in_job"]


class Job:
    """The process's row: ``id`` (the job), ``role`` ("learner" or "actor"), ``index``, ``name``
    ("actor.1"), ``run_dir``, ``restarts``; ``should_stop``, ``report(**metrics)``, ``saw_version(v)``,
    ``tick()``; ``metric_names``, the names report() takes."""

    metric_names = _tandem.metric_names

    def __init__(self, c: "_tandem.Job"):
        self._c = c

    id = property(lambda self: self._c.id)
    role = property(lambda self: self._c.role)
    index = property(lambda self: self._c.index)
    name = property(lambda self: self._c.name)
    run_dir = property(lambda self: self._c.run_dir)
    restarts = property(lambda self: self._c.restarts)

    @property
    def should_stop(self) -> bool:
        """The launcher asked the job to stop (finished, interrupted, or another process failed)."""
        return self._c.should_stop

    def report(self, **metrics: float) -> None:
        """Writes this process's metrics record, each metric by its name in ``Job.metric_names`` (step,
        samples_per_s, loss, ...: the fields of docs/FORMAT.md's ProcessMetrics); unset ones are blank."""
        self._c.report(**metrics)

    def saw_version(self, version: int) -> None:
        """The weight version this process now runs (shown as its policy lag)."""
        self._c.saw_version(version)

    def tick(self) -> None:
        """The main loop is alive (matters with hang_timeout_s; report() and should_stop tick too)."""
        self._c.tick()


class _JobContext:
    def __init__(self, c: "_tandem.Job"):
        self._c = c

    def __enter__(self) -> Job:
        self._c.start()
        return Job(self._c)

    def __exit__(self, *exc) -> None:
        self._c.stop()


def job(job: Optional[str] = None, role: Optional[str] = None, index: Optional[int] = None,
        hang_timeout_s: Optional[float] = None) -> _JobContext:
    """Joins the job ``tandem run`` started this process in (TANDEM_JOB, TANDEM_ROLE, TANDEM_INDEX), or the
    row given by ``job``, ``role`` and ``index``. With ``hang_timeout_s`` the heartbeat stops once the main
    loop has not ticked (tick(), report(), should_stop) for that long, so the launcher restarts a hung
    process; without it the heartbeat thread beats for as long as the block runs."""
    return _JobContext(_tandem.Job(
        None if job is None else _args.text("job", job), None if role is None else _args.text("job role", role),
        None if index is None else _args.integer("job index", index, 0, _args.U32),
        _args.seconds("job hang_timeout_s", hang_timeout_s)))


def in_job() -> bool:
    """Whether ``tandem run`` started this process (TANDEM_JOB is set)."""
    return bool(os.environ.get("TANDEM_JOB"))
