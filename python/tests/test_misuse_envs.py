"""tandem.envs misused, as a new user (or a hostile caller) does it: names in another spelling or not
printable, a plugin path with a NUL byte, thread counts past the config's bound, actions too wide for
int32, sparse actions, an env used in a child after fork(). Each is one tandem.Error line naming the
Python argument (never the job config's `env.name`), or the spelling is taken."""

import os
import select
import signal
import time

import numpy as np
import pytest
import torch

import tandem
import tandem.envs
from helpers import refused

BUILTIN = ["cartpole", "acrobot", "mountaincar", "pendulum", "hopper", "walker2d", "halfcheetah", "ant", "humanoid",
           "breakout", "null"]


def test_names_lists_the_built_in_envs():
    assert tandem.envs.names() == BUILTIN


@pytest.mark.parametrize("spelling,name", [
    ("Hopper", "Hopper"), ("Hopper-v5", "Hopper"), ("HOPPER", "Hopper"), ("HalfCheetah-v5", "HalfCheetah"),
    ("walker2d-v5", "Walker2d"), ("Ant-v5", "Ant"), ("Humanoid-v5", "Humanoid"), ("humanoid", "Humanoid"),
    ("CartPole-v1", "CartPole-v1"), ("cartpole-V1", "CartPole-v1"),
    ("Pendulum-v1", "Pendulum-v1"), ("Acrobot-v1", "Acrobot-v1"), ("MountainCar-v0", "MountainCar-v0"),
    ("Breakout", "Breakout"), ("NULL", "null")])
def test_a_built_in_env_is_taken_by_any_case_of_its_name_and_by_its_gymnasium_id(spelling, name):
    with tandem.envs.make(spelling, num_envs=1) as envs:
        assert envs.spec["name"] == name


def test_a_name_that_is_no_env_names_the_argument_and_the_choices_never_the_config_key():
    message = refused(tandem.Error, lambda: tandem.envs.make("Hopper-v4"), "name='Hopper-v4'", "tandem.envs.names()")
    assert "env.name" not in message and "config:" not in message
    refused(tandem.Error, lambda: tandem.envs.make("cartpol"), "name='cartpol'", "cartpole")


def test_a_long_or_unprintable_name_is_shown_cut_and_escaped_on_one_line():
    message = refused(tandem.Error, lambda: tandem.envs.make("x" * 10000), "name='" + "x" * 60 + "'...")
    assert len(message) < 400, len(message)
    refused(tandem.Error, lambda: tandem.envs.make("cart\x00pole"), r"name='cart\x00pole'")
    refused(tandem.Error, lambda: tandem.envs.make("cart\npole"), r"name='cart\x0apole'")
    refused(tandem.Error, lambda: tandem.envs.make("cart\x1b[2Jpole"), r"name='cart\x1b[2Jpole'")


def corridor():
    plugin = os.environ.get("TANDEM_CORRIDOR_PLUGIN")
    if not plugin:
        pytest.skip("TANDEM_CORRIDOR_PLUGIN is not set (meson test sets it to examples/plugin_env's library)")
    return plugin


def test_a_plugin_path_with_a_nul_byte_is_refused_not_loaded_cut_at_the_nul():
    plugin = corridor()
    refused(tandem.Error, lambda: tandem.envs.make("plugin", plugin=plugin + "\x00.bak"), "plugin=", "NUL")
    refused(tandem.Error, lambda: tandem.envs.make("plugin", plugin="lib\x00.so"), r"plugin='lib\x00.so'", "NUL")


def test_a_plugin_that_does_not_load_names_the_argument_not_the_config_key():
    message = refused(tandem.Error, lambda: tandem.envs.make("plugin", plugin="/nonexistent/lib.so"),
                      "plugin='/nonexistent/lib.so'")
    assert "env.plugin" not in message
    message = refused(tandem.Error, lambda: tandem.envs.make("plugin", plugin="/etc/hostname"), "/etc/hostname")
    assert "env.plugin" not in message


