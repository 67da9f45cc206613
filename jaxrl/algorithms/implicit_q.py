"""Implicit Q-Learning (Kostrikov, Nair & Levine, 2021, "Offline Reinforcement Learning
with Implicit Q-Learning", arXiv:2110.06169): offline RL that never evaluates an action
outside the dataset.

A state-value network ``V(s)`` learns an upper expectile of the target critics' values
of the dataset's actions (:func:`value_loss`: expectile regression, ``expectile`` > 0.5
leans toward the best actions the data show at ``s``); twin critics ``Q_i(s, a)`` regress
onto ``r + gamma (1 - terminated) V(s')`` (:func:`critic_target`), so the bootstrap reads
``V`` and no policy action; the actor is extracted by advantage-weighted regression
(:func:`actor_loss`): the log-likelihood of the dataset's actions, each weighted by
``min(exp(beta * (min_i Q'_i(s, a) - V(s))), max_weight)`` (:func:`advantage_weights`).
One update, in the reference implementation's order: ``V``, then the actor (with the new
``V``), then the critics (with the new ``V``), then the Polyak update of the target
critics.

The actor and the critics are SAC's (:func:`jaxrl.algorithms.sac.make_actor`: a
tanh-squashed Gaussian over unit actions; :func:`~jaxrl.algorithms.sac.make_critic`),
built from the SAC Config of the same networks and numbers (:func:`online_config`), so
the learned state continues online as SAC (:func:`finetune_program`; ``V`` is dropped
there). Data path, observation statistics and run: :mod:`jaxrl.algorithms.offline`'s. ::

    dataset = data.load("pendulum.npz", env_id="Pendulum-v1")
    config = implicit_q.Config(env_id="Pendulum-v1")
    out = jax.jit(implicit_q.train)(jax.random.key(0), config, dataset)

    online = implicit_q.online_config(config, total_timesteps=20_000, learning_starts=0)
    run = implicit_q.finetune_program(online, keep_dataset=True)
    tuned = jax.jit(offline.finetune, static_argnums=0)(run, key, out.state)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import data, envs, loop, networks, optim
from jaxrl.algorithms import actor_critic, offline, offpolicy, sac
from jaxrl.config import require_range, static

# Dataset actions enter the tanh-Gaussian's log-density clipped into [-1 + eps, 1 - eps]
# (unit form), where arctanh is finite: the reference implementation's clip of D4RL's actions.
ACTION_EPS = 1e-5


@struct.dataclass
class Config(offline.Config):
    """Implicit Q-Learning settings: :class:`jaxrl.algorithms.offline.Config`'s and these
    (the paper's defaults for the D4RL locomotion tasks; its AntMaze runs use
    ``expectile=0.9``, ``beta=10``)."""

    ALGORITHM = "Implicit Q-Learning"

    expectile: float = 0.7  # V(s) fits this expectile of Q'(s, a) over the dataset's actions, in (0, 1)
    beta: float = 3.0  # inverse temperature of the advantage weights (0: behaviour cloning)
    max_weight: float = 100.0  # the advantage weights' ceiling
    actor_cosine_decay: bool = static(False)  # the actor's learning rate falls to 0 along a cosine over num_updates

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "expectile", 0.0, 1.0, low_open=True, high_open=True)
        require_range(self, "beta", 0.0, float("inf"))
        require_range(self, "max_weight", 0.0, float("inf"), low_open=True)


PRESETS = {
    # Measured on a 20,000-transition Pendulum-v1 mixture (tests/offline_datasets.py):
    # it peaks after a few thousand updates and drifts after, so the run stops there
    # (benchmarks/RESULTS.md's offline learning table).
    "Pendulum-v1": dict(hidden_sizes=(64, 64), learning_rate=1e-3, num_updates=3_000),
}


@struct.dataclass
class State:
    params: dict  # {"actor": flax params, "obs_stats": the dataset's}: all ``act`` needs
    critic_params: Any  # the twin critics' flax params (leading [2] axis)
    value_params: Any  # V(s)'s flax params
    target_params: dict  # {"critic": ...}
    opt_state: dict  # {"actor": ..., "critic": ..., "value": ...}
    dataset: data.Dataset  # the [S, ...] transitions batches are drawn from
    updates: jax.Array  # int32 updates so far


def online_config(config: Config, **fields) -> sac.Config:
    """The :class:`jaxrl.algorithms.sac.Config` of these networks and numbers
    (:func:`jaxrl.algorithms.offline.online_config`), then ``fields``: the online run's
    settings for :func:`finetune_program` (``total_timesteps``, ``learning_starts``, ...)."""
    return offline.online_config(config, sac.Config, **fields)


def make_value(config: Config) -> networks.StateValue:
    """``V(s)``: the config's torso on the observation, then a linear output ``[B]``."""
    spec = envs.config_spec(config)
    network = networks.resolve_torso(config.network, spec)
    return networks.StateValue(config.hidden_sizes, config.activation, spec.obs_ndim, network)


