"""Wrong arguments, as a new user passes them: every negative, out-of-range or mistyped integer (a batch, a
seed, a rank, a ring size, a version), a bad duration, a name with a NUL byte, a mean that is a numpy or
torch scalar. Each is one tandem.Error that names the option, shows its value and the allowed range,
raised before anything is allocated or created (nothing is left in /dev/shm), never pybind's
"incompatible function arguments" with a C++ signature, never MemoryError."""

import itertools

import numpy as np
import pytest
import torch

import tandem
from helpers import CounterpartModel, refused

_tiny = itertools.count()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 100-sample uint8 dataset cache (x: (100, 1, 4, 4), y: int64 labels)."""
    from helpers import SESSION
    folder = tmp_path_factory.mktemp("tiny")
    rng = np.random.default_rng(0)
    np.save(folder / "x_train.npy", rng.integers(0, 255, size=(100, 1, 4, 4), dtype=np.uint8))
    np.save(folder / "y_train.npy", rng.integers(0, 10, size=(100,), dtype=np.int64))
    cache = f"{SESSION}-tiny-fmnist"  # the -fmnist suffix: the per-test leftover check lets it live
    ds = tandem.preload(cache, folder, progress=False)
    yield ds
    ds.close()
    tandem.remove_dataset(cache)


HOST_FEED_CASES = [  # keyword arguments, then what the message must show
    (dict(batch_size=-1), ("HostFeed batch_size=-1", "1..2**63-1")),
    (dict(batch_size=0), ("HostFeed batch_size=0", "1..2**63-1")),
    (dict(batch_size=2.5), ("HostFeed batch_size=2.5 is not an integer", "1..2**63-1")),
    (dict(batch_size=True), ("HostFeed batch_size=True is not an integer",)),
    (dict(batch_size=2**40), ("feed batch_size=1099511627776 is out of range", "use batch_size 1..100")),
    (dict(batch_size=60, consumers=2), ("feed batch_size=60 is out of range", "use batch_size 1..50 with 2")),
    (dict(consumers=0), ("HostFeed consumers=0", "1..2**32-1")),
    (dict(seed=-1), ("HostFeed seed=-1", "0..2**64-1")),
    (dict(seed=2**64), ("HostFeed seed=18446744073709551616", "0..2**64-1")),
    (dict(rank=-1, world_size=2), ("HostFeed rank=-1", "0..1")),
    (dict(rank=2, world_size=2), ("HostFeed rank=2", "0..1")),
    (dict(world_size=0, rank=0), ("HostFeed world_size=0", "1..2**32-1")),
    (dict(epoch=-3), ("HostFeed epoch=-3", "0..2**64-1")),
    (dict(ring_slots=1), ("HostFeed ring_slots=1", "2..64")),
    (dict(ring_slots=10**6), ("HostFeed ring_slots=1000000", "2..64")),
    (dict(workers=-1), ("HostFeed workers=-1", "0..256")),
    (dict(workers=10**9), ("HostFeed workers=1000000000", "0..256")),
    (dict(device=-1), ("HostFeed device=-1", "0..2**32-1")),
    (dict(device="tpu"), ("HostFeed device='tpu'", "'cuda:N'")),
    (dict(mean="abc"), ("HostFeed mean='abc' is not a finite number", "one per channel")),
    (dict(mean=float("nan")), ("HostFeed mean=nan", "one per channel")),
    (dict(std=[]), ("HostFeed std=[]", "one per channel")),
    (dict(std=0.0), ("feed stddev[0] is 0", "> 0")),
    (dict(split=3), ("HostFeed split=3 is not a string",)),
]


@pytest.mark.parametrize("kwargs, phrases", HOST_FEED_CASES, ids=[repr(c[0]) for c in HOST_FEED_CASES])
def test_a_host_feed_option_out_of_range_names_itself_its_value_and_the_range(tiny, kwargs, phrases):
    kwargs = dict(dict(batch_size=10, device="cpu"), **kwargs)
    refused(tandem.Error, lambda: tandem.HostFeed(tiny, **kwargs), *phrases)


@pytest.mark.parametrize("mean, std", [(np.float32(0.5), np.float64(0.25)), (torch.tensor(0.5), torch.tensor(0.25)),
                                       (np.array([0.5]), torch.tensor([0.25])), (np.array(0.5), 0.25)])
def test_mean_and_std_as_numpy_or_torch_scalars_are_accepted(tiny, mean, std):
    feed = tandem.HostFeed(tiny, 10, device="cpu", mean=mean, std=std)
    x, _ = next(iter(feed))
    want = (tiny["x"].float() / 255 - 0.5) / 0.25
    assert any(torch.allclose(x[0], want[i]) for i in range(len(want)))
    del feed, x


@pytest.mark.parametrize("kwargs, phrases", [
    (dict(actors=-1), ("ExperienceRings.create actors=-1", "1..4096")),
    (dict(slots=0), ("ExperienceRings.create slots=0", "1..65536")),
    (dict(steps=-5), ("ExperienceRings.create steps=-5", "1..1048576")),
    (dict(obs_dim=-1), ("ExperienceRings.create obs_dim=-1", "1..1048576")),
    (dict(obs_dim=2**40), ("ExperienceRings.create obs_dim=1099511627776", "1..1048576")),
    (dict(logits_dim=1.5), ("ExperienceRings.create logits_dim=1.5 is not an integer",)),
    (dict(action_dim=-2, action="continuous"), ("ExperienceRings.create action_dim=-2", "1..1048576")),
])
def test_an_experience_ring_shape_out_of_range_names_the_option_before_creating_anything(name, kwargs, phrases):
    shape = dict(dict(actors=1, slots=2, steps=4, envs=2, obs_dim=3), **kwargs)
    refused(tandem.Error, lambda: tandem.ExperienceRings.create(name, **shape), *phrases, leaves_nothing_of=name)


def test_ring_indices_and_a_slots_policy_version_out_of_range_name_themselves(name):
    with tandem.ExperienceRings.create(name, actors=1, slots=2, steps=4, envs=2, obs_dim=3) as rings:
        refused(tandem.Error, lambda: tandem.ExperienceWriter(name, -1), "ExperienceWriter actor=-1", "0..4095")
        refused(tandem.Error, lambda: rings.peek(-1), "ExperienceRings.peek actor=-1")
        refused(tandem.Error, lambda: rings.counters(2**33), "ExperienceRings.counters actor=8589934592")
        refused(tandem.Error, lambda: rings.take(0, timeout=-1).__enter__(), "ExperienceRings.take timeout=-1", "seconds")
        writer = tandem.ExperienceWriter(name, 0)
        with writer.slot() as slot:
            refused(tandem.Error, lambda: setattr(slot, "policy_version", -1), "Slot policy_version=-1",
                    "0..2**64-1")
            refused(tandem.Error, lambda: setattr(slot, "episodes", "3"), "Slot episodes='3' is not an integer")
            slot.policy_version = np.int64(7)  # numpy integers are integers
        assert rings.peek(0).policy_version == 7
        rings.release(0)


@pytest.mark.parametrize("kwargs, phrases", [
    (dict(slots=-1), ("WeightPublisher slots=-1", "2..32")),
    (dict(slots=1), ("WeightPublisher slots=1", "2..32")),
    (dict(slots=33), ("WeightPublisher slots=33", "2..32")),
    (dict(leases=0), ("WeightPublisher leases=0", "1..65536")),
    (dict(after_version=-1), ("WeightPublisher after_version=-1", "0..72057594037927934")),
    (dict(after_version=2**60), ("WeightPublisher after_version=1152921504606846976", "0..72057594037927934")),
    (dict(model_name="m\0x"), ("model name 'm\\x00x'", "printable")),
    (dict(model_name=3), ("WeightPublisher model_name=3 is not a string",)),
    (dict(optimizer="sgd"), ("WeightPublisher optimizer=str is not a torch.optim.Optimizer",)),
])
def test_a_publisher_option_out_of_range_names_itself_before_the_slab_exists(name, kwargs, phrases):
    refused(tandem.Error, lambda: tandem.WeightPublisher(CounterpartModel(), name, **kwargs), *phrases,
            leaves_nothing_of=name)


def test_publish_and_follow_arguments_out_of_range_name_themselves(name):
    with tandem.WeightPublisher(CounterpartModel(), name) as pub:
        refused(tandem.Error, lambda: pub.publish(-1), "WeightPublisher.publish step=-1", "0..2**64-1")
        refused(tandem.Error, lambda: pub.publish_final(1, timeout_s=float("nan")), "publish_final timeout_s=nan")
        pub.publish(np.int64(1))
        refused(tandem.Error, lambda: tandem.WeightFollower(name, leases=0), "WeightFollower leases=0", "1..65536")
        with tandem.WeightFollower(name) as follower:
            refused(tandem.Error, lambda: follower.wait(newer_than=-1), "WeightFollower.wait newer_than=-1")
            refused(tandem.Error, lambda: follower.wait(timeout=-0.5), "WeightFollower.wait timeout=-0.5")
            refused(tandem.Error, lambda: follower.lease(timeout="1"), "WeightFollower.lease timeout='1'")
            refused(tandem.Error, lambda: follower.load_into(CounterpartModel(), mode="fast"), "load mode 'fast'")
            refused(tandem.Error, lambda: follower.load_into(object()), "WeightFollower.load_into model=")


def test_a_model_that_is_not_named_tensors_is_refused_by_name(name):
    refused(tandem.Error, lambda: tandem.WeightPublisher({"w": [1.0, 2.0]}, name), "is not a (name, tensor) pair")
    refused(tandem.Error, lambda: tandem.WeightPublisher(42, name), "WeightPublisher model=42 is not a model")


def test_names_with_a_nul_byte_are_shown_escaped_not_cut(name):
    refused(tandem.Error, lambda: tandem.Dataset("ab\0cd"), "dataset name 'ab\\x00cd' is not a valid name")
    refused(tandem.Error, lambda: tandem.WeightPublisher(CounterpartModel(), "job\0x"), "job name 'job\\x00x'")
    refused(tandem.Error, lambda: tandem.WeightPublisher({"a\0b": torch.zeros(2)}, name), "tensor name 'a\\x00b'",
            leaves_nothing_of=name)
    refused(tandem.Error, lambda: tandem.ExperienceWriter("a\nb", 0), "job name 'a\\x0ab'")
    refused(tandem.Error, lambda: tandem.WeightPublisher(CounterpartModel(), slab=f"tandem.{name}\0x"),
            f"name 'tandem.{name}\\x00x' is not a name", leaves_nothing_of=name)


def test_job_and_preload_arguments_out_of_range_name_themselves(name, tmp_path):
    refused(tandem.Error, lambda: tandem.job(name, "actor", -1), "job index=-1", "0..2**32-1")
    refused(tandem.Error, lambda: tandem.job(name, "actor", 0, hang_timeout_s=-1), "job hang_timeout_s=-1")
    refused(tandem.Error, lambda: tandem.preload(name, tmp_path, threads=-1), "preload threads=-1", "0..1024",
            leaves_nothing_of=name)
    refused(tandem.Error, lambda: tandem.preload(name, 17), "preload from_path=17 is not a path")
