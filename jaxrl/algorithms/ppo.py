"""Proximal Policy Optimization (Schulman et al., 2017, arXiv:1707.06347).

Clipped surrogate objective with GAE(lambda) advantages, optional value clipping,
entropy bonus, global-norm gradient clipping, learning-rate annealing, advantage
normalisation and optional observation normalisation; discrete (categorical) and
continuous (diagonal Gaussian) actions. One iteration collects ``num_steps`` steps from
``num_envs`` envs and runs ``num_epochs`` passes of ``num_minibatches`` minibatches.

With memory (``memory="gru"`` or ``"lstm"``) the minibatches are sequences: each env's
rollout is cut into chunks of ``sequence_length`` steps, the chunks are shuffled across
envs and time, and each epoch re-runs the policy over every chunk from the memory
stored when the chunk's first step was taken, resetting it where episodes ended.

``sde=GSDE(...)`` (:class:`jaxrl.exploration.GSDE`, Box actions) explores with
generalized state-dependent exploration (gSDE, :mod:`jaxrl.algorithms.onpolicy`): the
Gaussian's scale depends on the actor's features, the ratio uses its log-prob, and the
rollout acts with the mean plus ``z(s) @ theta``, one noise matrix ``theta`` per env
kept in the carry beside any memory.

Its iteration, program and record are :class:`jaxrl.algorithms.onpolicy.Learner`'s,
built from :func:`init` and :func:`update`; :mod:`~jaxrl.algorithms.ippo` and
:mod:`~jaxrl.algorithms.mappo` are the same functions with a multi-agent Config. ::

    config = ppo.Config(env_id="CartPole-v1")
    out = jax.jit(ppo.train)(jax.random.key(0), config)
    out.metrics["eval_return"]   # [num_iterations], NaN where no evaluation ran
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import optim, returns
from jaxrl.algorithms import onpolicy
from jaxrl.algorithms.onpolicy import State
from jaxrl.config import require_int, require_range, static
from jaxrl.exploration import GSDE
from jaxrl.rollout import masked_mean
from jaxrl.types import Trajectory


@struct.dataclass
class Settings:
    """PPO's own settings, mixed into :class:`Config` and the multi-agent Configs
    (:mod:`~jaxrl.algorithms.ippo`, :mod:`~jaxrl.algorithms.mappo`) before
    :class:`jaxrl.algorithms.onpolicy.Config`: GAE's lambda, the minibatch epochs and
    the clipping."""

    normalize_advantages = True  # each minibatch's advantages are standardised (PureJaxRL, CleanRL)

    num_epochs: int = static(4)
    num_minibatches: int = static(4)
    clip_value_loss: bool = static(True)
    sequence_length: Any = static(None)  # with memory: steps per minibatch sequence (None: num_steps)
    gae_lambda: float = 0.95  # traced
    clip_eps: float = 0.2  # traced

    def __post_init__(self):
        super().__post_init__()
        for field in ("num_epochs", "num_minibatches"):
            require_int(self, field, 1)
        if self.memory == "none":
            if self.sequence_length is not None:
                raise ValueError("sequence_length applies to recurrent policies (memory='gru' or 'lstm')")
            rows, what = self.num_envs * self.num_steps, "the batch num_envs * num_steps"
        else:
            if self.sequence_length is not None:
                require_int(self, "sequence_length", 1)
            if self.num_steps % self.chunk_length:
                raise ValueError(f"sequence_length ({self.sequence_length}) must divide num_steps ({self.num_steps})")
            rows, what = self.num_envs * self.num_steps // self.chunk_length, "the number of sequences"
        if rows % self.num_minibatches:
            raise ValueError(f"num_minibatches ({self.num_minibatches}) must divide {what} = {rows}")

    @property
    def chunk_length(self) -> int:
        """Steps per minibatch sequence of a recurrent policy."""
        return self.num_steps if self.sequence_length is None else self.sequence_length

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "gae_lambda", 0.0, 1.0)
        require_range(self, "clip_eps", 0.0, float("inf"), low_open=True)


@struct.dataclass
class Config(onpolicy.SingleAgent, Settings, onpolicy.Config):
    """PPO settings: :class:`jaxrl.algorithms.onpolicy.Config`'s, whose defaults are
    PureJaxRL's CartPole configuration, :class:`Settings`' (GAE, the minibatch epochs and
    clipping) and :class:`jaxrl.algorithms.onpolicy.SingleAgent`'s (reward scaling,
    gSDE). Static fields fix the program; the rest can be traced and vmapped.
    ``preset(env_id)`` gives tuned settings for other tasks (e.g. Pendulum-v1).
    """


# gymnax-blines' PPO for the MinAtar games (agents/<game>-MinAtar/ppo.yaml and
# utils/ppo.py): separate 256 x 256 relu actor and critic on the flattened grid, a
# constant learning rate (their warm-up runs from lr_begin to an equal lr_end), value
# clipping, advantages standardised per minibatch. Still theirs alone: lecun-normal
# kernels, and time limits treated as terminal.
MINATAR = dict(
    num_envs=64,
    num_steps=128,
    num_minibatches=8,
    num_epochs=4,
    total_timesteps=10_000_000,
    learning_rate=5e-4,
    anneal_lr=False,
    gamma=0.999,
    hidden_sizes=(256, 256),
    activation="relu",
)

PRESETS = {
    **{f"{game}-MinAtar": MINATAR for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders")},
    # rl-baselines3-zoo's PPO for CartPole-v1 (hyperparams/ppo.yml: 8 envs x 32 steps, one
    # minibatch, 20 epochs, GAE lambda 0.8, gamma 0.98, no entropy bonus, learning rate 1e-3
    # annealed; the zoo anneals the clip range too, ours stays 0.2) at gymnax-blines'
    # 150k-step budget. The plain defaults are PureJaxRL's settings, for 500k steps.
    "CartPole-v1": dict(
        num_envs=8,
        num_steps=32,
        num_minibatches=1,
        num_epochs=20,
        total_timesteps=150_000,
        gae_lambda=0.8,
        gamma=0.98,
        ent_coef=0.0,
        learning_rate=1e-3,
    ),
    # 32x32 layers and GAE lambda 0.9: on 60 seeds, the slowest of 5 seeds reached the
    # "solved" rule (last 100 training episodes >= -250) after 124k steps on average,
    # against 191k with 64x64 layers and lambda 0.95, at 0.6x the cost per step.
    "Pendulum-v1": dict(
        num_envs=16,
        num_steps=64,
        total_timesteps=300_000,
        num_epochs=10,
        num_minibatches=8,
        hidden_sizes=(32, 32),
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.9,
        ent_coef=0.0,
        normalize_observations=True,
        scale_rewards=True,
        clip_value_loss=False,
        log_std_init=-0.5,
    ),
    # Observation normalisation (velocity is ~100x smaller than position), 16 envs x 16
    # steps, GAE lambda 0.98 and no entropy bonus, as rl-baselines3-zoo's PPO for this
    # task: found by a sweep from there, and beside the defaults and gymnax-blines' own
    # settings in benchmarks/RESULTS.md's learning table.
    "MountainCar-v0": dict(
        num_envs=16,
        num_steps=16,
        total_timesteps=1_000_000,
        gae_lambda=0.98,
        ent_coef=0.0,
        normalize_observations=True,
    ),
    # rl-baselines3-zoo's PPO for MountainCarContinuous-v0 (hyperparams/ppo.yml: gSDE drawn
    # at each 8-step rollout, one env, observation and reward normalisation, gamma 0.9999,
    # 10 epochs of one minibatch, its learning rate, entropy, clip, GAE, gradient-norm and
    # value coefficients), with the learning rate annealed and 300k steps instead of 20k:
    # benchmarks/investigations/gsde.md and the learning table in benchmarks/RESULTS.md.
    "MountainCarContinuous-v0": dict(
        sde=GSDE(sample_freq=8, log_std_init=-3.29),
        normalize_observations=True,
        scale_rewards=True,
        num_envs=1,
        num_steps=8,
        num_minibatches=1,
        num_epochs=10,
        total_timesteps=300_000,
        gamma=0.9999,
        learning_rate=7.77e-5,
        ent_coef=0.00429,
        clip_eps=0.1,
        gae_lambda=0.9,
        max_grad_norm=5.0,
        vf_coef=0.19,
        clip_value_loss=False,
    ),
    # Memory: a GRU over 16-step sequences; 16 envs and a larger learning rate than
    # CartPole's defaults (notebooks/memory.ipynb, which the suite holds to its result, and
    # benchmarks/RESULTS.md).
    "MaskedCartPole-v1": dict(
        num_envs=16,
        num_steps=64,
        num_minibatches=8,
        learning_rate=1e-3,
        hidden_sizes=(64,),
        memory="gru",
        memory_size=64,
        sequence_length=16,
    ),
}


def init(key: jax.Array, config: Config) -> State:
    """Network, optimiser and ``num_envs`` freshly reset envs."""
    return onpolicy.init(key, config, updates_per_iteration=config.num_epochs * config.num_minibatches)


# ----------------------------------------------------------------------------- learning


def minibatch_policy_and_value(params: dict, batch: dict, config: Config):
    """The policy and values of ``params`` on a minibatch's observations, shaped like
    its rows: ``[B]`` (feed-forward), or ``[B, L]`` for sequences re-run from the
    ``carry`` stored at their first step (leaves ``[B, ...]``), the memory reset where
    ``reset [B, L]`` marks an episode's start."""
    return onpolicy.data_path(config).minibatch_policy_and_value(params, batch, config)


