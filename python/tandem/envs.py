"""Tandem's C++ environments from your own Python loop, with Gymnasium's vector API (as EnvPool is used).

    import tandem.envs
    envs = tandem.envs.make("hopper", num_envs=16, threads=2, seed=0)
    obs, info = envs.reset(seed=0)                       # (16, 11) float32
    for _ in range(1000):
        actions = policy(obs)                            # (16, 3) in envs.single_action_space
        obs, rewards, terminated, truncated, info = envs.step(actions)
        done = info["_episode"]                          # where an episode just ended
        returns = info["episode"]["r"][done]
    envs.close()                                          # or `with tandem.envs.make(...) as envs:`

The envs are stepped in C++ by ``threads`` threads (the GIL is released meanwhile); ``send(actions)``
then ``recv()`` is the same step split in two, so Python can work while the envs step. Every built-in
env (``names()``: ``cartpole``, ``acrobot``, ``mountaincar``, ``pendulum``, ``hopper``, ``walker2d``,
``halfcheetah``, ``ant``, ``humanoid``, ``breakout`` (4 x 10 x 10 images), ``null``, as the job config's
``env.name`` spells them; any case, or the Gymnasium id of the env followed: ``"CartPole-v1"``,
``"Hopper-v5"``) and a C plugin (``make("plugin", plugin="lib.so")``) is reachable this way. The observation space carries
the bounds the env keeps (CartPole's, Pendulum's, ...; infinite for the MuJoCo tasks and plugins); a
continuous action outside the action space is clipped to it by the env, as Gymnasium's ``ClipAction``
would.

Auto-reset is same-step, as in Gymnasium 0.29 and EnvPool (envs/vec_env.hpp): the step that ends an
episode returns the next episode's first observation; the last one is in
``info["final_observation"][i]`` where ``info["_final_observation"][i]``. ``info["episode"]`` holds
``r`` (return) and ``l`` (length) of the episodes that just ended, where ``info["_episode"]``. A
learner bootstraps from the final observation where ``truncated & ~terminated``.

Outputs are numpy arrays (``backend="torch"``: tensors) made for each call, the envs writing their
observations straight into the returned array, so an earlier step's arrays are never overwritten.

With ``batch_size`` the envs step asynchronously, as EnvPool's async mode (envs/async_vec_env.hpp):
``recv()`` returns the first ``batch_size`` envs whose steps finished, with their ids in
``info["env_id"]``, and ``send(actions, env_id)`` steps those envs again, so the threads never wait for
the slowest env and Python acts on one batch while the others step::

    envs = tandem.envs.make("hopper", num_envs=64, batch_size=16, threads=8, seed=0)
    envs.async_reset()                                   # every env; their first observations come in batches
    for _ in range(1000):
        obs, rewards, terminated, truncated, info = envs.recv()    # 16 of the 64 envs
        envs.send(policy(obs), info["env_id"])
    envs.close()

Each env's trajectory under the same actions is the synchronous env's, bit for bit; which envs share a
batch is not reproducible.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from . import _args, _tandem
from .errors import Error, ShapeError
from .spaces import Box, Discrete

__all__ = ["VectorEnv", "AsyncVectorEnv", "make", "names", "Box", "Discrete"]

_BACKENDS = ("numpy", "torch")


class _Envs:
    """What the synchronous and the asynchronous vector envs share: spaces, outputs, closing."""

    metadata: Dict[str, Any] = {"autoreset_mode": "same-step"}

    def __init__(self, env, backend: str, rows: int):
        self._env = env
        self._backend = backend
        spec = env.spec
        self.spec = spec
        self.num_envs: int = env.num_envs
        self.threads: int = env.threads
        self._obs_shape = tuple(spec["obs_shape"])  # (C, H, W) for an image env (breakout), else (obs_dim,)
        low = np.asarray(spec["obs_low"], np.float32).reshape(self._obs_shape)  # the env's own bounds
        high = np.asarray(spec["obs_high"], np.float32).reshape(self._obs_shape)
        self.single_observation_space = Box(low, high, self._obs_shape, np.float32)
        if spec["num_actions"] > 0:
            self.single_action_space = Discrete(spec["num_actions"])
            self.action_space = Box(0, spec["num_actions"] - 1, (rows,), np.int64)
        else:
            self.single_action_space = Box(spec["action_low"], spec["action_high"], (spec["action_dim"],), np.float32)
            self.action_space = Box(spec["action_low"], spec["action_high"], (rows, spec["action_dim"]), np.float32)
        rows_shape = (rows,) + self._obs_shape
        self.observation_space = Box(np.broadcast_to(low, rows_shape), np.broadcast_to(high, rows_shape), rows_shape,
                                     np.float32)
        self._closed = False

    def close(self) -> None:
        """Stops the stepping threads and frees the envs; calls after it raise. Idempotent."""
        if not self._closed:
            self._closed = True
            self._env = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise Error(f"this tandem.envs.{type(self).__name__} is closed: make a new one with tandem.envs.make(...)")

    def _out(self, tensor: torch.Tensor):
        return tensor if self._backend == "torch" else tensor.numpy()

    def _obs(self, rows: torch.Tensor):
        """Observation rows [n, obs_dim] in the space's shape (a view: images come out [n, C, H, W])."""
        return self._out(rows.view((rows.shape[0],) + self._obs_shape))

    def _step_result(self, r) -> Tuple[Any, Any, Any, Any, dict]:
        done = r.terminated | r.truncated
        info = {
            "final_observation": self._obs(r.final_observations),
            "_final_observation": self._out(done),
            "episode": {"r": self._out(r.episode_returns), "l": self._out(r.episode_lengths)},
            "_episode": self._out(done),
        }
        if r.env_ids is not None:  # an asynchronous batch: which env each row is
            info["env_id"] = self._out(r.env_ids)
        return (self._obs(r.observations), self._out(r.rewards), self._out(r.terminated), self._out(r.truncated),
                info)


