"""Reference trajectories for tests/env_classic_test.cpp, written from the published equations with
numpy alone (no Gymnasium): CartPole (Barto, Sutton & Anderson 1983; Florian 2005), Acrobot (Sutton &
Barto's book dynamics, RK4 over dt = 0.2), MountainCar (Moore 1990), Pendulum (Gymnasium's v1 costs).

usage: env_reference.py ENV SEED ACTIONS_FILE
Replays the actions (one per line) through one env with auto-reset, the reset draws from splitmix64
seeded SEED as Tandem's VecEnv does, and prints one line for the first observation, then one per step:
  obs... reward terminated truncated final_obs... episode_return episode_length
(final_obs, return and length are nan where the episode did not end).
"""
import math
import sys

import numpy as np

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self, low, high):
        return low + (high - low) * ((self.next() >> 11) * 2.0**-53)


class CartPole:
    obs_dim, limit = 4, 500

    def reset(self, rng):
        self.s = np.array([rng.uniform(-0.05, 0.05) for _ in range(4)])
        return self.s.astype(np.float32)

    def step(self, a):
        g, mc, mp, half, f, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
        x, v, th, w = self.s
        force = f if a == 1 else -f
        c, s = math.cos(th), math.sin(th)
        tmp = (force + mp * half * w * w * s) / (mc + mp)
        alpha = (g * s - c * tmp) / (half * (4.0 / 3.0 - mp * c * c / (mc + mp)))
        acc = tmp - mp * half * alpha * c / (mc + mp)
        self.s = np.array([x + tau * v, v + tau * acc, th + tau * w, w + tau * alpha])
        done = abs(self.s[0]) > 2.4 or abs(self.s[2]) > 12 * 2 * math.pi / 360
        return self.s.astype(np.float32), 1.0, done


class Acrobot:
    obs_dim, limit = 6, 500

    def reset(self, rng):
        self.s = np.array([rng.uniform(-0.1, 0.1) for _ in range(4)]).astype(np.float32).astype(np.float64)
        return self.obs()

    def obs(self):
        t1, t2, w1, w2 = self.s
        return np.array([math.cos(t1), math.sin(t1), math.cos(t2), math.sin(t2), w1, w2], dtype=np.float32)

    @staticmethod
    def deriv(y, tau):
        m1 = m2 = l1 = i1 = i2 = 1.0
        lc1 = lc2 = 0.5
        g = 9.8
        t1, t2, w1, w2 = y
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * math.cos(t2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * math.cos(t2)) + i2
        phi2 = m2 * lc2 * g * math.cos(t1 + t2 - math.pi / 2)
        phi1 = (-m2 * l1 * lc2 * w2**2 * math.sin(t2) - 2 * m2 * l1 * lc2 * w2 * w1 * math.sin(t2)
                + (m1 * lc1 + m2 * l1) * g * math.cos(t1 - math.pi / 2) + phi2)
        a2 = (tau + d2 / d1 * phi1 - m2 * l1 * lc2 * w1**2 * math.sin(t2) - phi2) / (m2 * lc2**2 + i2 - d2**2 / d1)
        a1 = -(d2 * a2 + phi1) / d1
        return np.array([w1, w2, a1, a2])

    def step(self, a):
        dt, tau, y = 0.2, float(a - 1), self.s
        k1 = self.deriv(y, tau)
        k2 = self.deriv(y + dt / 2 * k1, tau)
        k3 = self.deriv(y + dt / 2 * k2, tau)
        k4 = self.deriv(y + dt * k3, tau)
        n = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        for i in (0, 1):
            while n[i] > math.pi:
                n[i] -= 2 * math.pi
            while n[i] < -math.pi:
                n[i] += 2 * math.pi
        n[2] = min(max(n[2], -4 * math.pi), 4 * math.pi)
        n[3] = min(max(n[3], -9 * math.pi), 9 * math.pi)
        self.s = n
        done = -math.cos(n[0]) - math.cos(n[1] + n[0]) > 1.0
        return self.obs(), (0.0 if done else -1.0), done


class MountainCar:
    obs_dim, limit = 2, 200

    def reset(self, rng):
        self.p, self.v = rng.uniform(-0.6, -0.4), 0.0
        return np.array([self.p, self.v], dtype=np.float32)

    def step(self, a):
        self.v = min(max(self.v + (a - 1) * 0.001 - 0.0025 * math.cos(3 * self.p), -0.07), 0.07)
        self.p = min(max(self.p + self.v, -1.2), 0.6)
        if self.p == -1.2 and self.v < 0:
            self.v = 0.0
        return np.array([self.p, self.v], dtype=np.float32), -1.0, self.p >= 0.5 and self.v >= 0


class Pendulum:
    obs_dim, limit = 3, 200

    def reset(self, rng):
        self.th, self.w = rng.uniform(-math.pi, math.pi), rng.uniform(-1.0, 1.0)
        return self.obs()

    def obs(self):
        return np.array([math.cos(self.th), math.sin(self.th), self.w], dtype=np.float32)

    def step(self, a):
        u = float(np.clip(np.float32(a), np.float32(-2.0), np.float32(2.0)))
        angle = ((self.th + math.pi) % (2 * math.pi)) - math.pi
        cost = angle**2 + 0.1 * self.w**2 + 0.001 * u**2
        w = min(max(self.w + (3 * 10.0 / 2 * math.sin(self.th) + 3.0 * u) * 0.05, -8.0), 8.0)
        self.th, self.w = self.th + w * 0.05, w
        return self.obs(), -cost, False


def main():
    name, seed, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    env = {"CartPole-v1": CartPole, "Acrobot-v1": Acrobot, "MountainCar-v0": MountainCar,
           "Pendulum-v1": Pendulum}[name]()
    actions = [float(line) for line in open(path) if line.strip()]
    rng = SplitMix64(seed)
    fmt = lambda xs: " ".join(repr(float(x)) for x in xs)
    obs = env.reset(rng)
    print(fmt(obs))
    ret, length, nan = 0.0, 0, [math.nan] * env.obs_dim
    for a in actions:
        obs, reward, terminated = env.step(a if name == "Pendulum-v1" else int(a))
        ret, length = ret + np.float32(reward), length + 1
        truncated = length >= env.limit
        if terminated or truncated:
            line = [*obs, reward, int(terminated), int(truncated), *obs, ret, length]
            obs, ret, length = env.reset(rng), 0.0, 0
            line[:env.obs_dim] = obs
        else:
            line = [*obs, reward, 0, 0, *nan, math.nan, math.nan]
        print(fmt(line))


if __name__ == "__main__":
    main()
