"""Pendulum-v1 in pure Python with the Gymnasium API: a continuous-action env for the built-in RL.

Gymnasium's classic_control/pendulum.py dynamics (g 10, m 1, l 1, dt 0.05, speed clipped to 8, torque
to [-2, 2], cost angle^2 + 0.1 speed^2 + 0.001 torque^2, resets uniform in [-pi, pi] x [-1, 1]) with its
200-step TimeLimit folded in (truncated at max_episode_steps). The actor hands step() unbounded float32
actions of action_space.shape and the env clips them, as Gymnasium's does. Run it with the Python
rollout actor: `tandem run examples/python-cartpole-ppo.toml --set
env.python='"examples.python.envs.pendulum:Pendulum"' --set env.kwargs="'{}'"` (python/tests/
test_python_env.py does, briefly; examples/pendulum-ppo.toml has the settings that solve the built-in C++ Pendulum).
"""

import math
import random

import numpy as np

from examples.python.envs.cartpole import Box


class Pendulum:
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def __init__(self, max_episode_steps=200):
        self.max_episode_steps = max_episode_steps
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.observation_space = Box(-high, high, (3,))
        self.action_space = Box(-self.max_torque, self.max_torque, (1,))
        self._rng = random.Random()
        self.theta, self.theta_dot, self.steps = 0.0, 0.0, 0

    def _obs(self):
        return np.array([math.cos(self.theta), math.sin(self.theta), self.theta_dot], dtype=np.float32)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng.seed(seed)
        self.theta, self.theta_dot = self._rng.uniform(-math.pi, math.pi), self._rng.uniform(-1.0, 1.0)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        u = min(max(float(action[0]), -self.max_torque), self.max_torque)
        th, thdot = self.theta, self.theta_dot
        angle = ((th + math.pi) % (2 * math.pi)) - math.pi
        cost = angle * angle + 0.1 * thdot * thdot + 0.001 * u * u
        thdot += (3 * self.g / (2 * self.l) * math.sin(th) + 3.0 / (self.m * self.l * self.l) * u) * self.dt
        thdot = min(max(thdot, -self.max_speed), self.max_speed)
        self.theta, self.theta_dot = th + thdot * self.dt, thdot
        self.steps += 1
        return self._obs(), -cost, False, self.steps >= self.max_episode_steps, {}
