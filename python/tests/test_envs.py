"""tandem.envs: Tandem's C++ envs from a Python loop with Gymnasium's vector API. The reset/step/auto-reset
contract, seeds, threads, send/recv, both backends, a plugin env, MuJoCo, and wrong arguments."""

import os
import threading
import time

import numpy as np
import pytest
import torch

import tandem
import tandem.envs
from helpers import refused

MUJOCO_SPACES = {"hopper": (11, 3), "walker2d": (17, 6), "halfcheetah": (17, 6), "ant": (105, 8), "humanoid": (348, 17)}
MUJOCO = list(MUJOCO_SPACES)


def rollout(envs, steps, actions_of):
    """Steps `envs`, returning the stacked observations, rewards and done flags."""
    obs_seen, rewards_seen, done_seen = [], [], []
    for t in range(steps):
        obs, rew, term, trunc, info = envs.step(actions_of(t))
        obs_seen.append(obs.copy())
        rewards_seen.append(rew.copy())
        done_seen.append(term | trunc)
    return np.stack(obs_seen), np.stack(rewards_seen), np.stack(done_seen)


def test_reset_and_step_follow_gymnasiums_vector_api_with_the_spaces_it_reads():
    with tandem.envs.make("cartpole", num_envs=4, seed=1) as envs:
        assert envs.num_envs == 4
        assert envs.single_observation_space.shape == (4,) and envs.single_observation_space.dtype == np.float32
        assert isinstance(envs.single_action_space, tandem.envs.Discrete) and envs.single_action_space.n == 2
        obs, info = envs.reset(seed=3)
        assert obs.shape == (4, 4) and obs.dtype == np.float32 and info == {}
        assert np.all(np.abs(obs) <= 0.05)  # CartPole's reset range
        obs, rew, term, trunc, info = envs.step(np.zeros(4, dtype=np.int64))
        assert obs.shape == (4, 4) and rew.dtype == np.float32 and term.dtype == np.bool_ and trunc.dtype == np.bool_
        assert np.all(rew == 1.0)
        assert set(info) == {"final_observation", "_final_observation", "episode", "_episode"}


def test_the_step_that_ends_an_episode_returns_the_next_episodes_first_observation_and_the_last_in_info():
    with tandem.envs.make("cartpole", num_envs=2, seed=0) as envs:
        obs, _ = envs.reset(seed=0)
        for t in range(200):  # always pushing left ends an episode within a few dozen steps
            prev = obs
            obs, rew, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
            if term.any():
                i = int(np.flatnonzero(term)[0])
                assert info["_final_observation"][i] and info["_episode"][i]
                last = info["final_observation"][i]
                assert abs(last[2]) > 0.2 or abs(last[0]) > 2.4  # the pole fell or the cart left: terminated
                assert np.all(np.abs(obs[i]) <= 0.05)  # auto-reset: already the next episode's first one
                assert info["episode"]["l"][i] == t + 1 and info["episode"]["r"][i] == t + 1
                assert not np.array_equal(prev[i], obs[i])
                return
        pytest.fail("no CartPole episode ended in 200 steps of pushing left")


def test_the_same_seed_gives_the_same_trajectories_reset_seed_restarts_them_and_another_seed_differs():
    push = lambda t: np.full(3, t % 2, dtype=np.int64)  # noqa: E731
    with tandem.envs.make("cartpole", num_envs=3) as a, tandem.envs.make("cartpole", num_envs=3) as b:
        ra, rb = rollout_from(a, 7, 100, push), rollout_from(b, 7, 100, push)
        assert all(np.array_equal(x, y) for x, y in zip(ra, rb))
        assert np.array_equal(rollout_from(a, 7, 100, push)[0], ra[0])  # reset(seed=) restarts the streams
        assert not np.array_equal(rollout_from(b, 8, 100, push)[0], ra[0])
        a.reset(seed=7)
        rollout(a, 10, push)
        a.reset()  # no seed: the streams go on, so new episodes
        assert not np.array_equal(rollout(a, 100, push)[0], ra[0])


def rollout_from(envs, seed, steps, actions_of):
    envs.reset(seed=seed)
    return rollout(envs, steps, actions_of)


def test_any_number_of_threads_steps_the_same_trajectories():
    act = lambda t: np.random.default_rng(t).uniform(-2, 2, (6, 1)).astype(np.float32)  # noqa: E731
    with tandem.envs.make("pendulum", num_envs=6, threads=1) as one, \
            tandem.envs.make("pendulum", num_envs=6, threads=3) as three:
        assert three.threads == 3
        r1, r3 = rollout_from(one, 5, 50, act), rollout_from(three, 5, 50, act)
        assert all(np.array_equal(x, y) for x, y in zip(r1, r3))


