"""tandem.HostFeed and tandem.DeviceFeed: the C++ feeds as Python iterables."""

import threading

import pytest
import torch

import tandem
from helpers import Peer, child_line, python_child


def feed_bytes(feed, steps):
    out = bytearray()
    for _ in range(steps):
        for x, y in feed.next_step().batches:
            out += x.numpy().tobytes() + y.numpy().tobytes()
    return bytes(out)


@pytest.mark.parametrize("seed,rank,epoch", [(0, 0, 0), (7, 1, 3), (123, 2, 1)])
def test_python_batches_are_byte_equal_to_the_cpp_feeds(fmnist, tmp_path, seed, rank, epoch):
    args = dict(batch=64, consumers=2, seed=seed, rank=rank, world=3, epoch=epoch, steps=5)
    out = tmp_path / "cpp.bin"
    with Peer("feed", "--dataset", fmnist.name, "--mean", 0.5, "--std", 0.25, "--out", out,
              *[a for k, v in args.items() for a in (f"--{k}", v)]) as p:
        p.line()
        p.finish()
    feed = tandem.HostFeed(fmnist, 64, consumers=2, seed=seed, rank=rank, world_size=3, epoch=epoch, mean=0.5,
                           std=0.25, device="cpu")
    ours = feed_bytes(feed, 5)
    assert len(ours) == 5 * 2 * 64 * (784 * 4 + 8)
    assert ours == out.read_bytes()


def test_an_iteration_is_the_rest_of_one_epoch_and_the_next_one_starts_the_next(fmnist):
    feed = tandem.HostFeed(fmnist, 10000, split="test", drop_last=True, device="cpu", epoch=4, ring_slots=2)
    assert len(feed) == 1 and feed.epoch == 4
    seen = [y.clone() for _, y in feed]
    assert len(seen) == 1 and feed.epoch == 5
    again = [y.clone() for _, y in feed]
    assert feed.epoch == 6
    assert sorted(seen[0].tolist()) == sorted(again[0].tolist()) and not torch.equal(seen[0], again[0])


def test_breaking_out_of_an_epoch_leaves_the_rest_of_it_to_the_next_loop(fmnist):
    steps = [y.clone() for _, y in tandem.HostFeed(fmnist, 2000, split="test", device="cpu", seed=3)]
    feed = tandem.HostFeed(fmnist, 2000, split="test", device="cpu", seed=3)
    epoch = iter(feed)
    del feed  # the iterator keeps its feed alive
    first = [y.clone() for _, (_, y) in zip(range(2), epoch)]
    rest = [y.clone() for _, y in epoch]
    assert len(steps) == 5 and len(first) == 2 and len(rest) == 3
    assert all(torch.equal(a, b) for a, b in zip(steps, first + rest))


def test_batches_are_normalised_floats_of_the_caches_samples(fmnist):
    feed = tandem.HostFeed(fmnist, 32, split="test", device="cpu", mean=0.5, std=0.25)
    x, y = next(iter(feed))
    assert x.dtype == torch.float32 and x.shape == (32, 1, 28, 28) and y.dtype == torch.int64
    raw = fmnist["x"][60000:].float().div(255).sub(0.5).div(0.25)
    labels = fmnist["y"][60000:]
    for i in range(32):
        match = ((raw - x[i]).abs().flatten(1).amax(1) < 1e-5).nonzero().flatten()  # x * scale + bias rounds
        assert any(int(labels[j]) == int(y[i]) for j in match)


def test_each_consumer_gets_its_own_storage(fmnist):
    feed = tandem.HostFeed(fmnist, 16, consumers=3, device="cpu")
    batches = next(iter(feed))
    assert len(batches) == 3
    ptrs = {t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()
            for b in batches for t in b}
    assert len(ptrs) == 6