class VectorEnv(_Envs):
    """``num_envs`` envs of one kind, stepped in C++ by ``threads`` threads. See the module's docstring."""

    def __init__(self, name: str, num_envs: int = 1, *, threads: int = 1, seed: int = 0,
                 plugin: Optional[str] = None, backend: str = "numpy"):
        name, plugin = _checked(name, plugin, backend)
        env = _tandem.VecEnv(name, plugin, num_envs, threads, seed)
        super().__init__(env, backend, env.num_envs)

    # --- Gymnasium's vector API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> Tuple[Any, dict]:
        """Resets every env; with ``seed`` the envs' streams restart from it (reproducible), without it
        they go on. Returns ``(observations, info)``."""
        self._check_open()
        if options:
            raise Error(f"tandem.envs reset options={options!r}: the built-in envs take no reset options")
        r = self._env.reset(seed)
        return self._obs(r.observations), {}

    def step(self, actions) -> Tuple[Any, Any, Any, Any, dict]:
        """One step of every env: ``(observations, rewards, terminated, truncated, info)``."""
        self.send(actions)
        return self.recv()

    def send(self, actions) -> None:
        """Starts a step of every env with ``actions`` and returns at once; ``recv()`` returns it."""
        self._check_open()
        self._env.send(_as_tensor(actions, "actions"))

    def recv(self) -> Tuple[Any, Any, Any, Any, dict]:
        """Waits for the step ``send()`` started (the GIL released) and returns it as ``step()`` does."""
        self._check_open()
        return self._step_result(self._env.recv())

    def __repr__(self) -> str:
        return (f"tandem.envs.VectorEnv({self.spec['name']!r}, num_envs={self.num_envs}, threads={self.threads})"
                + (" (closed)" if self._closed else ""))


