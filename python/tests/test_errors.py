"""Everything the C++ side refuses reaches Python as its tandem.Error subclass, with the C++ one-line
message, never a crash; and a failed call leaves no segment behind (conftest checks /dev/shm after
every test)."""

import os
import struct
import time

import pytest
import torch

import tandem
from helpers import Peer, CounterpartModel

FMNIST = "/usr/share/datasets/fashion-mnist"


def one_line(error_class, call, *phrases):
    with pytest.raises(error_class) as e:
        call()
    message = str(e.value)
    assert isinstance(e.value, tandem.Error) and "\n" not in message and message
    for p in phrases:
        assert p in message, message
    return message


def write_segment(name, data):
    with open(f"/dev/shm/{name}", "wb") as f:
        f.write(data)
    os.chmod(f"/dev/shm/{name}", 0o600)


def test_a_missing_segment_is_segment_not_found_for_every_kind(name):
    one_line(tandem.SegmentNotFoundError, lambda: tandem.Dataset(name), f"tandem.data.{name}", "tandem data preload")
    one_line(tandem.SegmentNotFoundError, lambda: tandem.WeightFollower(name), f"tandem.{name}.weights")
    one_line(tandem.SegmentNotFoundError, lambda: tandem.ExperienceRings.attach(name), f"tandem.{name}.exp")
    one_line(tandem.SegmentNotFoundError, lambda: tandem.ExperienceWriter(name, 0), f"tandem.{name}.exp")
    one_line(tandem.SegmentNotFoundError, lambda: tandem.job(name, "actor", 0), f"tandem.{name}.ctl")


def test_another_kind_of_segment_or_a_foreign_object_is_a_foreign_segment(fmnist, name):
    one_line(tandem.ForeignSegmentError, lambda: tandem.WeightFollower(slab=fmnist.segment),
             "holds a dataset segment, not a weights one")
    write_segment(f"tandem.data.{name}", bytes(8192))
    try:
        one_line(tandem.ForeignSegmentError, lambda: tandem.Dataset(name), "not a Tandem segment")
    finally:
        os.unlink(f"/dev/shm/tandem.data.{name}")


def test_a_header_whose_checksum_differs_is_a_corrupt_segment(name):
    header = struct.pack("<QIIIIQQQQII", 0x004d4853444e4154, 1, 1, os.getuid(), os.getpid(), time.time_ns(),
                         8192, 4096, 12345, 1, 0)
    write_segment(f"tandem.data.{name}", header + bytes(8192 - len(header)))
    try:
        one_line(tandem.CorruptSegmentError, lambda: tandem.Dataset(name), "corrupt header")
    finally:
        os.unlink(f"/dev/shm/tandem.data.{name}")


@pytest.mark.skipif(os.getuid() != 0, reason="making another user's segment needs root")
def test_another_users_segment_is_an_owner_error_even_for_root(name):
    write_segment(f"tandem.data.{name}", bytes(8192))
    os.chown(f"/dev/shm/tandem.data.{name}", 65534, 65534)
    try:
        one_line(tandem.OwnerError, lambda: tandem.Dataset(name), "owned by uid 65534")
    finally:
        os.unlink(f"/dev/shm/tandem.data.{name}")


def test_too_little_shared_memory_is_no_space_and_leaves_nothing(name, monkeypatch):
    monkeypatch.setenv("TANDEM_SHM_LIMIT", "1M")
    one_line(tandem.NoSpaceError, lambda: tandem.WeightPublisher(CounterpartModel(1024, 2048), name), "not enough shared memory")
    one_line(tandem.NoSpaceError, lambda: tandem.preload(name, FMNIST, progress=False), "not enough shared memory")
    one_line(tandem.NoSpaceError, lambda: tandem.ExperienceRings.create(name, actors=64, slots=64, steps=64, envs=8,
                                                                        obs_dim=64), "not enough shared memory")


def test_a_slab_whose_writer_runs_is_a_segment_that_exists(name, tmp_path):
    with Peer("publish", "--slab", tandem.slab_name(name), "--dump", tmp_path / "w") as p:
        p.line()
        one_line(tandem.SegmentExistsError, lambda: tandem.WeightPublisher(CounterpartModel(), name),
                 "is being written by live process")
        p.finish()


def test_a_tensor_the_slab_cannot_hold_is_a_dtype_error(name):
    one_line(tandem.DTypeError, lambda: tandem.WeightPublisher({"mask": torch.zeros(3, dtype=torch.bool)}, name),
             "tensor 'mask' is Bool")


def test_a_model_other_than_the_slabs_is_a_shape_error(name):
    with tandem.WeightPublisher(CounterpartModel(), name) as pub:
        pub.publish(1)
        with tandem.WeightFollower(name) as follower:
            one_line(tandem.ShapeError, lambda: follower.load_into(CounterpartModel(8, 8)), "signature")


def test_more_episodes_than_a_slot_holds_is_a_shape_error(name):
    with tandem.ExperienceRings.create(name, actors=1, slots=2, steps=2, envs=2, obs_dim=1):
        slot = tandem.ExperienceWriter(name, 0).begin_write()

        def too_many():
            slot.episodes = 5
        one_line(tandem.ShapeError, too_many, "at most 4 finished episodes")


def test_outside_a_job_is_not_in_job(monkeypatch):
    monkeypatch.delenv("TANDEM_JOB", raising=False)
    one_line(tandem.NotInJobError, tandem.job, "TANDEM_JOB is not set")


# Each C++ error kind (common/error.hpp) and the class it raises; a kind added there without a class
# here fails the first test.
KIND_CLASSES = {
    "general": tandem.Error, "no_space": tandem.NoSpaceError, "owner": tandem.OwnerError,
    "segment_not_found": tandem.SegmentNotFoundError, "segment_exists": tandem.SegmentExistsError,
    "foreign_segment": tandem.ForeignSegmentError, "corrupt_segment": tandem.CorruptSegmentError,
    "dtype": tandem.DTypeError, "shape": tandem.ShapeError, "not_in_job": tandem.NotInJobError,
    "timeout": TimeoutError,
}


def test_each_kind_of_cpp_error_raises_its_class_with_the_message():
    assert sorted(tandem._tandem._error_kinds) == sorted(KIND_CLASSES)
    for kind, error_class in KIND_CLASSES.items():
        with pytest.raises(error_class) as e:
            tandem._tandem._raise_error(kind, f"a {kind} error: fix")
        assert type(e.value) is error_class and str(e.value) == f"a {kind} error: fix"


def test_the_words_of_a_message_do_not_choose_its_class():
    with pytest.raises(tandem.Error) as e:
        tandem._tandem._raise_error("general", "x is corrupt, does not exist and already exists: fix")
    assert type(e.value) is tandem.Error


def test_a_refusal_quoting_a_name_the_user_chose_keeps_its_class():
    with pytest.raises(tandem.Error) as e:
        tandem.envs.make("a corrupt env that does not exist")
    assert type(e.value) is tandem.Error and "is not a built-in env" in str(e.value), repr(e.value)
