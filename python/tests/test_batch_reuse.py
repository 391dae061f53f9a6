"""DeviceFeed's batches from Python are refilled only once Python has let go of them
(python/bindings/batch_reuse.hpp). The rules run here over CPU tensors through
tandem._tandem._testing.ReusedBatches, which stands in for the feed: each step fills the batches it
was offered back (or new ones, which it counts in `created`) with the step's number, so a batch that
changed under its holder would show."""

import weakref

import torch

from tandem import _tandem

STREAM, OTHER_STREAM = 7, 8


def step(r, consumers=1, stream=STREAM, rows=4):
    batches = r.step(consumers, stream, rows)
    return batches[0] if consumers == 1 else batches


def loop(r, steps=6):
    """`for x, y in feed` dropping each batch: the loop's names hold one batch while the next is made."""
    for _ in range(steps):
        x, y = step(r)
        assert float(x.max()) == float(x.min()) == float(y[0])  # wholly this step's


def test_a_loop_that_drops_its_batches_refills_two_of_them_for_ever():
    r = _tandem._testing.ReusedBatches(3)
    loop(r, 20)
    assert r.created == 2


KEEPERS = {
    "x": lambda x, y: x,
    "y": lambda x, y: y,
    "a view of x": lambda x, y: x[1],
    "a tuple of both": lambda x, y: (x, y),
    "an autograd graph that saved x": lambda x, y: (x * torch.ones(2, requires_grad=True)).sum(),
    "a weak reference to x": lambda x, y: weakref.ref(x),
    "x requiring grad": lambda x, y: x.requires_grad_() is None,
    "an attribute set on y": lambda x, y: setattr(y, "tag", 1),
}


def test_each_way_of_holding_on_keeps_a_batch_from_being_refilled():
    for what, keep in KEEPERS.items():
        r = _tandem._testing.ReusedBatches(3)
        x, y = step(r)
        kept = keep(x, y)
        del x, y
        loop(r)
        assert r.created == 3, what  # one more than the loop alone needs: the kept batch stayed out
        if isinstance(kept, torch.Tensor) and kept.grad_fn is None:  # the batch itself, or a view of it
            assert float(kept.max()) == float(kept.min()) == 1.0, what  # still step 1's values
        del kept


def test_a_batch_let_go_of_later_is_refilled_again():
    r = _tandem._testing.ReusedBatches(3)
    kept = step(r)
    loop(r)
    del kept
    loop(r)
    assert r.created == 3


def test_another_stream_or_other_rows_get_new_batches_and_the_cache_stays_bounded():
    r = _tandem._testing.ReusedBatches(2)
    step(r)
    step(r, stream=OTHER_STREAM)
    assert r.created == 2  # the first was free, but filled on another stream
    step(r, rows=3)
    assert r.created == 3
    held = [step(r) for _ in range(5)]  # more held than the cache keeps
    assert r.created == 8
    assert all(float(x.max()) == float(y[0]) for x, y in held)
    del held
    loop(r)
    assert r.created <= 9  # at most one more: the cache kept two of them


def test_each_consumer_gets_its_own_batch():
    r = _tandem._testing.ReusedBatches(6)
    for _ in range(5):
        batches = step(r, consumers=3)
        assert len({x.data_ptr() for x, _ in batches}) == 3
    assert r.created == 6
