"""Advantage actor-critic, and its relatives REINFORCE and IMPALA, as one implementation.

Each iteration collects ``num_steps`` steps from ``num_envs`` envs (the lock-step JAX
form of A3C's parallel actors) and takes one gradient step on::

    loss = -mean(log pi(a|s) * A) + vf_coef * 0.5 * mean((v(s) - target)^2) - ent_coef * entropy

where the static field ``advantage`` picks the advantage ``A`` and the value target:

* ``"gae"`` (A2C, Mnih et al., 2016, arXiv:1602.01783): GAE(lambda) from the critic;
  ``gae_lambda=1`` is the classic n-step return to the end of the rollout.
* ``"monte_carlo"`` (REINFORCE, Williams, 1992): whole-episode discounted returns. Every
  env is reset when the iteration starts and only its first episode is used, so
  ``num_steps`` must cover the env's time limit (keeping later, partial episodes would
  favour short ones). With ``baseline`` the critic's value is subtracted.
* ``"vtrace"`` (IMPALA, Espeholt et al., 2018, arXiv:1802.01561): V-trace targets and
  policy-gradient advantages with truncated importance weights ``rho_bar`` / ``c_bar``
  (``gae_lambda`` is V-trace's trace-cutting lambda). With ``policy_lag=0``, infinite
  ``rho_bar`` / ``c_bar`` and ``gae_lambda=1`` it is the ``"gae"`` estimator at lambda 1.

``policy_lag = k`` makes the actors act with the params of ``k`` updates ago (kept in
the state), as IMPALA's asynchronous actors do; V-trace corrects for it, the other
estimators ignore it. :mod:`~jaxrl.algorithms.reinforce` and
:mod:`~jaxrl.algorithms.impala` are this module with their own defaults. ::

    config = a2c.Config(env_id="CartPole-v1")
    out = jax.jit(a2c.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, loop, optim, returns, rollout
from jaxrl.algorithms import onpolicy
from jaxrl.algorithms.contract import Algorithm
from jaxrl.algorithms.onpolicy import State, act, initial_carry
from jaxrl.config import freeze_mapping, require_choice, require_int, require_range, static
from jaxrl.rollout import masked_mean
from jaxrl.types import Trajectory

ADVANTAGES = ("gae", "monte_carlo", "vtrace")


@struct.dataclass
class Config(onpolicy.Config):
    """A2C settings: :class:`jaxrl.algorithms.onpolicy.Config`'s, with A2C's defaults, plus the
    estimator, the policy lag and V-trace's truncation. Static fields fix the program;
    the rest can be traced and vmapped."""

    num_envs: int = static(16)
    num_steps: Any = static(8)  # rollout length; None: the env's time limit (monte_carlo)
    total_timesteps: int = static(200_000)
    normalize_advantages: bool = static(False)
    learning_rate: float = 1e-3
    gae_lambda: float = 0.95  # also V-trace's lambda; 1: n-step returns to the rollout end
    advantage: str = static("gae")  # "gae", "monte_carlo" or "vtrace"
    baseline: bool = static(True)  # monte_carlo: subtract the critic's value
    policy_lag: int = static(0)  # actors act with the params of this many updates ago
    rho_bar: float = 1.0  # vtrace: truncation of the importance weights (traced)
    c_bar: float = 1.0  # vtrace: truncation of the trace coefficients (traced)

    def __post_init__(self):
        require_choice(self, "advantage", ADVANTAGES)
        # num_steps=None resolves from the env before the shared checks run.
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        spec = envs.config_spec(self)
        if self.num_steps is None:
            if self.advantage != "monte_carlo" or spec.max_episode_steps is None:
                raise ValueError(
                    "num_steps=None (the env's time limit) needs advantage='monte_carlo' and an env with a time limit"
                )
            object.__setattr__(self, "num_steps", spec.max_episode_steps)
        super().__post_init__()
        require_int(self, "policy_lag", 0)
        if not self.baseline and self.advantage != "monte_carlo":
            raise ValueError(f"baseline=False needs advantage='monte_carlo': {self.advantage!r} uses the critic")
        if self.advantage == "monte_carlo" and self.num_steps < (spec.max_episode_steps or 0):
            raise ValueError(
                f"advantage='monte_carlo' uses whole episodes: num_steps ({self.num_steps}) must be at least "
                f"the env's time limit ({spec.max_episode_steps}); pass num_steps=None for exactly that"
            )

    def check_traced(self) -> None:
        super().check_traced()
        for field in ("rho_bar", "c_bar"):  # jnp.inf switches truncation off
            require_range(self, field, 0.0, float("inf"), low_open=True)


PRESETS = {
    # No entropy bonus and a learning rate of 3e-3 (the defaults otherwise): a hand sweep
    # at gymnax-blines' 150k-step budget, in benchmarks/RESULTS.md's learning table.
    "CartPole-v1": dict(total_timesteps=150_000, ent_coef=0.0, learning_rate=3e-3),
    # rl-baselines3-zoo's A2C for MountainCar-v0 normalises observations, has no entropy
    # bonus and trains 1M steps; GAE lambda 0.98 (PPO's MountainCar preset) and a learning
    # rate of 3e-3 from a hand sweep there (benchmarks/RESULTS.md's learning table).
    "MountainCar-v0": dict(
        total_timesteps=1_000_000,
        normalize_observations=True,
        ent_coef=0.0,
        gae_lambda=0.98,
        learning_rate=3e-3,
    ),
}


def init(key: jax.Array, config: Config) -> State:
    """Network, optimiser, ``num_envs`` reset envs and the ``policy_lag`` old params."""
    return onpolicy.init(key, config, updates_per_iteration=1, policy_lag=config.policy_lag)


# ----------------------------------------------------------------------------- learning


def first_episode_mask(trajectory: Trajectory) -> jax.Array:
    """``[T, N]`` True up to and including each env's first episode end."""
    done = trajectory.done.astype(jnp.int32)
    return (jnp.cumsum(done, axis=0) - done) == 0


