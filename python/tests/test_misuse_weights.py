"""The weight slab from Python under misuse: a model changed after its publisher was made, a second
publisher of one job, a slab removed or squatted, a meta model, writes into leased weights. Each case
either publishes what the model holds now or raises one tandem.Error naming the thing, and leaves
nothing in /dev/shm (conftest checks that after every test too). Crash-prone cases run in a child
process, so that a regression fails the test instead of killing pytest."""

import os

import pytest
import torch

import tandem
from helpers import CounterpartModel, child_line, python_child, refused


def loaded(name, like):
    """What a fresh follower loads from job `name` into a fresh model like `like`."""
    model = like()
    with tandem.WeightFollower(name) as follower:
        assert follower.load_into(model) is not None
    return model


def inside(tensor, buffer):
    start = buffer.data_ptr()
    return start <= tensor.data_ptr() < start + buffer.numel()


def test_a_parameter_rebound_with_p_data_is_published_as_the_model_holds_it_now(name):
    model = CounterpartModel()
    with tandem.WeightPublisher(model, name) as pub:
        pub.publish(1)
        model.layer.weight.data = torch.full_like(model.layer.weight, 3.0)
        pub.publish(2)
        assert torch.equal(loaded(name, CounterpartModel).layer.weight, torch.full_like(model.layer.weight, 3.0))
        assert inside(model.layer.weight, pub.buffer)  # it views the flat buffer again


def test_a_parameter_or_buffer_replaced_by_another_object_is_published(name):
    model = CounterpartModel()
    with tandem.WeightPublisher(model, name) as pub:
        model.layer.weight = torch.nn.Parameter(torch.full_like(model.layer.weight, 5.0))
        model.steps = torch.tensor([7, 8, 9])
        pub.publish(1)
        got = loaded(name, CounterpartModel)
        assert torch.equal(got.layer.weight, torch.full_like(got.layer.weight, 5.0))
        assert got.steps.tolist() == [7, 8, 9]
        model.layer.weight.data.fill_(6.0)  # the new object is the one published from now on
        pub.publish(2)
        assert bool((loaded(name, CounterpartModel).layer.weight == 6.0).all())


def test_a_dict_of_tensors_whose_entry_is_replaced_is_published_as_it_holds_now(name):
    tensors = {"w": torch.zeros(4, 4), "b": torch.zeros(4)}
    with tandem.WeightPublisher(tensors, name) as pub:
        tensors["w"] = torch.ones(4, 4)
        pub.publish(1)
        with tandem.WeightFollower(name) as follower, follower.lease() as lease:
            assert torch.equal(lease["w"], torch.ones(4, 4))


@pytest.mark.parametrize("convert, now", [(lambda m: m.double(), "float64"), (lambda m: m.half(), "float16"),
                                          (lambda m: m.to("meta"), "on meta")])
def test_a_model_converted_after_its_publisher_was_made_is_a_shape_error_naming_the_tensor(name, convert, now):
    model = CounterpartModel()
    with tandem.WeightPublisher(model, name) as pub:
        assert pub.publish(1) == 1
        convert(model)
        refused(tandem.ShapeError, lambda: pub.publish(2), "'layer.weight'", now, "make a new one")
        assert pub.stats()["latest_version"] == 1  # nothing stale went out


def test_a_follower_whose_model_was_converted_refuses_to_load_and_one_rebound_loads_into_it(name):
    source = CounterpartModel()
    with tandem.WeightPublisher(source, name) as pub, tandem.WeightFollower(name) as follower:
        pub.publish(1)
        model = CounterpartModel()
        assert follower.load_into(model) == 1
        model.layer.weight.data = torch.zeros_like(model.layer.weight)
        with torch.no_grad():
            source.layer.weight.add_(1)
        pub.publish(2)
        assert follower.load_into(model) == 2 and torch.equal(model.layer.weight, source.layer.weight)
        model.double()
        refused(tandem.ShapeError, lambda: follower.load_into(model), "'layer.weight'", "float64")


