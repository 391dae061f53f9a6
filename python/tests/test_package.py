"""The package itself: what it exports, its type stubs, and that its waits let other threads run."""

import pathlib
import shutil
import subprocess
import threading
import time

import pytest

import tandem
from helpers import CounterpartModel


def test_the_package_exports_every_part_and_ships_type_stubs():
    for part in ("Dataset", "preload", "HostFeed", "DeviceFeed", "WeightPublisher", "WeightFollower",
                 "ExperienceRings", "ExperienceWriter", "job", "Error"):
        assert hasattr(tandem, part)
    here = pathlib.Path(tandem.__file__).parent
    assert (here / "_tandem.pyi").is_file() and (here / "py.typed").is_file()


def test_the_extension_exports_its_init_function_alone():
    # Any other exported definition (our copies of libstdc++'s templates above all) is what libraries
    # loaded after the extension bind to: libmujoco crashed in a copy of std::istream's (export.map).
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    from tandem import _tandem
    out = subprocess.run(["nm", "-D", "--defined-only", _tandem.__file__], capture_output=True, text=True,
                         check=True).stdout
    linker_marks = {"__bss_start", "_edata", "_end"}
    exported = [fields[-1] for fields in map(str.split, out.splitlines())
                if fields[1] in "TDBRVWiu" and fields[-1] not in linker_marks]  # upper case: global
    assert exported == ["PyInit__tandem"], exported[:10]


def test_a_blocking_wait_releases_the_gil(name):
    counted = []

    def count():
        end = time.monotonic() + 0.5
        n = 0
        while time.monotonic() < end:
            n += 1
        counted.append(n)

    with tandem.WeightPublisher(CounterpartModel(), name):
        with tandem.WeightFollower(name) as follower:
            t = threading.Thread(target=count)
            t.start()
            with pytest.raises(TimeoutError):
                follower.wait(timeout=0.6)   # nothing published: waits the whole time
            t.join()
    assert counted[0] > 100000  # the counting thread ran while the main thread waited


def test_the_stubs_name_every_class_and_member_of_the_extension():
    import ast
    stubs = ast.parse((pathlib.Path(tandem.__file__).parent / "_tandem.pyi").read_text())
    declared = {}
    for node in stubs.body:
        if isinstance(node, ast.ClassDef):
            declared[node.name] = {n.name if isinstance(n, ast.FunctionDef) else n.target.id
                                   for n in node.body if isinstance(n, (ast.FunctionDef, ast.AnnAssign))}
        elif isinstance(node, ast.FunctionDef):
            declared[node.name] = set()
        elif isinstance(node, ast.AnnAssign):  # a module attribute (LIMITS)
            declared[node.target.id] = set()
    ext = tandem._tandem
    for name in dir(ext):
        if name.startswith("__"):
            continue
        assert name in declared, f"_tandem.{name} has no stub"
        obj = getattr(ext, name)
        if isinstance(obj, type):
            members = {m for m in vars(obj) if not m.startswith("_")}
            assert members <= declared[name], f"_tandem.{name}: no stub for {members - declared[name]}"
