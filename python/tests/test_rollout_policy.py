"""The Python rollout actor's policy (tandem.rollout_actor: ActorCriticMlp, sample) held to the C++ one it
mirrors, which is the reference: actor_critic_mlp as common/torch/rl_model.hpp builds it and the policy
head of common/torch/policy.cpp, sampled from a generator seeded as actor/rollout_loop.cpp seeds it
(_tandem._testing.rl_policy_step). Same weights, observations and seed must give the same head outputs,
values, actions and log-probs, so a Python actor's slots read to the learner as a C++ actor's do."""

import pytest
import torch

import tandem
from tandem import rollout_actor
from tandem.seeds import action_seed

CASES = [  # env, observations per row, head outputs (actions or 2 x action_dim), continuous
    ("cartpole", 4, 2, False),
    ("acrobot", 6, 3, False),
    ("pendulum", 3, 1, True),
    ("hopper", 11, 3, True),
]


@pytest.mark.parametrize("env,obs_dim,out,continuous", CASES)
def test_the_python_policy_gives_the_c_plus_plus_actions_log_probs_and_values(env, obs_dim, out, continuous):
    torch.manual_seed(7)
    model = rollout_actor.ActorCriticMlp(obs_dim, out, continuous)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.7, 0.7)
        if continuous:  # both sides of the log-std clamp [-5, 2], and inside it
            model.log_std.copy_(torch.tensor([-9.0, 3.5, 0.25][:out]))
    obs = torch.randn(16, obs_dim) * 2
    seed = action_seed(11, 2, 1)
    weights = list(model.named_parameters())

    ref = tandem._tandem._testing.rl_policy_step(env, [(n, p.detach()) for n, p in weights], obs, seed)
    with torch.inference_mode():
        params, values = model.heads(obs)
        actions, log_probs = rollout_actor.sample(params, out, continuous, torch.Generator().manual_seed(seed))
    assert torch.equal(params, ref["params"]), (params - ref["params"]).abs().max()
    assert torch.equal(values, ref["values"])
    assert actions.dtype == ref["actions"].dtype and torch.equal(actions, ref["actions"])
    assert torch.equal(log_probs, ref["log_probs"]), (log_probs - ref["log_probs"]).abs().max()


def test_the_reference_refuses_weights_that_are_not_the_networks():
    model = rollout_actor.ActorCriticMlp(4, 2, False)
    named = [(n, p.detach()) for n, p in model.named_parameters()]
    with pytest.raises(tandem.Error, match="fc1.weight"):
        tandem._tandem._testing.rl_policy_step("cartpole", named[1:], torch.zeros(1, 4), 0)