def test_send_then_recv_is_a_step_and_python_runs_while_the_envs_step():
    with tandem.envs.make("cartpole", num_envs=8, seed=2) as a, tandem.envs.make("cartpole", num_envs=8, seed=2) as b:
        a.reset(seed=2)
        b.reset(seed=2)
        for t in range(20):
            actions = np.full(8, t % 2, dtype=np.int64)
            a.send(actions)
            got = a.recv()
            want = b.step(actions)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        refused(tandem.Error, a.recv, "recv() without a send()")
        a.send(np.zeros(8, dtype=np.int64))
        refused(tandem.Error, lambda: a.send(np.zeros(8, dtype=np.int64)), "call recv() first")
        a.recv()


def test_the_gil_is_released_while_the_envs_step():
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    with tandem.envs.make("cartpole", num_envs=4096, seed=0) as envs:
        envs.reset(seed=0)
        actions = np.zeros(4096, dtype=np.int64)
        thread = threading.Thread(target=ticker)
        thread.start()
        start = time.perf_counter()
        for _ in range(50):
            envs.step(actions)
        took = time.perf_counter() - start
        stop.set()
        thread.join()
    during = [t for t in ticks if start <= t <= start + took]
    assert len(during) > 10, (len(during), took)  # the other thread ran while the loop stepped


def test_outputs_are_new_arrays_each_step_and_torch_tensors_on_request():
    with tandem.envs.make("cartpole", num_envs=2, seed=0) as envs:
        first, _ = envs.reset(seed=0)
        kept = first.copy()
        envs.step(np.ones(2, dtype=np.int64))
        assert np.array_equal(first, kept)  # the step wrote into a new array
    with tandem.envs.make("pendulum", num_envs=2, seed=0, backend="torch") as envs:
        obs, _ = envs.reset(seed=0)
        assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32 and obs.shape == (2, 3)
        obs, rew, term, trunc, _ = envs.step(torch.zeros(2, 1))
        assert isinstance(rew, torch.Tensor) and term.dtype == torch.bool
        assert envs.single_action_space.low[0] == -2.0 and envs.single_action_space.high[0] == 2.0


def test_a_c_plugin_env_is_reachable():
    plugin = os.environ.get("TANDEM_CORRIDOR_PLUGIN")
    if not plugin:
        pytest.skip("TANDEM_CORRIDOR_PLUGIN is not set (meson test sets it to examples/plugin_env's library)")
    with tandem.envs.make("plugin", num_envs=3, plugin=plugin, seed=0) as envs:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (3, envs.single_observation_space.shape[0])
        assert np.all(envs.single_observation_space.high == np.inf)  # a plugin declares no observation bounds
        envs.step(np.zeros(3, dtype=np.int64))


@pytest.mark.parametrize("task", MUJOCO)
def test_a_mujoco_task_steps_finite_observations_reproducibly(task):
    with tandem.envs.make(task, num_envs=2, threads=2, seed=0) as envs:
        space = envs.single_action_space
        act = lambda t: np.random.default_rng(t).uniform(space.low, space.high, (2,) + space.shape).astype(np.float32)  # noqa: E731
        first = rollout_from(envs, 11, 300, act)
        assert np.all(np.isfinite(first[0]))
        again = rollout_from(envs, 11, 300, act)
        assert all(np.array_equal(x, y) for x, y in zip(first, again))


@pytest.mark.parametrize("task", MUJOCO)
def test_a_mujoco_task_observes_as_many_numbers_as_gymnasium_v5_and_acts_in_minus_one_to_one(task):
    obs_dim, action_dim = MUJOCO_SPACES[task]
    with tandem.envs.make(task, num_envs=2, seed=0) as envs:
        assert envs.single_observation_space.shape == (obs_dim,)
        space = envs.single_action_space
        assert space.shape == (action_dim,) and np.all(space.low == -1) and np.all(space.high == 1)
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, obs_dim) and np.all(np.isfinite(obs))