def loss_fn(network_params, obs_stats, batch: dict, config: Config):
    """PPO loss on a minibatch of :func:`minibatch_rows` rows; returns ``(loss, metrics)``.
    Rows marked ``valid = False`` (an env's padding steps) are left out of every mean."""
    params = {"network": network_params, "obs_stats": obs_stats}
    distribution, value = minibatch_policy_and_value(params, batch, config)
    log_prob = distribution.log_prob(batch["action"])
    log_ratio = log_prob - batch["log_prob"]
    ratio = jnp.exp(log_ratio)
    advantage, valid = batch["advantage"], batch.get("valid")
    if config.normalize_advantages:
        mean = masked_mean(advantage, valid)
        advantage = (advantage - mean) / (jnp.sqrt(masked_mean(jnp.square(advantage - mean), valid)) + 1e-8)
    clipped_ratio = jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps)
    policy_loss = -masked_mean(jnp.minimum(ratio * advantage, clipped_ratio * advantage), valid)

    value_error = jnp.square(value - batch["target"])
    if config.clip_value_loss:
        clipped_value = batch["value"] + jnp.clip(value - batch["value"], -config.clip_eps, config.clip_eps)
        value_error = jnp.maximum(value_error, jnp.square(clipped_value - batch["target"]))
    value_loss = 0.5 * masked_mean(value_error, valid)

    entropy = masked_mean(distribution.entropy(), valid)
    loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": masked_mean((ratio - 1.0) - log_ratio, valid),
        "clip_fraction": masked_mean(jnp.abs(ratio - 1.0) > config.clip_eps, valid),
    }
    return loss, metrics


