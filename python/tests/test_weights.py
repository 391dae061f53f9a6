"""tandem.WeightPublisher and tandem.WeightFollower against the C++ publisher and follower."""

import time

import pytest
import torch

import tandem
from helpers import Peer, CounterpartModel, child_line, flat_bytes, kill, mapping_of, python_child

testing = tandem._tandem._testing


def test_python_publish_reaches_the_cpp_follower_byte_identical_in_increasing_versions(name, tmp_path):
    model = CounterpartModel()
    versions = []
    with tandem.WeightPublisher(model, name, model_name="counterpart") as pub:
        for step in (1, 2):
            with torch.no_grad():
                model.layer.weight.add_(step)
            v = pub.publish(step)
            with Peer("follow", "--slab", pub.slab, "--min-version", v, "--dump", tmp_path / "w") as p:
                assert p.line()["version"] == v
                p.finish()
            assert (tmp_path / "w").read_bytes() == pub.buffer.numpy().tobytes()
            versions.append(v)
    assert versions[1] > versions[0] >= 1


def test_cpp_publish_reaches_the_python_follower_byte_identical_in_increasing_versions(name, tmp_path):
    slab = tandem.slab_name(name)
    with Peer("publish", "--slab", slab, "--seed", 3, "--dump", tmp_path / "w") as p:
        v1 = p.line()["version"]
        follower, model = tandem.WeightFollower(name), CounterpartModel()
        assert follower.load_into(model) == v1 and follower.load_into(model) is None
        assert flat_bytes(model).numpy().tobytes() == (tmp_path / "w").read_bytes()
        with follower.lease() as lease:
            assert lease.version == v1
            assert lease.flat.numpy().tobytes() == (tmp_path / "w").read_bytes()
            assert torch.equal(lease["layer.weight"], model.layer.weight)
            assert mapping_of(lease["layer.weight"].data_ptr()) == f"/dev/shm/{slab}"
        p.send("publish")
        v2 = p.line()["version"]
        assert v2 > v1 and follower.load_into(model) == v2
        assert flat_bytes(model).numpy().tobytes() == (tmp_path / "w").read_bytes()
        follower.close()
        p.finish()


def test_no_torn_read_is_accepted_with_the_cpp_writer_at_full_speed_for_10_s(name):
    with Peer("publish", "--slab", tandem.slab_name(name), "--in", 1024, "--out", 2048, "--seconds", 10) as p:
        p.line()
        follower, model = tandem.WeightFollower(name), CounterpartModel(1024, 2048)
        p.send("go")
        loads = leases = torn = last = 0
        increasing = True
        end = time.monotonic() + 10
        while time.monotonic() < end:
            v = follower.load_into(model)
            if v is not None:
                loads += 1
                increasing &= v > last
                last = v
                torn += not testing.check_verify_pattern(flat_bytes(model), v)
            with follower.lease() as lease:
                leases += 1
                torn += not testing.check_verify_pattern(lease.flat, lease.version)
        writer = p.line(30)
        follower.close()
        p.finish()
    print("cpp writer:", writer, "python reads:", loads, leases, torn)
    assert torn == 0 and increasing and loads > 50 and leases > 50, (loads, leases, writer)
    assert writer["committed"] > 200


def test_no_torn_read_is_accepted_with_the_python_writer_at_full_speed_for_10_s(name):
    model = CounterpartModel(1024, 2048)
    with tandem.WeightPublisher(model, name, model_name="counterpart") as pub:
        with Peer("follow", "--slab", pub.slab, "--in", 1024, "--out", 2048, "--seconds", 10) as p:
            p.line()
            committed, step = 0, 0
            end = time.monotonic() + 10.5
            while time.monotonic() < end:
                step += 1
                testing.fill_verify_pattern(pub.buffer, pub.next_version)
                committed += pub.publish(step) is not None
            reader = p.line(30)
            p.finish()
    print("python writer:", committed, "cpp reads:", reader)
    assert reader["torn"] == 0 and reader["increasing"], reader
    assert reader["loads"] > 50 and reader["leases"] > 50 and committed > 200, (reader, committed)


def test_a_python_process_sigkilled_holding_a_lease_does_not_stall_the_writer(name):
    with tandem.WeightPublisher(CounterpartModel(), name, slots=2) as pub:
        pub.publish(1)
        child = python_child(f"""
            import sys, tandem
            lease = tandem.WeightFollower("{name}").lease()
            print(lease.version, flush=True)
            sys.stdin.readline()
            """)
        assert int(child_line(child)) == 1
        assert pub.publish(2) == 2          # the other slot
        assert pub.publish(3) is None       # the only free slot is leased by a live reader: skipped
        kill(child)
        start = time.monotonic()
        assert pub.publish(4) == 4          # reclaimed at once
        assert time.monotonic() - start < 0.5
        assert pub.stats()["reclaimed"] >= 1 and all(pub.publish(s) is not None for s in range(5, 20))


def test_bf16_publishing_halves_the_bytes_and_loads_back_rounded(name):
    model, copy = CounterpartModel(), CounterpartModel()
    with torch.no_grad():
        model.steps.copy_(torch.tensor([1, 2, 3]))
    with tandem.WeightPublisher(model, name, bf16=True) as pub:
        pub.publish(1)
        with tandem.WeightFollower(name) as follower:
            assert follower.info()["publish_dtype"] == "bfloat16"
            assert follower.load_into(copy) == 1
    assert torch.equal(copy.layer.weight, model.layer.weight.bfloat16().float())
    assert torch.equal(copy.steps, model.steps)


def test_zero_copy_loading_points_the_model_into_the_leased_slot(name):
    model, reader = CounterpartModel(), CounterpartModel()
    with tandem.WeightPublisher(model, name) as pub:
        pub.publish(1)
        follower = tandem.WeightFollower(name)
        assert follower.load_into(reader, mode="zero_copy") == 1
        assert mapping_of(reader.layer.weight.data_ptr()) == f"/dev/shm/{pub.slab}"
        assert torch.equal(reader.layer.weight, model.layer.weight)
        with torch.no_grad():
            model.layer.bias.fill_(7)
        pub.publish(2)
        assert follower.load_into(reader) == 2 and bool((reader.layer.bias == 7).all())
        follower.close()


def test_waiting_for_a_version_that_does_not_come_raises_timeout_error(name):
    with tandem.WeightPublisher(CounterpartModel(), name) as pub:
        pub.publish(1)
        with tandem.WeightFollower(name) as follower:
            assert follower.wait() == 1
            with pytest.raises(TimeoutError):
                follower.wait(newer_than=1, timeout=0.05)


def test_the_publisher_removes_its_slab_when_closed(name):
    pub = tandem.WeightPublisher(CounterpartModel(), name)
    import os
    assert os.path.exists(f"/dev/shm/{pub.slab}")
    pub.close()
    assert not os.path.exists(f"/dev/shm/{pub.slab}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_cuda_model_publishes_asynchronously_and_a_cpu_follower_reads_it(name):
    model = CounterpartModel(1024, 2048).cuda()
    with tandem.WeightPublisher(model, name, device_slab=True) as pub:
        v = pub.publish(1)
        pub.flush()
        with tandem.WeightFollower(name) as follower:
            cpu = CounterpartModel(1024, 2048)
            assert follower.load_into(cpu) == v
            assert torch.equal(cpu.layer.weight, model.layer.weight.cpu())
            gpu = CounterpartModel(1024, 2048).cuda()
            assert follower.load_into(gpu) == v and torch.equal(gpu.layer.weight, model.layer.weight)
