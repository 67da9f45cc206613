"""APPO: asynchronous PPO, PPO's clipped surrogate for actors that act with stale params
(after IMPALA, Espeholt et al., 2018, arXiv:1802.01561, and RLlib's APPO).

Each update runs PPO's minibatch epochs (:func:`jaxrl.algorithms.ppo.minibatch_update`)
with the ratio taken against the *behaviour* policy, the one whose params an actor acted
with, and with V-trace in place of GAE: value targets ``vs`` and advantages ``q_t -
V(s_t)`` (:func:`jaxrl.algorithms.impala.vtrace`'s ``q_estimate``) under the learner's params at
the update's start, the importance weights truncated at ``rho_bar``, the trace
coefficients at 1 (the IMPALA paper's c-bar) and ``gae_lambda`` as V-trace's lambda.
The surrogate's ratio is the only importance weight on the advantage, and its clip
keeps every minibatch step near the behaviour policy.

In one compiled program (``train``) the actors run in lock-step with the learner and
``policy_lag=k`` makes them act with the params of ``k`` updates ago, as IMPALA's; with
actors apart from the learner (:func:`jaxrl.workflow.actor_learner.run`, ``python -m
jaxrl train appo --actors 2``) the lag is real. ::

    config = appo.Config(env_id="CartPole-v1", policy_lag=2)
    out = jax.jit(appo.train)(jax.random.key(0), config)
    result = actor_learner.run("appo", appo.Config(env_id="gymnasium:CartPole-v1"), actors=2)
"""

from __future__ import annotations

import jax
from flax import struct

from jaxrl.algorithms import impala, onpolicy, ppo
from jaxrl.config import require_int, require_range, static
from jaxrl.types import Trajectory


@struct.dataclass
class Config(ppo.Settings, onpolicy.Config):
    """APPO settings: :class:`jaxrl.algorithms.onpolicy.Config`'s and PPO's
    (:class:`jaxrl.algorithms.ppo.Settings`: ``gae_lambda`` is V-trace's lambda), the
    policy lag of the lock-step program and V-trace's truncation. Static fields fix the
    program; the rest can be traced and vmapped. With actors apart, ``num_envs`` and
    ``num_steps`` are one actor's block."""

    policy_lag: int = static(1)  # lock-step actors act with the params of this many updates ago
    rho_bar: float = 1.0  # truncation of the importance weights in V-trace's targets (traced)

    def __post_init__(self):
        super().__post_init__()
        require_int(self, "policy_lag", 0)

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "rho_bar", 0.0, float("inf"), low_open=True)  # jnp.inf: no truncation


PRESETS = {}


def vtrace_targets(params: dict, trajectory: Trajectory, config: Config) -> dict:
    """APPO's per-step learning targets ``[T, N]`` under ``params``: V-trace's value
    ``target`` and ``advantage`` ``q_t - V(s_t)``, with the importance weights of
    ``params``' policy over the behaviour's (``trajectory.extras["log_prob"]``), and the
    ``value`` ``V(s_t)`` a clipped value loss stays near."""
    distribution, value = onpolicy.trajectory_policy_and_value(params, trajectory, config)
    value_next = onpolicy.bootstrap_value(params, trajectory, config)
    out = impala.vtrace(value, value_next, distribution.log_prob(trajectory.action), trajectory, config, c_bar=1.0)
    value = jax.lax.stop_gradient(value)
    return {"advantage": out.q_estimate - value, "target": out.vs, "value": value}


def _updates_per_iteration(config: Config) -> int:
    return config.num_epochs * config.num_minibatches


def _init(key: jax.Array, config: Config) -> onpolicy.State:
    return onpolicy.init(key, config, updates_per_iteration=_updates_per_iteration(config))


# Lock-step actors act with the params of ``policy_lag`` updates ago (kept in the state).
learner = onpolicy.with_policy_lag(_init, ppo.minibatch_update(vtrace_targets))
init, update = learner.init, learner.update

ACTOR_LEARNER = learner.actor_learner(_updates_per_iteration, prepare=lambda config: config.replace(policy_lag=0))

algorithm = learner.algorithm(
    "appo",
    Config,
    PRESETS,
    summary="APPO: PPO's clipped surrogate against the behaviour policy, V-trace targets, for lagged actors",
    actor_learner=ACTOR_LEARNER,
)
__getattr__ = algorithm.module_getattr(__name__)  # appo.step, appo.train, appo.preset: the record's
