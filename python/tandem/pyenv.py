"""Python environments with the Gymnasium API, for the built-in RL (env.name = "python").

An env is named ``module:Class`` (env.python) and built with keyword arguments (env.kwargs, a JSON
object). It needs only the Gymnasium protocol, not the gymnasium package:
``reset(seed=None) -> (obs, info)``, ``step(action) -> (obs, reward, terminated, truncated, info)``,
and ``observation_space`` / ``action_space`` objects read by duck typing:
  * observations: ``shape`` (flattened to obs_dim floats);
  * discrete actions: ``n`` (a Discrete space; actions 0..n-1, given to step() as a Python int);
  * continuous actions: ``shape``, ``low``, ``high`` (a Box; one bound for every component, given to
    step() as a float32 array of that shape; unbounded samples, the env clips, as the C++ envs do).
Every mistake is an :class:`EnvError`, one line naming the env and the fix.

This file is also a script, run by the C++ programs to learn the spaces before any ring exists
(envs/python_env.cpp): ``python3 pyenv.py spec MODULE:CLASS KWARGS_JSON`` prints the EnvSpec as JSON.
It runs by path, so the probe imports neither torch nor the extension (a fraction of a second).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional

import numpy as np

if __package__:
    from .seeds import env_seed
else:  # run or loaded by path, outside the package (the spec probe, the CleanRL peer): seeds.py beside it
    _seeds_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds.py")
    _seeds_spec = importlib.util.spec_from_file_location("tandem_seeds", _seeds_path)
    _seeds = importlib.util.module_from_spec(_seeds_spec)
    _seeds_spec.loader.exec_module(_seeds)
    env_seed = _seeds.env_seed

__all__ = ["EnvError", "load_env", "env_spec", "VecPyEnv"]


class EnvError(Exception):
    """A Python env that cannot be used as configured; the message is one line with the fix."""


def load_env(name: str, kwargs: Optional[Dict[str, Any]] = None):
    """Imports ``module:Class`` (the current directory first on sys.path, as ``python -m`` has it) and
    builds one env with ``kwargs``."""
    module_name, sep, class_name = name.partition(":")
    if not sep or not module_name or not class_name:
        raise EnvError(f"env.python = \"{name}\" is not module:Class: name the module and the class, "
                       "e.g. \"examples.python.envs.cartpole:CartPole\"")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # the user's module may raise anything at import
        raise EnvError(f"env.python = \"{name}\": importing {module_name} failed ({type(e).__name__}: {e}): "
                       f"run from the directory it is importable from, or add it to PYTHONPATH") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise EnvError(f"env.python = \"{name}\": module {module_name} has no {class_name}: check the class name")
    try:
        return cls(**(kwargs or {}))
    except Exception as e:
        raise EnvError(f"env.python = \"{name}\": {class_name}(**{json.dumps(kwargs or {})}) raised "
                       f"{type(e).__name__}: {e}: fix env.kwargs") from None


def _bound(name: str, what: str, values) -> float:
    a = np.asarray(values, dtype=np.float64).reshape(-1)
    if a.size == 0 or not np.all(a == a[0]) or not math.isfinite(a[0]):
        raise EnvError(f"env '{name}': action_space.{what} must be one finite value for every component, "
                       f"not {a.tolist()}: give the Box scalar bounds (the C++ learner keeps one pair)")
    return float(a[0])


def env_spec(name: str, env) -> Dict[str, Any]:
    """The EnvSpec (common/env_spec.hpp) of one built env, from its spaces."""
    obs_space = getattr(env, "observation_space", None)
    act_space = getattr(env, "action_space", None)
    if obs_space is None or act_space is None:
        raise EnvError(f"env '{name}' has no observation_space / action_space: give the class both "
                       "(objects with Gymnasium's shape, n, low, high)")
    shape = getattr(obs_space, "shape", None)
    if shape is None or len(shape) == 0:
        raise EnvError(f"env '{name}': observation_space has no shape: use a Box-like space with a shape")
    spec = {"name": name, "obs_dim": int(np.prod(shape)), "num_actions": 0, "action_dim": 0,
            "action_low": 0.0, "action_high": 0.0, "max_episode_steps": 0}
    n = getattr(act_space, "n", None)
    if n is not None:
        if int(n) < 1:
            raise EnvError(f"env '{name}': action_space.n = {n}: a discrete space needs at least 1 action")
        spec["num_actions"] = int(n)
    else:
        a_shape = getattr(act_space, "shape", None)
        if not a_shape or not hasattr(act_space, "low") or not hasattr(act_space, "high"):
            raise EnvError(f"env '{name}': action_space has neither n (Discrete) nor shape, low and high (Box): "
                           "use one of the two")
        spec["action_dim"] = int(np.prod(a_shape))
        spec["action_low"] = _bound(name, "low", act_space.low)
        spec["action_high"] = _bound(name, "high", act_space.high)
    limit = getattr(getattr(env, "spec", None), "max_episode_steps", None) or getattr(env, "max_episode_steps", 0)
    spec["max_episode_steps"] = int(limit or 0)
    return spec


class VecPyEnv:
    """E Python envs stepped in turn with auto-reset, as envs/vec_env.hpp does for C++ envs.

    After ``step``: ``obs`` [E, obs_dim] float32 are the observations the policy sees next (a reset
    one where an episode ended), ``rewards`` [E] float32, ``terminated`` / ``truncated`` [E] uint8,
    ``final_obs`` [E, obs_dim] the last observation of each episode that ended (zero elsewhere), and
    ``done_returns`` / ``done_lengths`` the (env, return, length) of the episodes that ended, in env order.
    Env e is reset first with ``env_seed(seed, actor, e, restarts)`` (seeds.py, the C++ VecEnv's seed),
    later resets continue its own generator.
    One thread.
    """

    def __init__(self, name: str, kwargs: Optional[Dict[str, Any]], count: int, seed: int, actor: int = 0,
                 restarts: int = 0):
        self.name = name
        self.envs = [load_env(name, kwargs) for _ in range(count)]
        self.spec = env_spec(name, self.envs[0])
        e, o = count, self.spec["obs_dim"]
        self.discrete = self.spec["num_actions"] > 0
        self._act_shape = None if self.discrete else tuple(self.envs[0].action_space.shape)
        self.obs = np.zeros((e, o), np.float32)
        self.final_obs = np.zeros((e, o), np.float32)
        self.rewards = np.zeros(e, np.float32)
        self.terminated = np.zeros(e, np.uint8)
        self.truncated = np.zeros(e, np.uint8)
        self.done_episodes: List[tuple] = []
        self._returns = [0.0] * e
        self._lengths = [0] * e
        for i, env in enumerate(self.envs):
            self._reset(i, env_seed(seed, actor, i, restarts))

    def _reset(self, i: int, seed: Optional[int] = None) -> None:
        out = self.envs[i].reset(seed=seed) if seed is not None else self.envs[i].reset()
        if not isinstance(out, tuple) or len(out) != 2:
            raise EnvError(f"env '{self.name}': reset() returned {type(out).__name__}, not (obs, info): "
                           "return the observation and a dict")
        self._store(self.obs, i, out[0], "reset()")
        self._returns[i], self._lengths[i] = 0.0, 0

    def _store(self, to: np.ndarray, i: int, obs, where: str) -> None:
        try:
            to[i] = np.asarray(obs, dtype=np.float32).reshape(-1)
        except (ValueError, TypeError):
            raise EnvError(f"env '{self.name}': {where} gave an observation of shape {np.shape(obs)}, but "
                           f"observation_space.shape says {self.spec['obs_dim']} values: make them agree") from None

    def step(self, actions: np.ndarray) -> None:
        """Steps env e with actions[e] (int64 [E], or float32 [E, action_dim])."""
        self.final_obs.fill(0.0)
        self.done_episodes.clear()
        acts = actions.tolist() if self.discrete else actions.reshape((len(self.envs),) + self._act_shape)
        for i, env in enumerate(self.envs):
            out = env.step(acts[i])
            try:
                obs, reward, term, trunc, _ = out
                self.rewards[i] = reward
            except (ValueError, TypeError):
                raise EnvError(f"env '{self.name}': step() returned {type(out).__name__} of "
                               f"{len(out) if hasattr(out, '__len__') else 1}, not (obs, reward, terminated, "
                               "truncated, info) with a number as reward: return Gymnasium's five values") from None
            self._returns[i] += float(reward)
            self._lengths[i] += 1
            self.terminated[i], self.truncated[i] = bool(term), bool(trunc)
            if term or trunc:
                self._store(self.final_obs, i, obs, "step()")
                self.done_episodes.append((i, self._returns[i], self._lengths[i]))
                self._reset(i)
            else:
                self._store(self.obs, i, obs, "step()")


def main(argv: List[str]) -> int:
    """``pyenv.py spec MODULE:CLASS KWARGS_JSON``: prints the spec as one JSON line, or one error line."""
    if len(argv) != 3 or argv[0] != "spec":
        print("usage: pyenv.py spec MODULE:CLASS KWARGS_JSON", file=sys.stderr)
        return 2
    try:
        try:
            kwargs = json.loads(argv[2])
        except json.JSONDecodeError as e:
            raise EnvError(f"env.kwargs = '{argv[2]}' is not JSON ({e}): write a JSON object") from None
        if not isinstance(kwargs, dict):
            raise EnvError(f"env.kwargs = '{argv[2]}' is not a JSON object: write {{\"key\": value, ...}}")
        vec = VecPyEnv(argv[1], kwargs, 1, 0)
        zero = np.zeros(1, np.int64) if vec.discrete else np.zeros((1, vec.spec["action_dim"]), np.float32)
        vec.step(zero)  # one step checks step()'s answer before a job relies on it
        print(json.dumps(vec.spec))
        return 0
    except EnvError as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    del sys.path[0]  # this package's folder: its data.py, job.py, ... must not shadow the user's modules
    sys.exit(main(sys.argv[1:]))