def test_a_second_publisher_of_one_job_in_one_process_is_refused_and_the_first_keeps_publishing(name):
    first = tandem.WeightPublisher(CounterpartModel(), name)
    first.publish(1)
    refused(tandem.SegmentExistsError, lambda: tandem.WeightPublisher(CounterpartModel(7, 3), name),
            first.slab, "another publisher of this job is still open", "pub.close()")
    assert first.publish(2) == 2 and os.path.exists(f"/dev/shm/{first.slab}")
    with tandem.WeightFollower(name) as follower:
        assert follower.latest_version == 2
    first.close()
    with tandem.WeightPublisher(CounterpartModel(), name) as again:  # a closed publisher hands the name over
        assert again.publish(1) == 1


def test_a_publisher_whose_slab_was_removed_raises_and_never_removes_the_new_one(name):
    old = tandem.WeightPublisher(CounterpartModel(), name)
    old.publish(1)
    os.unlink(f"/dev/shm/{old.slab}")  # `tandem shm rm`
    refused(tandem.SegmentNotFoundError, lambda: old.publish(2), old.slab, "was removed while")
    with tandem.WeightPublisher(CounterpartModel(), name) as new:
        new.publish(1)
        old.close()
        assert os.path.exists(f"/dev/shm/{new.slab}")  # the old handle removed only its own object


def test_an_object_tandem_did_not_make_at_the_slab_name_is_a_foreign_segment_and_is_kept(name):
    path = f"/dev/shm/{tandem.slab_name(name)}"
    with open(path, "wb") as f:
        f.write(b"someone else's bytes" * 400)
    try:
        refused(tandem.ForeignSegmentError, lambda: tandem.WeightPublisher(CounterpartModel(), name), "not a Tandem segment",
                f"rm {path}")
        with open(path, "rb") as f:
            assert f.read(20) == b"someone else's bytes"
    finally:
        os.unlink(path)


def test_a_model_on_the_meta_device_is_refused_at_construction(name):
    model = torch.nn.Linear(4, 4, device="meta")
    refused(tandem.Error, lambda: tandem.WeightPublisher(model, name), "'weight'", "meta device", "to_empty",
            leaves_nothing_of=name)
    with tandem.WeightPublisher(CounterpartModel(), name) as pub:
        pub.publish(1)
        refused(tandem.Error, lambda: tandem.WeightFollower(name).load_into(CounterpartModel().to("meta")), "meta device")


def test_device_slab_on_a_cpu_model_says_in_one_warning_that_it_is_ignored(name):
    with pytest.warns(UserWarning, match="device_slab=True is ignored: the model is on the CPU"):
        pub = tandem.WeightPublisher(CounterpartModel(), name, device_slab=True)
    with pub:
        assert pub.publish(1) == 1 and not os.path.exists(f"/dev/shm/{pub.slab}.cuda")


def test_writing_into_a_lease_or_a_zero_copy_model_stays_in_that_process_and_never_crashes(name):
    model = CounterpartModel()
    with tandem.WeightPublisher(model, name) as pub:
        pub.publish(1)
        child = python_child(f"""
            import torch, tandem
            from helpers import CounterpartModel
            follower = tandem.WeightFollower("{name}")
            with follower.lease() as lease:
                lease["layer.weight"].add_(1)           # an in-place op
                assert torch.equal(lease["layer.weight"], torch.tensor({model.layer.weight.tolist()!r}) + 1)
                lease.flat[:16] = 255                    # a slice assignment
                torch.relu_(lease["layer.bias"])         # an inplace=True activation
            with follower.lease() as again:              # a new lease maps the slot afresh
                assert torch.equal(again["layer.weight"], torch.tensor({model.layer.weight.tolist()!r}))
            zero = CounterpartModel()
            follower.load_into(zero, mode="zero_copy")
            zero.layer.weight.data.mul_(0)               # BatchNorm-style in-place update of a weight
            print("alive", flush=True)
            """, env={"PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])})
        assert child_line(child) == "alive"
        assert child.wait(60) == 0, child.stderr.read()
        got = loaded(name, CounterpartModel)
        assert torch.equal(got.layer.weight, model.layer.weight) and torch.equal(got.layer.bias, model.layer.bias)
