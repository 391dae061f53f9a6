"""The rollout actor for Python environments (env.name = "python"): tandem-actor execs it.

``tandem-actor`` reads the job's typed settings (common/settings/) and, for a Python env, replaces
itself with ``python3 -m tandem.rollout_actor --env MODULE:CLASS --kwargs JSON ...``
(actor/python_actor.cpp), keeping its pid, environment and control-block row. This program is the C++
rollout actor (actor/rollout_loop.hpp, actor/rollout.hpp) over :class:`tandem.pyenv.VecPyEnv`:

  * the same model: actor_critic_mlp's twin, parameters named and shaped as common/torch/builtin_nets/networks.cpp
    registers them, so the slab's signature matches and its weights load (the follower refuses otherwise);
  * the same policy head as common/torch/policy.cpp: discrete actions drawn by multinomial(softmax),
    log_prob by log_softmax; continuous by mean + exp(clamp(log_std, -5, 2)) * N(0, 1). The C++ is the
    reference: python/tests/test_rollout_policy.py holds the network and the head to it (same weights,
    observations and seed give the same head outputs, values, actions and log-probs);
  * the same slot contents and commit (docs/FORMAT.md "What the steps mean"): observations[t] and the
    bootstrap row T, logits, actions, log_probs, values[0..T], rewards, terminated, truncated, final
    observations, the episodes in (step, env) order, policy_version; committed with the checksum by
    ExperienceWriter, so the C++ PPO and V-trace learners train from it unchanged;
  * the newest weights before each slot (WeightFollower.load_into), a heartbeat and metrics row through
    tandem.job(), a stop (the launcher's request) ends the loop without committing a partial slot.
Seeds: env e of actor a in incarnation r (the launcher's restart count) from env_seed(env.seed, a, e, r),
actions from action_seed(env.seed, a, r): tandem.seeds, the mirror of the C++ actor's envs/seeds.hpp.
Deterministic mode is not offered (JobSettings refuses it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import tandem
from .pyenv import EnvError, VecPyEnv
from .seeds import action_seed

_MIN_LOG_STD, _MAX_LOG_STD = -5.0, 2.0  # common/torch/policy.hpp kMinLogStd / kMaxLogStd
_HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))


class ActorCriticMlp(torch.nn.Module):
    """common/torch/builtin_nets/networks.cpp ActorCriticMlp: the same names, shapes and registration order.

    A continuous env's policy is Gaussian with its log-std a parameter of its own (one per action
    dimension), appended to the head's means as the C++ network does."""

    def __init__(self, obs_dim: int, policy_out: int, gaussian: bool):
        super().__init__()
        if gaussian:
            self.log_std = torch.nn.Parameter(torch.zeros(policy_out))
        self.fc1 = torch.nn.Linear(obs_dim, 64)
        self.fc2 = torch.nn.Linear(64, 64)
        self.policy = torch.nn.Linear(64, policy_out)
        self.vfc1 = torch.nn.Linear(obs_dim, 64)
        self.vfc2 = torch.nn.Linear(64, 64)
        self.value = torch.nn.Linear(64, 1)
        self.gaussian = gaussian

    def heads(self, x: torch.Tensor):
        h = torch.tanh(F.linear(torch.tanh(F.linear(x, self.fc1.weight, self.fc1.bias)), self.fc2.weight, self.fc2.bias))
        v = torch.tanh(F.linear(torch.tanh(F.linear(x, self.vfc1.weight, self.vfc1.bias)), self.vfc2.weight,
                                self.vfc2.bias))
        params = F.linear(h, self.policy.weight, self.policy.bias)
        if self.gaussian:
            params = torch.cat([params, self.log_std.expand_as(params)], 1)
        return params, F.linear(v, self.value.weight, self.value.bias)[:, 0]


