"""Experience rings /dev/shm/tandem.<job>.exp: one single-producer ring of trajectory slots per actor.

The same commit protocol and checksums as the C++ rollout actors and RL learner (docs/FORMAT.md,
"Experience rings"), so a Python actor can feed the C++ learner and a Python learner can consume the
C++ actors' rings. A slot is written in place and committed by advancing the ring's head after its
checksum: a writer killed mid-slot has published nothing, and its restart writes the same slot again.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

from . import _args, _tandem
from .errors import Error

__all__ = ["ExperienceRings", "ExperienceWriter", "Slot"]

# A slot in place: observations [T+1, E, obs_dim], actions [T, E] int64 (discrete) or [T, E, action_dim],
# rewards, log_probs [T, E], terminated, truncated [T, E] uint8, logits [T, E, logits_dim],
# values [T+1, E], episode_returns / episode_lengths [T*E] (the first `episodes` valid),
# final_observations [T, E, obs_dim]; attributes policy_version and episodes; raw() is its bytes.
Slot = _tandem.Slot


def _job(job: Optional[str]) -> str:
    if job is None:
        job = os.environ.get("TANDEM_JOB")
        if not job:
            raise Error("no job named: pass job=, or run under `tandem run`, which sets TANDEM_JOB")
    return _args.text("job", job)


def _actor(what: str, actor) -> int:
    return _args.integer(what, actor, 0, _args.LIMITS["ring_actors"][1] - 1)


class ExperienceRings:
    """The consumer's side (a learner): creates the rings, or attaches to a job's.

    ``take(actor)`` waits for the actor's next committed slot, verifies its checksum and sequence
    number (a slot that fails is counted as refused, released and skipped, as the C++ learner does)
    and releases it when its with-block ends; views of a released slot may be overwritten by the actor.
    """

    def __init__(self, c: "_tandem.ExperienceRings"):
        self._c = c

    @classmethod
    def create(cls, job: Optional[str] = None, *, actors: int, slots: int, steps: int, envs: int, obs_dim: int,
               action: str = "discrete", action_dim: int = 1, logits_dim: int = 1) -> "ExperienceRings":
        """Creates /dev/shm/tandem.<job>.exp, removed again on close (a job's launcher also removes it)."""
        def dim(what, value):
            return _args.limited(f"ExperienceRings.create {what}", value, "ring_dim")
        return cls(_tandem.ExperienceRings.create(
            _job(job), _args.limited("ExperienceRings.create actors", actors, "ring_actors"),
            _args.limited("ExperienceRings.create slots", slots, "ring_slots"), dim("steps", steps), dim("envs", envs),
            dim("obs_dim", obs_dim), _args.text("ExperienceRings.create action", action), dim("action_dim", action_dim),
            dim("logits_dim", logits_dim)))

    @classmethod
    def attach(cls, job: Optional[str] = None) -> "ExperienceRings":
        return cls(_tandem.ExperienceRings.attach(_job(job)))

    @contextlib.contextmanager
    def take(self, actor: int, timeout: Optional[float] = None) -> Iterator[Slot]:
        """The actor's next verified slot, released when the with-block ends. TimeoutError after ``timeout`` s."""
        slot = self._c.take(_actor("ExperienceRings.take actor", actor),
                            _args.seconds("ExperienceRings.take timeout", timeout))
        try:
            yield slot
        finally:
            self._c.release(actor)

    def peek(self, actor: int, ahead: int = 0) -> Optional[Slot]:
        """The committed slot ``ahead`` places past the tail, unverified, or None."""
        return self._c.peek(_actor("ExperienceRings.peek actor", actor),
                            _args.integer("ExperienceRings.peek ahead", ahead, 0, _args.U64))

    def verify(self, actor: int, slot: Slot) -> bool:
        """Checksum and seq match; False counts a refusal (the slot is not data)."""
        return self._c.verify(_actor("ExperienceRings.verify actor", actor), slot)

    def release(self, actor: int) -> None:
        """Gives the oldest peeked slot of ``actor`` back to the actor."""
        self._c.release(_actor("ExperienceRings.release actor", actor))

    @property
    def shape(self) -> dict:
        return self._c.shape()

    def counters(self, actor: int) -> dict:
        """head, tail, full_waits, refused, writer_pid, writer_attaches of one ring."""
        return self._c.counters(_actor("ExperienceRings.counters actor", actor))

    @property
    def segment(self) -> str:
        return self._c.segment

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "ExperienceRings":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ExperienceWriter:
    """Actor ``actor``'s producer side of ring ``actor`` (one live writer per ring)."""

    def __init__(self, job: Optional[str] = None, actor: int = 0):
        self._c = _tandem.ExperienceWriter(_job(job), _actor("ExperienceWriter actor", actor))

    @contextlib.contextmanager
    def slot(self, timeout: Optional[float] = None) -> Iterator[Slot]:
        """The slot at the head to fill in place, committed when the with-block ends normally; after an
        exception nothing is committed and the next slot() hands out the same slot. Waits (without the
        GIL) while the ring is full; TimeoutError after ``timeout`` s."""
        s = self._c.begin_write(True, _args.seconds("ExperienceWriter.slot timeout", timeout))
        yield s
        self._c.commit(s)

    def begin_write(self, wait: bool = True, timeout: Optional[float] = None) -> Optional[Slot]:
        return self._c.begin_write(bool(wait), _args.seconds("ExperienceWriter.begin_write timeout", timeout))

    def commit(self, slot: Slot) -> None:
        """Checksums the slot and publishes it (head + 1, release)."""
        self._c.commit(slot)

    @property
    def actor(self) -> int:
        return self._c.actor

    @property
    def shape(self) -> dict:
        return self._c.shape()

    def counters(self) -> dict:
        return self._c.counters()