# ----------------------------------------------------------------------------- set-up


def init(key: jax.Array, config: Config, dataset: data.Dataset) -> State:
    """Actor, twin critics and their targets (copies), ``V``, optimisers, and the dataset
    with its observation statistics."""
    config.check_traced()
    offline.check_dataset(config, dataset)
    online = online_config(config)
    nets = offline.init_networks(
        key,
        config,
        {
            "actor": (sac.make_actor(online), False),
            "critic": (sac.make_critic(online), True),
            "value": (make_value(config), False),
        },
    )
    optimizer = actor_critic.make_optimizer(online)
    return State(
        params=offline.with_obs_stats({"actor": nets["actor"]}, dataset, config),
        critic_params=nets["critic"],
        value_params=nets["value"],
        target_params={"critic": nets["critic"]},
        opt_state={name: optimizer.init(params) for name, params in nets.items()},
        dataset=dataset,
        updates=jnp.zeros((), jnp.int32),
    )


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)`` at raw observations ``obs [B, ...]``, within
    the bounds: a sample of the tanh-Gaussian policy, or with ``deterministic`` its mode
    (:func:`jaxrl.algorithms.sac.act`); ``carry`` is ``()``."""
    return sac.act(params, obs, carry, key, online_config(config), deterministic)


# ----------------------------------------------------------------------------- losses


def expectile_loss(diff: jax.Array, expectile) -> jax.Array:
    """The asymmetric squared loss of expectile regression, elementwise:
    ``|expectile - 1(diff < 0)| * diff^2``.

    Args:
      diff: ``target - prediction``, any shape (``Q'(s, a) - V(s)`` for :func:`value_loss`).
      expectile: ``tau`` in ``(0, 1)`` (a scalar): 0.5 is half the squared error, so its
        minimiser is the mean; above 0.5 errors where the target lies above the
        prediction cost more, pushing the prediction toward the targets' upper range.
    Returns the loss, shaped as ``diff``."""
    weight = jnp.where(diff < 0, 1.0 - expectile, expectile)
    return weight * jnp.square(diff)


def advantage_weights(advantage: jax.Array, beta, max_weight) -> jax.Array:
    """Advantage-weighted regression's weights, elementwise: ``min(exp(beta * advantage),
    max_weight)``.

    Args:
      advantage: ``min_i Q'_i(s, a) - V(s)``, any shape.
      beta: the inverse temperature (scalar, >= 0): 0 weighs every action alike
        (behaviour cloning), larger values favour the best actions more sharply.
      max_weight: the ceiling (scalar > 0), which also keeps ``exp`` from overflowing
        into the loss.
    Returns the weights, shaped as ``advantage``, without gradient."""
    return jax.lax.stop_gradient(jnp.minimum(jnp.exp(beta * advantage), max_weight))


def dataset_action_values(critic_params, batch: dict, config: Config) -> jax.Array:
    """``min_i Q_i(s, a)`` ``[B]`` of the batch's observations and (stored, env-unit)
    actions under ``critic_params`` (the target critics' in the losses)."""
    online = online_config(config)
    q = sac.q_values(critic_params, batch["obs"], actor_critic.unit_action(batch["action"], online), online)
    return jnp.min(q, axis=0)


def state_values(value_params, obs, config: Config) -> jax.Array:
    """``V(s)`` ``[B]`` at observations ``obs [B, ...]`` (as the networks read them)."""
    return make_value(config).apply(value_params, obs)


def value_loss(value_params, q: jax.Array, batch: dict, config: Config):
    """Expectile regression of ``V(s)`` toward ``q [B]`` (:func:`dataset_action_values`
    of the target critics): ``mean expectile_loss(q - V(s), expectile)`` over the batch.
    Returns ``(loss, mean V(s))``."""
    v = state_values(value_params, batch["obs"], config)
    return jnp.mean(expectile_loss(jax.lax.stop_gradient(q) - v, config.expectile)), jnp.mean(v)


def critic_target(value_params, batch: dict, config: Config) -> jax.Array:
    """The critics' targets ``[B]``: ``reward + discount * (1 - terminated) * V(s')``,
    bootstrapped through truncation, stopped at termination."""
    return actor_critic.td_target(batch, state_values(value_params, batch["next_obs"], config))


def critic_loss(critic_params, target: jax.Array, batch: dict, config: Config):
    """Squared error of both critics' values of the dataset's actions against ``target
    [B]``, averaged over the batch and summed over the critics (SAC's,
    :func:`jaxrl.algorithms.sac.critic_loss`). Returns ``(loss, q_mean)``."""
    return sac.critic_loss(critic_params, target, batch, online_config(config))


def actor_loss(actor_params, weights: jax.Array, batch: dict, config: Config):
    """Advantage-weighted regression: ``-mean(weights * log pi(a|s))`` over the batch's
    observations and actions, ``weights [B]`` (:func:`advantage_weights`), ``pi`` the
    tanh-Gaussian over unit actions and ``a`` the stored action in unit form clipped
    into ``[-1 + ACTION_EPS, 1 - ACTION_EPS]``. Returns ``(loss, mean log pi(a|s))``."""
    online = online_config(config)
    dist = sac.policy_distribution(actor_params, batch["obs"], online)
    unit = jnp.clip(actor_critic.unit_action(batch["action"], online), -1.0 + ACTION_EPS, 1.0 - ACTION_EPS)
    log_prob = dist.log_prob(unit)
    return -jnp.mean(weights * log_prob), jnp.mean(log_prob)


# ----------------------------------------------------------------------------- learning


def actor_learning_rate(opt_state, updates: jax.Array, config: Config):
    """The actor's optimiser state ``opt_state`` with the learning rate of update
    ``updates`` (counted from 0): ``learning_rate``, or with ``actor_cosine_decay``
    ``learning_rate * (1 + cos(pi * updates / num_updates)) / 2``."""
    if not config.actor_cosine_decay:
        return opt_state
    fraction = jnp.minimum(updates.astype(jnp.float32) / config.num_updates, 1.0)
    rate = config.learning_rate * 0.5 * (1.0 + jnp.cos(jnp.pi * fraction))
    return opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": jnp.asarray(rate, jnp.float32)})


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """One update on ``batch`` (:func:`jaxrl.algorithms.offline.batch`'s): ``V``
    (:func:`value_loss`), then the actor (:func:`actor_loss`, weights from the new
    ``V``), then the critics (:func:`critic_loss`, targets from the new ``V``), then the
    target critics (Polyak, ``tau``). Every loss is deterministic, so ``key`` and
    ``index`` change nothing. Returns ``(state, metrics)``."""
    del key, index
    optimizer = actor_critic.make_optimizer(online_config(config))
    q = dataset_action_values(state.target_params["critic"], batch, config)
    value_params, value_opt, v_loss, v_mean = optim.step(
        optimizer, value_loss, state.value_params, state.opt_state["value"], q, batch, config
    )
    advantage = q - state_values(value_params, batch["obs"], config)
    weights = advantage_weights(advantage, config.beta, config.max_weight)
    actor_opt = actor_learning_rate(state.opt_state["actor"], state.updates, config)
    actor_params, actor_opt, a_loss, log_prob = optim.step(
        optimizer, actor_loss, state.params["actor"], actor_opt, weights, batch, config
    )
    target = critic_target(value_params, batch, config)
    critic_params, critic_opt, c_loss, q_mean = optim.step(
        optimizer, critic_loss, state.critic_params, state.opt_state["critic"], target, batch, config
    )
    state = state.replace(
        params={**state.params, "actor": actor_params},
        critic_params=critic_params,
        value_params=value_params,
        target_params={"critic": offpolicy.polyak(state.target_params["critic"], critic_params, config.tau)},
        opt_state={"actor": actor_opt, "critic": critic_opt, "value": value_opt},
        updates=state.updates + 1,
    )
    metrics = {
        "value_loss": v_loss,
        "critic_loss": c_loss,
        "actor_loss": a_loss,
        "q_mean": q_mean,
        "v_mean": v_mean,
        "advantage_mean": jnp.mean(advantage),
        "weight_mean": jnp.mean(weights),
        "log_prob": log_prob,
    }
    return state, metrics


# ----------------------------------------------------------------------------- offline to online


def hand_over(online_state: sac.State, state: State, keep_dataset: bool = True) -> sac.State:
    """``online_state`` (SAC's, freshly initialised) with this state's actor, critics,
    target critics, their optimiser moments and the observation statistics, and with
    ``keep_dataset`` the dataset in its replay (:func:`jaxrl.algorithms.offline.hand_over`).
    ``V`` has no place in SAC and stays behind; SAC's temperature starts at its ``alpha``."""
    return offline.hand_over(online_state, state, keep_dataset)


def finetune_program(online: sac.Config, keep_dataset: bool = True) -> loop.Program:
    """SAC's run of ``online`` (:func:`online_config`) started from an Implicit
    Q-Learning state: run it with ``jaxrl.algorithms.offline.finetune(program, key,
    state)``. ``online`` must keep the offline networks (:func:`online_config` does) and,
    to carry the dataset's observation statistics on, ``normalize_observations``."""
    return offline.finetune_program(sac.program(online), functools.partial(hand_over, keep_dataset=keep_dataset))


algorithm = offline.algorithm(
    "implicit_q",
    Config,
    init,
    act,
    learn,
    PRESETS,
    "Implicit Q-Learning: offline expectile values and advantage-weighted actor",
)
__getattr__ = algorithm.module_getattr(__name__)  # implicit_q.train, implicit_q.preset: the record's
