"""CartPole-v1 in pure Python with the Gymnasium API, for examples/python-cartpole-ppo.toml.

Gymnasium's classic_control/cartpole.py dynamics (Euler, tau 0.02, force 10, failure past 12 degrees or
2.4 m, reward 1 on every step including the last, resets uniform in [-0.05, 0.05]) with its 500-step
TimeLimit folded in (truncated at max_episode_steps). It uses neither gymnasium nor numpy in step():
scalar Python floats are faster than numpy for a 4-number state, and this is the kind of env a user
writes. The spaces are small stand-ins with the attributes tandem reads (shape, n, low, high).
"""

import math
import random

import numpy as np


class Box:
    def __init__(self, low, high, shape, dtype=np.float32):
        self.low, self.high, self.shape, self.dtype = np.full(shape, low, dtype), np.full(shape, high, dtype), shape, dtype


class Discrete:
    def __init__(self, n):
        self.n, self.shape, self.dtype = n, (), np.int64


class CartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, max_episode_steps=500):
        self.max_episode_steps = max_episode_steps
        high = np.array([self.x_threshold * 2, np.finfo(np.float32).max, self.theta_threshold * 2,
                         np.finfo(np.float32).max], dtype=np.float32)
        self.observation_space = Box(-high, high, (4,))
        self.action_space = Discrete(2)
        self.total_mass = self.masscart + self.masspole
        self.polemass_length = self.masspole * self.length
        self._rng = random.Random()
        self.state = (0.0, 0.0, 0.0, 0.0)
        self.steps = 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng.seed(seed)
        u = self._rng.uniform
        self.state = (u(-0.05, 0.05), u(-0.05, 0.05), u(-0.05, 0.05), u(-0.05, 0.05))
        self.steps = 0
        return np.array(self.state, dtype=np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + self.polemass_length * theta_dot * theta_dot * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta * costheta / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        self.steps += 1
        terminated = x < -self.x_threshold or x > self.x_threshold or \
            theta < -self.theta_threshold or theta > self.theta_threshold
        truncated = self.steps >= self.max_episode_steps
        return np.array(self.state, dtype=np.float32), 1.0, terminated, truncated, {}