def test_threads_take_the_job_configs_bound():
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", num_envs=300, threads=257), "threads=257", "1..256")
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", num_envs=70000), "num_envs=70000", "1..65536")
    lo, hi = tandem._tandem.LIMITS["env_threads"]
    assert (lo, hi) == (1, 256)
    assert tandem._tandem.LIMITS["num_envs"] == (1, 65536)


@pytest.mark.parametrize("action", [2**32 + 1, 2**32, 2**40, -2**32, 2**63 - 1, -2**63])
def test_a_discrete_action_beyond_int32_is_out_of_range_not_narrowed(action):
    with tandem.envs.make("cartpole", num_envs=2) as envs:
        envs.reset(seed=0)
        refused(tandem.ShapeError, lambda: envs.step(np.array([0, action], dtype=np.int64)), "out of range",
                str(action), "0..1")
        refused(tandem.ShapeError, lambda: envs.step(torch.tensor([action, 0])), "out of range", str(action))
    with tandem.envs.make("cartpole", num_envs=2, batch_size=2) as envs:
        _, info = envs.reset(seed=0)
        refused(tandem.ShapeError, lambda: envs.send(np.array([action, 0]), info["env_id"]), "out of range")


def test_sparse_actions_are_refused_naming_them():
    with tandem.envs.make("cartpole", num_envs=2) as envs:
        envs.reset(seed=0)
        refused(tandem.ShapeError, lambda: envs.step(torch.zeros(2, dtype=torch.long).to_sparse()), "actions",
                "sparse", "to_dense()")
    with tandem.envs.make("pendulum", num_envs=2) as envs:
        envs.reset(seed=0)
        refused(tandem.ShapeError, lambda: envs.step(torch.zeros(2, 1).to_sparse()), "actions", "sparse")
    with tandem.envs.make("cartpole", num_envs=2, batch_size=2) as envs:
        _, info = envs.reset(seed=0)
        ids = torch.as_tensor(info["env_id"])
        refused(tandem.ShapeError, lambda: envs.send(torch.zeros(2, dtype=torch.long).to_sparse(), ids), "actions",
                "sparse")
        refused(tandem.ShapeError, lambda: envs.send(torch.zeros(2, dtype=torch.long), ids.to_sparse()), "env_id",
                "sparse")


def in_child(body, timeout=20.0):
    """Runs `body()` in a fork()ed child and returns the line it wrote; the child is killed and the test
    fails when it does not answer and exit within `timeout` s (a hang)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            text = body()
        except BaseException as e:  # noqa: BLE001  reported to the parent, whatever it is
            text = f"{type(e).__name__}: {e}"
        os.write(write, (text.replace("\n", "\\n") + "\n").encode())
        os._exit(0)
    os.close(write)
    deadline = time.monotonic() + timeout
    out, status = b"", None
    try:
        while status is None and time.monotonic() < deadline:
            if select.select([read], [], [], 0.01)[0]:
                out += os.read(read, 65536)
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
        while status is not None and select.select([read], [], [], 0)[0]:  # what it wrote before exiting
            chunk = os.read(read, 65536)
            if not chunk:
                break
            out += chunk
    finally:
        os.close(read)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert status is not None, f"the child hung (it answered {out!r})"
    assert status == 0, f"the child died (status {status}, answered {out!r})"
    return out.decode().strip()


@pytest.mark.parametrize("batch_size", [None, 2])
def test_an_env_used_in_a_child_after_fork_is_refused_there_and_goes_on_in_the_parent(batch_size):
    envs = tandem.envs.make("cartpole", num_envs=2, batch_size=batch_size, threads=2, seed=0)
    _, info = envs.reset(seed=0)
    ids = info.get("env_id")
    step = (lambda: envs.step(np.zeros(2, dtype=np.int64))) if batch_size is None else \
        (lambda: envs.step(np.zeros(2, dtype=np.int64), ids))

    def child():
        try:
            step()
            return "stepped"
        except tandem.Error as e:
            message = f"{type(e).__name__}: {e}"
        envs.close()  # the env's threads are the parent's: the child must not join them
        return message

    answer = in_child(child)
    assert answer.startswith("Error: ") and "fork" in answer and "make the env in the child" in answer, answer
    step()  # the parent's env is untouched
    envs.close()
