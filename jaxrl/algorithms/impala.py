"""IMPALA (Espeholt et al., 2018, arXiv:1802.01561): actor-critic with V-trace off-policy
correction for actors that act with stale params.

In one compiled program (``train``) the actors run in lock-step with the learner, so
``policy_lag = k`` makes them act with the params of ``k`` updates ago, kept in the
state (``lagged_params``, oldest first): the staleness that V-trace corrects. With
actors apart from the learner (:func:`jaxrl.workflow.actor_learner.run`, ``python -m
jaxrl train impala --actors 2``) the lag is real: each actor collects a rollout with the
newest params it pulled, and the learner's update is this one, fed those rollouts.
Its targets and policy-gradient advantages truncate the importance weights at
``rho_bar`` / ``c_bar``, ``gae_lambda`` is V-trace's trace-cutting lambda; the loss and
the one gradient step per rollout are
:class:`jaxrl.algorithms.policy_gradient.PolicyGradient`'s. With ``policy_lag=0``,
infinite ``rho_bar`` / ``c_bar`` and ``gae_lambda=1`` the targets are A2C's at lambda 1. ::

    config = impala.Config(env_id="CartPole-v1", policy_lag=4)
    out = jax.jit(impala.train)(jax.random.key(0), config)
    out.metrics["approx_kl"]  # how far the learner is from the policy that acted
"""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

from jaxrl import returns
from jaxrl.algorithms import onpolicy
from jaxrl.algorithms.policy_gradient import PolicyGradient, normalized, step_mask
from jaxrl.config import require_int, require_range, static
from jaxrl.types import Trajectory


@struct.dataclass
class Config(onpolicy.SingleAgent, onpolicy.Config):
    """IMPALA settings: :class:`jaxrl.algorithms.onpolicy.Config`'s with A2C's defaults,
    :class:`jaxrl.algorithms.onpolicy.SingleAgent`'s (reward scaling, gSDE), the policy
    lag, V-trace's truncation and lambda, and advantage normalisation. Static fields fix
    the program; the rest can be traced and vmapped."""

    num_envs: int = static(16)
    num_steps: Any = static(8)
    total_timesteps: int = static(200_000)
    normalize_advantages: bool = static(False)
    policy_lag: int = static(1)  # actors act with the params of this many updates ago
    learning_rate: float = 1e-3
    gae_lambda: float = 0.95  # V-trace's lambda (traced)
    rho_bar: float = 1.0  # truncation of the importance weights (traced)
    c_bar: float = 1.0  # truncation of the trace coefficients (traced)

    def __post_init__(self):
        super().__post_init__()
        require_int(self, "policy_lag", 0)

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "gae_lambda", 0.0, 1.0)
        for field in ("rho_bar", "c_bar"):  # jnp.inf switches truncation off
            require_range(self, field, 0.0, float("inf"), low_open=True)


PRESETS = {}


def vtrace(value, value_next, log_prob, trajectory: Trajectory, config, c_bar=None) -> returns.VTraceOutput:
    """:func:`jaxrl.returns.vtrace` of a trajectory ``[T, N]`` with values ``value`` /
    ``value_next`` and the importance weights of ``log_prob`` over the behaviour
    policy's (``trajectory.extras["log_prob"]``), truncated at ``config.rho_bar`` and
    ``c_bar`` (default ``config.c_bar``), ``config.gae_lambda`` its lambda."""
    return returns.vtrace(
        value,
        value_next,
        trajectory.reward,
        trajectory.terminated,
        trajectory.truncated,
        log_prob - trajectory.extras["log_prob"],
        config.gamma,
        config.rho_bar,
        config.c_bar if c_bar is None else c_bar,
        lambda_=config.gae_lambda,
    )


def targets(value: jax.Array, value_next: jax.Array, log_prob: jax.Array, trajectory: Trajectory, config: Config):
    """V-trace targets and policy-gradient advantages (normalised with
    ``normalize_advantages``) and the mask of steps to learn from, all ``[T, N]``
    (:func:`vtrace`)."""
    out = vtrace(value, value_next, log_prob, trajectory, config)
    mask = step_mask(trajectory)
    return normalized(out.pg_advantages, mask, config), out.vs, mask


_learner = PolicyGradient(targets)
loss_fn = _learner.loss_fn


# Lock-step actors act with the params of ``policy_lag`` updates ago (kept in the state).
learner = onpolicy.with_policy_lag(_learner.init, _learner.update)
init, update = learner.init, learner.update


# ----------------------------------------------------------------------------- actors apart from the learner


def actor_learner_config(config: Config) -> Config:
    """The decoupled run's settings: ``policy_lag`` 0, as its actors' lag is real."""
    return config.replace(policy_lag=0)


ACTOR_LEARNER = learner.actor_learner(lambda config: 1, prepare=actor_learner_config)

algorithm = learner.algorithm(
    "impala",
    Config,
    PRESETS,
    summary="IMPALA: actor-critic with V-trace for actors acting with stale params",
    actor_learner=ACTOR_LEARNER,
)
__getattr__ = algorithm.module_getattr(__name__)  # impala.step, impala.train, impala.preset: the record's