def test_rank_and_world_size_come_from_torchruns_variables(fmnist):
    code = f"""
        import tandem
        feed = tandem.HostFeed("{fmnist.name}", 100, drop_last=True, device="cpu")
        print(len(feed), flush=True)
        """
    alone = child_line(python_child(code, env={"RANK": None, "WORLD_SIZE": None, "SLURM_PROCID": None}))
    p = python_child(code, env={"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    assert (int(alone), int(child_line(p))) == (600, 150)


def test_holding_every_ring_slot_raises_instead_of_waiting_for_ever(fmnist):
    feed = tandem.HostFeed(fmnist, 64, device="cpu", ring_slots=3)
    kept = [feed.next_step() for _ in range(3)]
    with pytest.raises(tandem.Error, match="still referenced"):
        feed.next_step()
    kept.pop(0)
    assert feed.next_step().index == 3


def test_a_feed_asked_for_steps_from_two_threads_at_once_refuses_the_second(fmnist):
    # Big batches on one gather thread: each step spends milliseconds in C++ with the GIL let go, so the
    # two threads' calls overlap from the first step on.
    feed = tandem.HostFeed(fmnist, 8192, device="cpu", workers=1)
    errors, steps = {}, {}

    def take(name):
        steps[name] = 0
        try:
            for _ in range(40):
                feed.next_step()
                steps[name] += 1
        except tandem.Error as e:
            errors[name] = str(e)

    threads = [threading.Thread(target=take, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    # The refused thread stops there; the other one takes every step it asked for.
    assert len(errors) == 1, steps
    [(refused, message)] = errors.items()
    assert message.startswith("HostFeed: a step was asked for from two threads at once") and "\n" not in message
    assert steps[({"a", "b"} - {refused}).pop()] == 40
    feed.next_step()  # a refusal leaves the feed usable


def test_device_feed_without_a_gpu_says_so_in_one_line(fmnist):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(tandem.Error) as e:
        tandem.DeviceFeed(fmnist, 64)
    assert "\n" not in str(e.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_device_feed_refills_only_batches_python_dropped(fmnist):
    fresh = [(x.clone(), y.clone()) for x, y in tandem.DeviceFeed(fmnist, 2000, drop_last=True, seed=2)]
    feed = tandem.DeviceFeed(fmnist, 2000, drop_last=True, seed=2)
    kept_x = kept_y = kept_row = None
    for i, (x, y) in enumerate(feed):
        assert torch.equal(x, fresh[i][0]) and torch.equal(y, fresh[i][1])
        if i == 2:
            kept_x, kept_y = x, y  # the whole batch, held
        if i == 3:
            kept_row = x[5]  # a view alone holds its batch too
    torch.cuda.synchronize()
    assert torch.equal(kept_x, fresh[2][0]) and torch.equal(kept_y, fresh[2][1])
    assert torch.equal(kept_row, fresh[3][0][5])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_both_feeds_give_the_same_batches_on_the_device(fmnist):
    host = tandem.HostFeed(fmnist, 128, device="cuda", seed=5, mean=0.5, std=0.25)
    device = tandem.DeviceFeed(fmnist, 128, seed=5, mean=0.5, std=0.25)
    for _ in range(3):
        (hx, hy), (dx, dy) = next(iter(host)), next(iter(device))
        assert hx.is_cuda and dx.is_cuda
        assert torch.equal(hy, dy) and torch.allclose(hx, dx)


def test_a_float32_dataset_feeds_normalised_samples_and_float32_targets_of_any_shape(name, tmp_path):
    """A regression dataset (a surrogate's fields and targets) saved as float32 .npy files."""
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(96, 2, 16)).astype(np.float32)
    y = rng.normal(size=(96, 4)).astype(np.float32)
    np.save(tmp_path / "x_train.npy", x)
    np.save(tmp_path / "y_train.npy", y)
    ds = tandem.preload(name, tmp_path, progress=False)
    try:
        feed = tandem.HostFeed(ds, 32, device="cpu", mean=[3.0, 1.0], std=[2.0, 0.5], seed=1)
        seen = 0
        for xb, yb in feed:
            assert xb.dtype == torch.float32 and xb.shape == (32, 2, 16)
            assert yb.dtype == torch.float32 and yb.shape == (32, 4)
            rows = [int(np.flatnonzero((y == t.numpy()).all(axis=1))[0]) for t in yb]  # targets are unique
            want = (torch.from_numpy(x[rows]) - torch.tensor([3.0, 1.0]).view(1, 2, 1)) / torch.tensor(
                [2.0, 0.5]).view(1, 2, 1)
            assert torch.allclose(xb, want, atol=1e-5)
            seen += len(rows)
        assert seen == 96
        del feed, xb, yb
    finally:
        ds.close()
        tandem.remove_dataset(name)