def test_wrong_arguments_are_one_line_errors_naming_them():
    refused(tandem.Error, lambda: tandem.envs.make("cartpol"), "name='cartpol'", "is not a built-in env")
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", num_envs=0), "num_envs=0", "1..65536")
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", num_envs=2, threads=3), "threads=3", "1..2")
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", seed=-1), "seed=-1")
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", backend="jax"), "backend='jax'")
    refused(tandem.Error, lambda: tandem.envs.make("plugin"), "plugin=")
    refused(tandem.Error, lambda: tandem.envs.make("plugin", plugin="/nonexistent/lib.so"), "/nonexistent/lib.so")
    with tandem.envs.make("cartpole", num_envs=2) as envs:
        envs.reset(seed=0)
        refused(tandem.ShapeError, lambda: envs.step(np.zeros(3, dtype=np.int64)), "2 integers")
        refused(tandem.ShapeError, lambda: envs.step(np.array([0, 2])), "out of range", "0..1")
        refused(tandem.ShapeError, lambda: envs.step(np.zeros(2, dtype=np.float32)), "2 integers")
        refused(tandem.ShapeError, lambda: envs.step(None), "actions of type NoneType", "numpy array or a torch tensor")
        refused(tandem.ShapeError, lambda: envs.step("ab"), "actions of type str")
    with tandem.envs.make("pendulum", num_envs=2) as envs:
        refused(tandem.ShapeError, lambda: envs.step(np.zeros((2, 2), dtype=np.float32)), "shape (2, 1)")
    envs.close()
    refused(tandem.Error, lambda: envs.step(np.zeros((2, 1), dtype=np.float32)), "closed")


OBSERVATION_BOUNDS = {  # Gymnasium's observation_space of each (its float32 max written as inf)
    "cartpole": ([-4.8, -np.inf, -2 * 12 * 2 * np.pi / 360, -np.inf], [4.8, np.inf, 2 * 12 * 2 * np.pi / 360, np.inf]),
    "acrobot": ([-1, -1, -1, -1, -4 * np.pi, -9 * np.pi], [1, 1, 1, 1, 4 * np.pi, 9 * np.pi]),
    "mountaincar": ([-1.2, -0.07], [0.6, 0.07]),
    "pendulum": ([-1, -1, -8], [1, 1, 8]),
}


@pytest.mark.parametrize("name", sorted(OBSERVATION_BOUNDS))
def test_the_observation_space_has_the_bounds_the_env_keeps_its_observations_in(name):
    low, high = (np.array(b, dtype=np.float32) for b in OBSERVATION_BOUNDS[name])
    with tandem.envs.make(name, num_envs=4, seed=0) as envs:
        space = envs.single_observation_space
        assert np.array_equal(space.low, low) and np.array_equal(space.high, high), (space.low, space.high)
        assert np.array_equal(envs.observation_space.low, np.broadcast_to(low, (4,) + low.shape))
        envs.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(300):
            action = envs.action_space.sample() if name != "pendulum" else rng.uniform(-2, 2, (4, 1)).astype(np.float32)
            obs, _, _, _, info = envs.step(action)
            assert all(space.contains(o) for o in obs) and all(space.contains(o) for o in info["final_observation"])


def test_mujoco_observations_are_unbounded_and_breakouts_frames_are_0_to_1():
    with tandem.envs.make("hopper") as envs:
        assert np.all(envs.single_observation_space.low == -np.inf)
        assert np.all(envs.single_observation_space.high == np.inf)
    with tandem.envs.make("breakout") as envs:
        space = envs.single_observation_space
        assert space.shape == (4, 10, 10) and np.all(space.low == 0) and np.all(space.high == 1)


def test_a_continuous_action_outside_the_box_is_clipped_to_it_as_the_env_reads_it():
    with tandem.envs.make("pendulum", num_envs=2) as wide, tandem.envs.make("pendulum", num_envs=2) as bound:
        wide.reset(seed=3)
        bound.reset(seed=3)
        for _ in range(20):
            got = wide.step(np.array([[100.0], [-1e30]], dtype=np.float32))
            want = bound.step(np.array([[2.0], [-2.0]], dtype=np.float32))
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_an_image_env_gives_observations_in_its_image_shape():
    with tandem.envs.make("breakout", num_envs=3, seed=0) as envs:
        assert envs.single_observation_space.shape == (4, 10, 10) and envs.observation_space.shape == (3, 4, 10, 10)
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (3, 4, 10, 10) and np.all(obs.sum(axis=(2, 3))[:, 3] == 30)  # 30 bricks in channel 3
        obs, rew, term, trunc, info = envs.step(np.zeros(3, dtype=np.int64))
        assert obs.shape == (3, 4, 10, 10) and info["final_observation"].shape == (3, 4, 10, 10)
    with tandem.envs.make("breakout", num_envs=4, batch_size=2, seed=0) as envs:
        obs, info = envs.reset(seed=0)
        assert obs.shape == (2, 4, 10, 10)
