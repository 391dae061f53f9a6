"""Fixtures of the `tandem` package's tests: unique segment names, the C++ counterpart, a Fashion-MNIST cache.

Every segment a test makes is named after this session (tandem.py<pid>...), and after each test no
such segment may be left in /dev/shm (the session's Fashion-MNIST cache aside, removed at the end).
Run by `meson test --suite python` (./tools/test); by hand:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests
"""

import itertools
import os
import pathlib

import pytest

import tandem
from helpers import SESSION, shm_names

FMNIST_FROM = "/usr/share/datasets/fashion-mnist"
_counter = itertools.count()


@pytest.fixture
def name():
    """A name no other test (or session) uses: a job id or cache name."""
    return f"{SESSION}-{next(_counter)}"


@pytest.fixture(scope="session")
def fmnist():
    """Fashion-MNIST preloaded from Debian's dataset-fashion-mnist under this session's name."""
    if not pathlib.Path(FMNIST_FROM).is_dir():
        pytest.skip(f"{FMNIST_FROM} is missing (apt-get install dataset-fashion-mnist)")
    cache = f"{SESSION}-fmnist"
    ds = tandem.preload(cache, FMNIST_FROM, progress=False)
    yield ds
    ds.close()
    tandem.remove_dataset(cache)


@pytest.fixture(autouse=True)
def no_segment_left(request):
    before = shm_names()
    yield
    left = sorted(n for n in shm_names() - before if not n.endswith("-fmnist"))
    for n in left:  # clean up for the next test, then fail this one
        os.unlink(f"/dev/shm/{n}")
    assert not left, f"segments left in /dev/shm: {left}"