def sample(params: torch.Tensor, action_dim: int, continuous: bool, gen: torch.Generator):
    """PolicyHead::sample: (actions, log_probs) from the head's output [E, params_dim]."""
    if continuous:
        mean, log_std = params[:, :action_dim], params[:, action_dim:].clamp(_MIN_LOG_STD, _MAX_LOG_STD)
        actions = mean + log_std.exp() * torch.randn(mean.shape, generator=gen)
        z = (actions - mean) * (-log_std).exp()
        return actions, (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(-1)
    actions = torch.multinomial(torch.softmax(params, -1), 1, True, generator=gen).squeeze(1)
    return actions, torch.log_softmax(params, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


class Rollout:
    """Fills one slot in place from the VecPyEnv, as actor/rollout.cpp does."""

    def __init__(self, model: ActorCriticMlp, vec: VecPyEnv, shape: dict, gen: torch.Generator):
        self.model, self.vec, self.gen = model, vec, gen
        spec = vec.spec
        kind = "discrete" if vec.discrete else "continuous"
        action_dim = 1 if vec.discrete else spec["action_dim"]
        params_dim = spec["num_actions"] if vec.discrete else 2 * spec["action_dim"]
        mine = (len(vec.envs), spec["obs_dim"], kind, action_dim, params_dim)
        theirs = (shape["envs"], shape["obs_dim"], shape["action"], shape["action_dim"], shape["logits_dim"])
        if mine != theirs:
            raise EnvError(f"experience rings hold (envs, obs_dim, action, action_dim, logits) = {theirs}; this actor "
                           f"steps {mine} of '{vec.name}': the learner and the actors must read the same env.* config")
        self.action_dim, self.continuous = spec["action_dim"], not vec.discrete
        self.policy_s = self.env_s = 0.0  # where fill() spent its time, for the reports

    def fill(self, slot, version: int, stopping) -> list:
        """Returns the slot's finished episodes [(return, length)], or None when a stop came mid-slot."""
        v = self.vec
        obs, logits, values = slot.observations.numpy(), slot.logits.numpy(), slot.values.numpy()
        actions, log_probs = slot.actions.numpy(), slot.log_probs.numpy()
        rewards, term, trunc = slot.rewards.numpy(), slot.terminated.numpy(), slot.truncated.numpy()
        final, ep_ret, ep_len = slot.final_observations.numpy(), slot.episode_returns.numpy(), slot.episode_lengths.numpy()
        final.fill(0)
        ep_ret.fill(0)
        ep_len.fill(0)
        slot.policy_version, slot.episodes = version, 0
        obs[0] = v.obs
        episodes = []
        steps = rewards.shape[0]
        with torch.inference_mode():
            for t in range(steps):
                if stopping():
                    return None
                start = time.perf_counter()
                params, value = self.model.heads(torch.from_numpy(obs[t]))
                values[t] = value.numpy()
                logits[t] = params.numpy()
                a, lp = sample(params, self.action_dim, self.continuous, self.gen)
                log_probs[t] = lp.numpy()
                acts = a.numpy()
                actions[t] = acts
                acted = time.perf_counter()
                v.step(acts)
                rewards[t], term[t], trunc[t], obs[t + 1] = v.rewards, v.terminated, v.truncated, v.obs
                self.policy_s += acted - start
                self.env_s += time.perf_counter() - acted
                for i, ret, length in v.done_episodes:
                    final[t, i] = v.final_obs[i]
                    ep_ret[len(episodes)], ep_len[len(episodes)] = ret, length
                    episodes.append((ret, length))
            values[steps] = self.model.heads(torch.from_numpy(obs[steps]))[1].numpy()  # V(bootstrap)
        slot.episodes = len(episodes)
        return episodes


def _attach(what: str, make, wait_s: float, stopping):
    """Waits for the learner's segment (as actor/attach.cpp), or None after a stop."""
    t0 = time.monotonic()
    while True:
        try:
            return make()
        except tandem.SegmentNotFoundError:
            if time.monotonic() - t0 > wait_s:
                raise EnvError(f"the learner's {what} did not appear within actor.wait_weights_s = {wait_s} s: "
                               "is the learner running?") from None
            if stopping():
                return None
            time.sleep(0.05)


def run(args, job) -> int:
    torch.set_num_threads(args.threads)
    stopping = (lambda: job.should_stop) if job else (lambda: False)
    restarts, index = (job.restarts, job.index) if job else (0, args.index)
    vec = VecPyEnv(args.env, json.loads(args.kwargs), args.envs, args.seed, index, restarts)
    follower = _attach("weight slab", lambda: tandem.WeightFollower(args.job), args.wait_weights_s, stopping)
    writer = _attach("experience rings", lambda: tandem.ExperienceWriter(args.job, index), args.wait_weights_s, stopping)
    if follower is None or writer is None:
        return 0
    spec = vec.spec
    model = ActorCriticMlp(spec["obs_dim"], spec["num_actions"] or spec["action_dim"], not vec.discrete)
    gen = torch.Generator().manual_seed(action_seed(args.seed, index, restarts))
    rollout = Rollout(model, vec, writer.shape, gen)
    shape = writer.shape
    per_slot = shape["steps"] * shape["envs"]
    print(f"rollout (python): {shape['envs']} x {shape['steps']} steps of '{args.env}' per slot into ring {index}",
          flush=True)
    recent = collections.deque(maxlen=100)
    slots, lag_sum, version, last = 0, 0.0, 0, time.monotonic()
    waited = 0.0  # on a full ring, since the last report
    backoff = 1e-5

    def report(force=False):
        nonlocal slots, lag_sum, last, waited
        now = time.monotonic()
        if job is None or (not force and now - last < 0.2):
            return
        c = writer.counters()
        window = max(now - last, 1e-9)
        m = dict(step=c["head"], version=version, env_steps=c["head"] * per_slot,
                 env_steps_per_s=slots * per_slot / window, ring_full_waits=c["full_waits"],
                 env_share=rollout.env_s / window, compute_share=rollout.policy_s / window, wait_share=waited / window)
        rollout.policy_s = rollout.env_s = waited = 0.0
        if recent:
            m.update(episode_return=float(np.mean([r for r, _ in recent])),
                     episode_length=float(np.mean([n for _, n in recent])))
        if slots:
            m["policy_lag_avg"] = lag_sum / slots
        job.report(**m)
        slots, lag_sum, last = 0, 0.0, now

    while not stopping():
        slot = writer.begin_write(False)
        if slot is None:  # full: the learner has not caught up
            report()
            start = time.monotonic()
            time.sleep(backoff)
            waited += time.monotonic() - start
            backoff = min(backoff * 2, 1e-3)
            continue
        backoff = 1e-5
        loaded = follower.load_into(model)
        if loaded is not None:
            version = loaded
            if job:
                job.saw_version(version)
        episodes = rollout.fill(slot, version, stopping)
        if episodes is None:
            break
        recent.extend(episodes)
        lag_sum += max(follower.latest_version - version, 0)
        slots += 1
        writer.commit(slot)
        report()
    report(True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True, help="module:Class (env.python)")
    ap.add_argument("--kwargs", default="{}", help="JSON object (env.kwargs)")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--wait-weights-s", type=float, default=300.0)
    ap.add_argument("--job", default=None, help="by hand: the job id (else $TANDEM_JOB)")
    ap.add_argument("--index", type=int, default=0, help="by hand: the ring (else $TANDEM_INDEX)")
    args = ap.parse_args(argv)
    try:
        # The C++ actor's rule: the heartbeat stops once the loop has not ticked for two minutes (hung).
        ctx = tandem.job(hang_timeout_s=120.0) if tandem.in_job() else contextlib.nullcontext()
        with ctx as job:
            return run(args, job)
    except (EnvError, tandem.Error) as e:  # one line: the env, or a slab / ring that does not fit
        print(f"tandem-actor: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
