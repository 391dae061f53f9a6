"""tandem.envs with batch_size: the asynchronous vector env (EnvPool's async mode). Each env's trajectory
is the synchronous env's, batches carry their env ids, arrays are never reused, misuse is one line."""

import numpy as np
import pytest
import torch

import tandem
import tandem.envs
from helpers import refused


def action_of(env_id, t, dim):
    """The action env `env_id` takes at its step t: the same in both engines, whatever the batching."""
    return np.random.default_rng(env_id * 1000 + t).uniform(-2, 2, (dim,)).astype(np.float32)


def test_each_env_steps_as_in_the_synchronous_env_whatever_the_batches():
    n, steps = 6, 260  # Pendulum truncates at 200 steps: auto-reset is compared too
    with tandem.envs.make("pendulum", num_envs=n, seed=4) as sync:
        obs, _ = sync.reset(seed=4)
        want = {e: [obs[e].copy()] for e in range(n)}
        for t in range(steps):
            obs, rew, term, trunc, info = sync.step(np.stack([action_of(e, t, 1) for e in range(n)]))
            for e in range(n):
                want[e].append((obs[e].copy(), rew[e], trunc[e]))
    assert any(flag for e in range(n) for *_, flag in want[e][1:])
    with tandem.envs.make("pendulum", num_envs=n, batch_size=4, threads=3, seed=4) as envs:
        assert isinstance(envs, tandem.envs.AsyncVectorEnv) and envs.batch_size == 4
        assert envs.observation_space.shape == (4, 3) and envs.single_action_space.shape == (1,)
        got = {e: [] for e in range(n)}
        taken = np.full(n, -1)
        obs, info = envs.reset(seed=4)
        ids = info["env_id"]
        rew = trunc = None
        while taken.min() < steps:
            for i, e in enumerate(ids):
                got[e].append(obs[i].copy() if taken[e] < 0 else (obs[i].copy(), rew[i], trunc[i]))  # a reset, or a step
                taken[e] += 1
            obs, rew, term, trunc, info = envs.step(np.stack([action_of(e, taken[e], 1) for e in ids]), ids)
            ids = info["env_id"]
            assert ids.dtype == np.int32 and len(set(ids.tolist())) == 4
    for e in range(n):
        assert np.array_equal(got[e][0], want[e][0])
        for (o1, r1, f1), (o2, r2, f2) in zip(got[e][1:steps + 1], want[e][1:steps + 1]):
            assert np.array_equal(o1, o2) and r1 == r2 and f1 == f2


def test_every_env_comes_back_once_per_send_and_recv_returns_new_arrays():
    with tandem.envs.make("cartpole", num_envs=8, batch_size=2, threads=2, seed=0, backend="torch") as envs:
        envs.async_reset(seed=0)
        first = [envs.recv() for _ in range(4)]
        ids = torch.cat([r[4]["env_id"] for r in first])
        assert sorted(ids.tolist()) == list(range(8))
        kept = [r[0].clone() for r in first]
        for r in first:
            assert r[0].shape == (2, 4) and torch.all(r[1] == 0) and not r[2].any()
            envs.send(torch.ones(2, dtype=torch.int64), r[4]["env_id"])
        for _ in range(12):
            obs, rew, term, trunc, info = envs.recv()
            assert torch.all(rew == 1.0)
            envs.send(torch.zeros(2, dtype=torch.int64), info["env_id"])
        assert all(torch.equal(r[0], k) for r, k in zip(first, kept))  # later batches wrote elsewhere


