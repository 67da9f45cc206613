"""What A2C, REINFORCE and IMPALA share: one gradient step per rollout on the whole
trajectory ``[T, N]``, on the actor-critic loss::

    loss = -mean(log pi(a|s) * A) + vf_coef * 0.5 * mean((v(s) - target)^2) - ent_coef * entropy

where the algorithm's ``targets`` function gives the advantages ``A``, the value
targets and the steps to learn from (A2C: GAE; REINFORCE: Monte-Carlo returns of each
env's first episode; IMPALA: V-trace). :class:`PolicyGradient` holds that function and
gives the algorithm its ``init``, ``loss_fn`` and ``update``; the iteration, the program
and the record are :class:`jaxrl.algorithms.onpolicy.Learner`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl import optim
from jaxrl.algorithms import onpolicy
from jaxrl.algorithms.onpolicy import State
from jaxrl.rollout import masked_mean
from jaxrl.types import Trajectory


def step_mask(trajectory: Trajectory) -> jax.Array:
    """``[T, N]`` True at the steps that are transitions: ``trajectory.valid`` (False at
    an env's padding steps, or an agent's after it left), else everywhere."""
    return jnp.ones_like(trajectory.reward, bool) if trajectory.valid is None else trajectory.valid


def normalized(advantage: jax.Array, mask: jax.Array, config) -> jax.Array:
    """``advantage`` standardised over the steps ``mask`` keeps, with
    ``normalize_advantages``; else as it is."""
    if not config.normalize_advantages:
        return advantage
    mean = masked_mean(advantage, mask)
    std = jnp.sqrt(masked_mean(jnp.square(advantage - mean), mask))
    return (advantage - mean) / (std + 1e-8)


class PolicyGradient(NamedTuple):
    """A policy-gradient actor-critic learner from its ``targets``:
    ``targets(value, value_next, log_prob, trajectory, config) -> (advantage, target,
    mask)``, all ``[T, N]``, from the learner's critic on ``obs`` / ``next_obs`` and its
    log-probability of the actions (no gradient flows through them) and the trajectory,
    whose ``extras["log_prob"]`` is the behaviour policy's."""

    targets: Callable

    def init(self, key: jax.Array, config) -> State:
        """Network, optimiser and ``num_envs`` freshly reset envs; one update an iteration."""
        return onpolicy.init(key, config, updates_per_iteration=1)

    def loss_fn(self, network_params, obs_stats, trajectory: Trajectory, value_next: jax.Array, config):
        """The actor-critic loss on a whole trajectory ``[T, N]``; returns ``(loss, metrics)``.
        Without a ``baseline`` (REINFORCE) no critic is learned: the value loss is 0."""
        params = {"network": network_params, "obs_stats": obs_stats}
        distribution, value = onpolicy.trajectory_policy_and_value(params, trajectory, config)
        log_prob = distribution.log_prob(trajectory.action)
        stopped = jax.lax.stop_gradient((value, value_next, log_prob))
        advantage, target, mask = self.targets(*stopped, trajectory, config)
        policy_loss = -masked_mean(log_prob * advantage, mask)
        value_loss = 0.5 * masked_mean(jnp.square(value - target), mask) if config.baseline else jnp.zeros(())
        entropy = masked_mean(distribution.entropy(), mask)
        loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
        log_ratio = jax.lax.stop_gradient(log_prob) - trajectory.extras["log_prob"]
        metrics = {
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            # How far the learner has moved from the policy that acted (0 without policy lag).
            "approx_kl": masked_mean(jnp.expm1(log_ratio) - log_ratio, mask),
        }
        return loss, metrics

    def update(self, state: State, trajectory: Trajectory, key: jax.Array, config):
        """One gradient step on a trajectory ``[T, N]`` whose ``extras["log_prob"]`` is the
        behaviour policy's. Returns ``(state, metrics)``; ``key`` is unused (no minibatches)."""
        del key
        value_next = onpolicy.bootstrap_value(state.params, trajectory, config)
        optimizer = onpolicy.make_optimizer(config, updates_per_iteration=1)
        network, opt_state, _, metrics = optim.step(
            optimizer,
            self.loss_fn,
            state.params["network"],
            state.opt_state,
            state.params["obs_stats"],
            trajectory,
            value_next,
            config,
        )
        metrics["learning_rate"] = onpolicy.current_learning_rate(opt_state)
        return state.replace(params={**state.params, "network": network}, opt_state=opt_state), metrics