class AsyncVectorEnv(_Envs):
    """``num_envs`` envs stepped asynchronously by ``threads`` threads, returned ``batch_size`` at a time
    (EnvPool's async mode). See the module's docstring."""

    def __init__(self, name: str, num_envs: int = 1, *, batch_size: int, threads: int = 1, seed: int = 0,
                 plugin: Optional[str] = None, backend: str = "numpy"):
        name, plugin = _checked(name, plugin, backend)
        env = _tandem.AsyncVecEnv(name, plugin, num_envs, batch_size, threads, seed)
        self.batch_size: int = env.batch_size
        super().__init__(env, backend, env.batch_size)

    def async_reset(self, *, seed: Optional[int] = None) -> None:
        """Queues a reset of every env and returns; ``recv()`` returns their first observations,
        ``batch_size`` at a time (rewards 0, no flags). With ``seed`` the envs' streams restart from it,
        without it they go on. Every env must have been received first."""
        self._check_open()
        self._env.reset(seed)

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> Tuple[Any, dict]:
        """``async_reset(seed=seed)`` then the first batch: ``(observations, info)``, with
        ``info["env_id"]``."""
        if options:
            raise Error(f"tandem.envs reset options={options!r}: the built-in envs take no reset options")
        self.async_reset(seed=seed)
        obs, _, _, _, info = self.recv()
        return obs, {"env_id": info["env_id"]}

    def send(self, actions, env_id) -> None:
        """Queues one step of each env in ``env_id`` (one per row of ``actions``) and returns at once.
        An env must not be sent again before ``recv()`` has returned it."""
        self._check_open()
        self._env.send(_as_tensor(actions, "actions"), _as_tensor(env_id, "env_id"))

    def recv(self) -> Tuple[Any, Any, Any, Any, dict]:
        """Waits (the GIL released) for the next ``batch_size`` envs to finish and returns them as
        ``(observations, rewards, terminated, truncated, info)``, ``info["env_id"]`` saying which env
        each row is."""
        self._check_open()
        return self._step_result(self._env.recv())

    def step(self, actions, env_id) -> Tuple[Any, Any, Any, Any, dict]:
        """``send(actions, env_id)`` then ``recv()``."""
        self.send(actions, env_id)
        return self.recv()

    def __repr__(self) -> str:
        return (f"tandem.envs.AsyncVectorEnv({self.spec['name']!r}, num_envs={self.num_envs}, "
                f"batch_size={self.batch_size}, threads={self.threads})" + (" (closed)" if self._closed else ""))


def _checked(name, plugin, backend) -> Tuple[str, str]:
    name = _args.text("tandem.envs.make name", name)
    if backend not in _BACKENDS:
        raise Error(f"tandem.envs.make backend={_args.shown(backend)} is not one of {_BACKENDS}: pass 'numpy' or "
                    "'torch'")
    if (plugin is None) != (name != "plugin"):
        raise Error("tandem.envs.make: a plugin env is make('plugin', plugin='path/to/lib.so'), and only a plugin "
                    f"takes plugin= (name={_args.shown(name)}, plugin={_args.shown(plugin)})")
    return name, "" if plugin is None else _args.path("tandem.envs.make plugin", plugin)


def _as_tensor(value, what: str) -> torch.Tensor:
    """``value`` (a tensor, a numpy array or anything numpy reads as numbers) as a CPU-side tensor, no
    copy where numpy or torch can share the memory; a ``tandem.ShapeError`` naming ``what`` otherwise."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    try:
        array = np.ascontiguousarray(value)
        if array.dtype.kind == "u" and array.dtype.itemsize > 1:
            array = array.astype(np.int64)  # torch has no uint16/32/64; the C++ side range-checks the values
        return torch.from_numpy(array)
    except (TypeError, ValueError, RuntimeError):
        pass
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise ShapeError(f"tandem.envs: {what} of type {type(value).__name__} is not an array of numbers: pass a "
                         "numpy array or a torch tensor") from None


def names() -> List[str]:
    """The built-in envs' names, as a job config's ``env.name`` spells them (envs/env_source.cpp's registry)."""
    return list(_tandem.env_names())


def make(name: str, num_envs: int = 1, *, batch_size: Optional[int] = None, threads: int = 1, seed: int = 0,
         plugin: Optional[str] = None, backend: str = "numpy"):
    """``num_envs`` envs named ``name``, stepped by ``threads`` threads (1..256, at most ``num_envs``),
    seeded from ``seed``; ``backend``: ``"numpy"`` or ``"torch"`` outputs. ``name`` is one of
    :func:`names` in any case, or the Gymnasium id of the env it follows (``"CartPole-v1"``,
    ``"Hopper-v5"``), or ``"plugin"`` with ``plugin=`` a library's path. Without ``batch_size`` a
    ``VectorEnv`` (every env each step); with it an ``AsyncVectorEnv`` returning ``batch_size`` envs at a
    time. Make envs in the process that steps them: one made before ``fork()`` refuses to step in the
    child."""
    if batch_size is None:
        return VectorEnv(name, num_envs, threads=threads, seed=seed, plugin=plugin, backend=backend)
    return AsyncVectorEnv(name, num_envs, batch_size=batch_size, threads=threads, seed=seed, plugin=plugin,
                          backend=backend)