def test_misuse_is_a_one_line_error_and_the_env_goes_on():
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", num_envs=4, batch_size=5), "batch_size=5", "1..4")
    refused(tandem.Error, lambda: tandem.envs.make("cartpole", num_envs=4, batch_size=True), "batch_size")
    with tandem.envs.make("cartpole", num_envs=4, batch_size=2, threads=2, seed=0) as envs:
        refused(tandem.Error, lambda: envs.send(np.zeros(2, dtype=np.int64), [0, 1]), "before reset()")
        envs.async_reset()
        refused(tandem.Error, lambda: envs.async_reset(), "recv() their batches first")
        info = envs.recv()[4]
        ids = info["env_id"]
        refused(tandem.Error, lambda: envs.send(np.zeros(2, dtype=np.int64), [ids[0], 9]), "env id 9", "out of range")
        refused(tandem.Error, lambda: envs.send(np.zeros(2, dtype=np.int64), [ids[0], ids[0]]), "still in flight")
        refused(tandem.ShapeError, lambda: envs.send(np.zeros(3, dtype=np.int64), ids), "2 integers")
        refused(tandem.ShapeError, lambda: envs.send(np.zeros(2, dtype=np.int64), [0.0, 1.0]), "env_id")
        refused(tandem.ShapeError, lambda: envs.send(np.zeros(2, dtype=np.int64), None), "env_id of type NoneType")
        refused(tandem.ShapeError, lambda: envs.send(None, ids), "actions of type NoneType")
        refused(tandem.ShapeError, lambda: envs.send(np.zeros(2, dtype=np.int64), ids.reshape(2, 1)), "1-D array")
        refused(tandem.ShapeError, lambda: envs.send(np.zeros(2, dtype=np.int64), np.array([2**40, 0])),
                "beyond int32")
        envs.recv()  # the other two resets
        refused(tandem.Error, envs.recv, "would wait for ever", "send() more first")
        envs.send(np.zeros(2, dtype=np.int64), ids)  # the refused sends queued nothing
        assert sorted(envs.recv()[4]["env_id"].tolist()) == sorted(ids.tolist())
    refused(tandem.Error, envs.recv, "AsyncVectorEnv is closed")


@pytest.mark.parametrize("task", ["hopper", "ant"])
def test_a_mujoco_task_steps_asynchronously(task):
    with tandem.envs.make(task, num_envs=16, batch_size=4, threads=4, seed=1) as envs:
        dim = envs.single_action_space.shape[0]
        obs, info = envs.reset(seed=1)
        ended = 0
        for t in range(400):
            obs, rew, term, trunc, info = envs.step(np.stack([action_of(e, t, dim) for e in info["env_id"]]),
                                                    info["env_id"])
            assert obs.shape == (4, envs.single_observation_space.shape[0]) and np.all(np.isfinite(obs))
            ended += int((term | trunc).sum())
        assert ended > 0


def test_a_second_thread_is_refused_while_one_waits_in_recv_on_the_same_env():
    import threading
    import time

    n = 128  # Ants on one thread: each step waits tens of ms in recv()
    with tandem.envs.make("ant", num_envs=n, batch_size=n, threads=1, seed=0) as envs, \
            tandem.envs.make("ant", num_envs=n, threads=1, seed=0) as sync:
        envs.reset(seed=0)
        sync.reset(seed=0)
        actions, ids = np.zeros((n, 8), dtype=np.float32), np.arange(n)
        for send, recv in ((lambda: envs.send(actions, ids), envs.recv), (lambda: sync.send(actions), sync.recv)):
            for _ in range(3):
                sent = threading.Event()

                def step():
                    send()
                    sent.set()
                    recv()

                thread = threading.Thread(target=step)
                thread.start()
                sent.wait()
                refusal = None
                while refusal is None and thread.is_alive():
                    try:
                        send()  # refused: the other thread has sent and not yet received, or waits in recv()
                    except tandem.Error as e:
                        if "while another thread waits in recv() on this env" in str(e):
                            refusal = str(e)
                    time.sleep(0.001)
                thread.join()
                if refusal:
                    break
            assert refusal, "the other thread's recv() was never seen waiting"
            assert "call an env from one thread at a time" in refusal
        envs.send(actions, ids)  # each env goes on after the refusal
        assert envs.recv()[0].shape == (n,) + envs.single_observation_space.shape
        assert sync.step(actions)[0].shape == (n,) + sync.single_observation_space.shape