def targets(value: jax.Array, value_next: jax.Array, log_prob: jax.Array, trajectory: Trajectory, config: Config):
    """Advantages, value targets and the mask of steps to learn from, all ``[T, N]``.

    ``value`` / ``value_next`` are the learner's critic on ``obs`` / ``next_obs`` and
    ``log_prob`` its log-probability of the actions; the trajectory's
    ``extras["log_prob"]`` is the behaviour policy's. No gradient flows through them.
    """
    value, value_next, log_prob = jax.lax.stop_gradient((value, value_next, log_prob))
    r, term, trunc = trajectory.reward, trajectory.terminated, trajectory.truncated
    mask = jnp.ones_like(r, bool) if trajectory.valid is None else trajectory.valid
    if config.advantage == "gae":
        advantage = returns.gae(r, value, value_next, term, trunc, config.gamma, config.gae_lambda)
        target = advantage + value
    elif config.advantage == "monte_carlo":
        # Bootstrapped only at time-limit truncations, and only from a learned baseline.
        target = returns.discounted_returns(
            r, value_next if config.baseline else jnp.zeros_like(r), term, trunc, config.gamma
        )
        advantage = target - value if config.baseline else target
        mask = mask & first_episode_mask(trajectory)
    else:
        log_rho = log_prob - trajectory.extras["log_prob"]
        out = returns.vtrace(
            value,
            value_next,
            r,
            term,
            trunc,
            log_rho,
            config.gamma,
            config.rho_bar,
            config.c_bar,
            lambda_=config.gae_lambda,
        )
        advantage, target = out.pg_advantages, out.vs
    if config.normalize_advantages:
        mean = masked_mean(advantage, mask)
        std = jnp.sqrt(masked_mean(jnp.square(advantage - mean), mask))
        advantage = (advantage - mean) / (std + 1e-8)
    return advantage, target, mask


def loss_fn(network_params, obs_stats, trajectory: Trajectory, value_next: jax.Array, config: Config):
    """The actor-critic loss on a whole trajectory ``[T, N]``; returns ``(loss, metrics)``."""
    params = {"network": network_params, "obs_stats": obs_stats}
    distribution, value = onpolicy.trajectory_policy_and_value(params, trajectory, config)
    log_prob = distribution.log_prob(trajectory.action)
    advantage, target, mask = targets(value, value_next, log_prob, trajectory, config)
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


def update(state: State, trajectory: Trajectory, key: jax.Array, config: Config):
    """One gradient step on a trajectory ``[T, N]`` whose ``extras["log_prob"]`` is the
    behaviour policy's. Returns ``(state, metrics)``; ``key`` is unused (no minibatches)."""
    del key
    value_next = onpolicy.bootstrap_value(state.params, trajectory, config)
    optimizer = onpolicy.make_optimizer(config, updates_per_iteration=1)
    network, opt_state, _, metrics = optim.step(
        optimizer,
        loss_fn,
        state.params["network"],
        state.opt_state,
        state.params["obs_stats"],
        trajectory,
        value_next,
        config,
    )
    metrics["learning_rate"] = onpolicy.current_learning_rate(opt_state)
    return state.replace(params={**state.params, "network": network}, opt_state=opt_state), metrics


def step(state: State, key: jax.Array, config: Config):
    """One iteration: collect with the (possibly lagged) behaviour params, then :func:`update`."""
    collect_key, update_key = jax.random.split(key)
    lagged = config.policy_lag > 0
    behaviour = jax.tree.map(lambda x: x[0], state.lagged_params) if lagged else state.params
    monte_carlo = config.advantage == "monte_carlo"
    state, trajectory = onpolicy.collect(state, behaviour, collect_key, config, fresh_start=monte_carlo)
    old_params = state.params
    state, metrics = update(state, trajectory, update_key, config)
    if lagged:  # the params this update started from join the queue; the oldest leaves
        state = state.replace(
            lagged_params=jax.tree.map(
                lambda queue, p: jnp.concatenate([queue[1:], p[None]]), state.lagged_params, old_params
            )
        )
    state = onpolicy.update_obs_stats(state, trajectory, config)
    if monte_carlo:  # report the episodes learned from: each env's first
        first = first_episode_mask(trajectory)
        trajectory = trajectory.replace(
            terminated=trajectory.terminated & first, truncated=trajectory.truncated & first
        )
    metrics.update(rollout.episode_metrics(trajectory), timesteps=state.timesteps)
    return state, metrics


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program` (for :mod:`jaxrl.workflow.runner`'s chunked training)."""
    return onpolicy.program(init, step, config)


algorithm = Algorithm(
    name="a2c",
    Config=Config,
    init=init,
    act=act,
    initial_carry=initial_carry,
    update=update,
    step=step,
    program=program,
    presets=PRESETS,
    summary="Advantage actor-critic: one update per rollout, GAE, Monte-Carlo or V-trace advantages",
)
__getattr__ = algorithm.module_getattr(__name__)  # a2c.train, a2c.preset: the record's
