"""Seeds for the Python rollout actor: the mirror of envs/seeds.hpp, which is the reference (its header
says why each rule is what it is). tests/env_seeds_test.cpp holds this file to it over a table of
(seed, actor, env, restart) cases, so a Python actor and a C++ one, restarted or not, draw the same
streams. Pure Python with no imports: pyenv.py loads it by path when it runs outside the package
(the spec probe, the CleanRL peer).
Evaluators are C++ programs only, so their seed (eval_seed) has no mirror here.
"""

from __future__ import annotations

__all__ = ["env_seed", "action_seed"]

_MASK = (1 << 64) - 1
_ACTION_SEED_INDEX = 1 << 40  # kActionSeedIndex: above every env index


def _mix(z: int) -> int:
    """splitmix64_mix: splitmix64's finaliser over one 64-bit word."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def env_seed(job_seed: int, actor: int, env: int, restarts: int = 0) -> int:
    """envs::env_seed: env ``env`` of actor ``actor`` in a job seeded ``job_seed``, in the actor's
    incarnation ``restarts`` (0: first start)."""
    base = _mix((_mix((_mix(job_seed & _MASK) + actor) & _MASK) + env) & _MASK)
    return base if restarts == 0 else _mix((base + restarts) & _MASK)


def action_seed(job_seed: int, actor: int, restarts: int) -> int:
    """envs::action_seed: the seed of a rollout actor's action sampler."""
    return env_seed(job_seed, actor, _ACTION_SEED_INDEX + restarts)
