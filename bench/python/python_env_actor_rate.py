#!/usr/bin/env python3
"""One rollout actor's own rate (docs/RL.md): this script makes the rings and a weight slab, starts the actor
by hand and takes every slot as soon as it is committed, so no learner limits it.

    PYTHONPATH=build/python /usr/bin/python3 bench/python/python_env_actor_rate.py python 16 80
    PYTHONPATH=build/python /usr/bin/python3 bench/python/python_env_actor_rate.py c++ 16 200

`python`: `python3 -m tandem.rollout_actor` on examples/python/envs/cartpole.py; `c++`: build/actor/tandem-actor
on the C++ CartPole (job `local`, as tandem-actor runs by hand). Prints one JSON line: env steps/s over the
slots after the first.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import tandem
from tandem.rollout_actor import ActorCriticMlp

T = 32


def main():
    kind, envs, slots = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    job = "local" if kind == "c++" else f"pyrate{os.getpid()}"
    pub = tandem.WeightPublisher(ActorCriticMlp(4, 2, False), job, persist=False)  # the twin: the same signature
    pub.publish(1)
    rings = tandem.ExperienceRings.create(job, actors=1, slots=4, steps=T, envs=envs, obs_dim=4, action="discrete",
                                          action_dim=1, logits_dim=2)
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as cfg:
        cfg.write(f'[env]\nname = "cartpole"\nenvs = {envs}\n[learner]\nalgo = "ppo"\n[actor]\nrole = "rollout"\n'
                  f'[model]\nname = "actor_critic_mlp"\n[rl]\nrollout_steps = {T}\nminibatches = 1\n')
        cfg.flush()
        cmd = (["build/actor/tandem-actor", cfg.name] if kind == "c++" else
               [sys.executable, "-m", "tandem.rollout_actor", "--env", "examples.python.envs.cartpole:CartPole",
                "--envs", str(envs), "--job", job])
        actor = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        try:
            t0 = None
            for n in range(slots):
                with rings.take(0, timeout=60):
                    if n == 0:
                        t0 = time.perf_counter()
            rate = (slots - 1) * T * envs / (time.perf_counter() - t0)
            print(json.dumps({"actor": kind, "envs": envs, "env_steps_per_s": round(rate, 1),
                              "load": float(open("/proc/loadavg").read().split()[0])}))
        finally:
            actor.kill()
            actor.wait()
            rings.close()
            pub.close()


if __name__ == "__main__":
    main()
