"""tandem.ExperienceRings and tandem.ExperienceWriter against the C++ consumer and writer."""

import pytest
import torch

import tandem
from helpers import Peer, child_line, python_child

SHAPE = dict(actors=2, slots=4, steps=5, envs=3, obs_dim=4, action="discrete", logits_dim=2)


def fill(slot, k):
    """Distinct content for slot k, through the tensor views."""
    for field in ("observations", "rewards", "log_probs", "logits", "values", "episode_returns", "final_observations"):
        t = getattr(slot, field)
        t.copy_(torch.arange(t.numel(), dtype=torch.float32).reshape(t.shape) / 7 + k)
    slot.actions.copy_(torch.arange(slot.actions.numel()).reshape(slot.actions.shape) + 100 * k)
    slot.terminated.copy_((torch.arange(15).reshape(5, 3) + k) % 2)
    slot.truncated.zero_()
    slot.episode_lengths.copy_(torch.arange(15, dtype=torch.int32) + k)
    slot.policy_version = k + 1
    slot.episodes = k % 16


def test_a_python_actor_feeds_the_cpp_learner_byte_identical_slots(name, tmp_path):
    dump = tmp_path / "consumed"
    with Peer("rings-consume", "--job", name, "--actors", 2, "--slots", 4, "--steps", 5, "--envs", 3, "--obs-dim", 4,
              "--logits-dim", 2, "--actor", 1, "--count", 10, "--dump", dump) as p:
        p.line()
        writer = tandem.ExperienceWriter(name, actor=1)
        written = []
        for k in range(10):  # more than the ring holds: the consumer frees slots as it goes
            with writer.slot(timeout=30) as slot:
                fill(slot, k)
            written.append(slot.raw().numpy().tobytes())  # committed and not yet reused
        result = p.line()
        assert result == {"verified": 10, "refused": 0}
        assert dump.read_bytes() == b"".join(written)
        p.finish()


def test_a_python_learner_consumes_the_cpp_actors_slots_byte_identical(name, tmp_path):
    dump = tmp_path / "written"
    with tandem.ExperienceRings.create(name, **SHAPE) as rings:
        with Peer("rings-write", "--job", name, "--actor", 0, "--count", 9, "--seed", 5, "--dump", dump) as p:
            got = []
            for k in range(9):
                with rings.take(0, timeout=30) as slot:
                    assert slot.index == k and slot.policy_version == k + 1
                    got.append(slot.raw().clone().numpy().tobytes())
                    assert torch.equal(slot.actions[0], torch.tensor([k, k + 1, k + 2]))
            p.line()
            p.finish()
        size = rings.shape["slot_bytes"]
        assert b"".join(got) == dump.read_bytes() and len(got[0]) == size
        assert rings.counters(0)["refused"] == 0


def test_a_writer_killed_mid_slot_never_hands_the_reader_a_bad_slot(name):
    with tandem.ExperienceRings.create(name, **SHAPE) as rings:
        child = python_child(f"""
            import os, signal, torch, tandem
            w = tandem.ExperienceWriter("{name}", 0)
            s = w.begin_write()
            s.observations.fill_(-1.0)
            print("half", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """)
        assert child_line(child) == "half"
        child.wait()
        assert rings.peek(0) is None                      # nothing was committed
        with pytest.raises(TimeoutError):
            with rings.take(0, timeout=0.05):
                pass
        writer = tandem.ExperienceWriter(name, 0)         # the restart writes the same slot again
        with writer.slot() as slot:
            fill(slot, 3)
        with rings.take(0, timeout=5) as got:
            assert got.index == 0 and float(got.observations[0, 0, 0]) == 3.0
        assert rings.counters(0)["refused"] == 0 and rings.counters(0)["writer_attaches"] == 2


def test_a_slot_whose_bytes_changed_after_commit_is_refused_and_skipped(name):
    with tandem.ExperienceRings.create(name, **SHAPE) as rings:
        writer = tandem.ExperienceWriter(name, 1)
        for k in range(2):
            with writer.slot() as slot:
                fill(slot, k)
        rings.peek(1).rewards[0, 0] += 1.0                 # a committed slot damaged behind the checksum
        with rings.take(1, timeout=5) as good:
            assert good.index == 1
        assert rings.counters(1)["refused"] == 1


def test_a_full_ring_is_backpressure_counted_and_a_timeout(name):
    with tandem.ExperienceRings.create(name, **SHAPE) as rings:
        writer = tandem.ExperienceWriter(name, 0)
        for k in range(4):
            with writer.slot() as slot:
                fill(slot, k)
        assert writer.begin_write(wait=False) is None
        with pytest.raises(TimeoutError):
            with writer.slot(timeout=0.05):
                pass
        assert writer.counters()["full_waits"] >= 2
        with rings.take(0):
            pass
        with writer.slot(timeout=1) as slot:
            assert slot.index == 4


def test_continuous_actions_are_float_vectors(name):
    with tandem.ExperienceRings.create(name, actors=1, slots=2, steps=2, envs=2, obs_dim=3, action="continuous",
                                       action_dim=2, logits_dim=4) as rings:
        with tandem.ExperienceWriter(name, 0).slot() as slot:
            assert slot.actions.dtype == torch.float32 and slot.actions.shape == (2, 2, 2)
            slot.actions.fill_(0.5)
        with rings.take(0) as got:
            assert bool((got.actions == 0.5).all()) and got.observations.shape == (3, 2, 3)