def compute_targets(params: dict, trajectory: Trajectory, config: Config):
    """GAE advantages and value targets ``[T, N]``, bootstrapping from ``next_obs``."""
    value_next = onpolicy.bootstrap_value(params, trajectory, config)
    advantage = returns.gae(
        trajectory.reward,
        trajectory.extras["value"],
        value_next,
        trajectory.terminated,
        trajectory.truncated,
        config.gamma,
        config.gae_lambda,
    )
    return advantage, advantage + trajectory.extras["value"]


def minibatch_rows(batch: dict, trajectory: Trajectory, config: Config) -> dict:
    """The rollout's ``[T, N, ...]`` arrays as the rows minibatches are drawn from:
    every transition ``[T * N, ...]`` (feed-forward), or every chunk of
    ``config.chunk_length`` steps of one env ``[C, L, ...]`` (recurrent), with the
    ``carry`` stored at its first step and ``reset [C, L]``."""
    return onpolicy.data_path(config).minibatch_rows(batch, trajectory, config.chunk_length)


def gae_targets(params: dict, trajectory: Trajectory, config: Config) -> dict:
    """PPO's per-step learning targets ``[T, N]``: GAE ``advantage`` and value ``target``
    (:func:`compute_targets`), and the ``value`` a clipped value loss stays near (the
    behaviour policy's)."""
    advantage, target = compute_targets(params, trajectory, config)
    return {"advantage": advantage, "target": target, "value": trajectory.extras["value"]}


