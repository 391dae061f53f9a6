"""The package itself: what it exports, its type stubs, and that its waits let other threads run."""

import pathlib
import threading
import time

import pytest

import tandem
from helpers import PeerModel


def test_the_package_exports_every_part_and_ships_type_stubs():
    for part in ("Dataset", "preload", "HostFeed", "DeviceFeed", "WeightPublisher", "WeightFollower",
                 "ExperienceRings", "ExperienceWriter", "job", "Error"):
        assert hasattr(tandem, part)
    here = pathlib.Path(tandem.__file__).parent
    assert (here / "_tandem.pyi").is_file() and (here / "py.typed").is_file()


def test_a_blocking_wait_releases_the_gil(name):
    counted = []

    def count():
        end = time.monotonic() + 0.5
        n = 0
        while time.monotonic() < end:
            n += 1
        counted.append(n)

    with tandem.WeightPublisher(PeerModel(), name) as pub:
        with tandem.WeightFollower(name) as follower:
            t = threading.Thread(target=count)
            t.start()
            with pytest.raises(TimeoutError):
                follower.wait(timeout=0.6)   # nothing published: waits the whole time
            t.join()
    assert counted[0] > 100000  # the counting thread ran while the main thread waited