def minibatch_update(targets: Callable) -> Callable:
    """PPO's update with the per-step ``advantage``, ``target`` and ``value`` that
    ``targets(params, trajectory, config)`` gives (:func:`gae_targets`; APPO's V-trace)."""

    def update(state: State, trajectory: Trajectory, key: jax.Array, config: Config):
        """``num_epochs`` passes of clipped-surrogate minibatch updates on one trajectory
        ``[T, N]``, the ratio taken against the behaviour policy's ``log_prob`` (in the
        trajectory's ``extras``). Returns ``(state, metrics)`` with metrics averaged over
        all minibatches."""
        return _minibatch_epochs(state, trajectory, targets(state.params, trajectory, config), key, config)

    return update


def _minibatch_epochs(state: State, trajectory: Trajectory, targets: dict, key: jax.Array, config: Config):
    batch = {
        "obs": trajectory.obs,
        "action": trajectory.action,
        "log_prob": trajectory.extras["log_prob"],
        **targets,
    }
    if trajectory.valid is not None:
        batch["valid"] = trajectory.valid
    batch = minibatch_rows(batch, trajectory, config)
    optimizer = onpolicy.make_optimizer(config, config.num_epochs * config.num_minibatches)
    obs_stats = state.params["obs_stats"]

    def minibatch_step(carry, minibatch):
        network_params, opt_state = carry
        network_params, opt_state, _, metrics = optim.step(
            optimizer, loss_fn, network_params, opt_state, obs_stats, minibatch, config
        )
        return (network_params, opt_state), metrics

    def epoch(carry, epoch_key):
        minibatches = onpolicy.shuffled_minibatches(epoch_key, batch, config.num_minibatches)
        return jax.lax.scan(minibatch_step, carry, minibatches)

    (network_params, opt_state), metrics = jax.lax.scan(
        epoch, (state.params["network"], state.opt_state), jax.random.split(key, config.num_epochs)
    )
    metrics = jax.tree.map(jnp.mean, metrics)
    metrics["learning_rate"] = onpolicy.current_learning_rate(opt_state)
    state = state.replace(params={**state.params, "network": network_params}, opt_state=opt_state)
    return state, metrics


update = minibatch_update(gae_targets)

algorithm = onpolicy.Learner(init, update).algorithm(
    "ppo",
    Config,
    PRESETS,
    summary="Proximal Policy Optimization: clipped surrogate, GAE, minibatch epochs; discrete, continuous, memory",
)
__getattr__ = algorithm.module_getattr(__name__)  # ppo.step, ppo.train, ppo.preset: the record's


def policy_and_value(params: dict, obs, config: Config, carry=(), reset=None):
    """Deprecated: :func:`jaxrl.algorithms.onpolicy.policy_and_value`, the family's."""
    warnings.warn(
        "ppo.policy_and_value is jaxrl.algorithms.onpolicy.policy_and_value", DeprecationWarning, stacklevel=2
    )
    return onpolicy.policy_and_value(params, obs, config, carry, reset)
