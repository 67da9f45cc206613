"""TD3+BC (Fujimoto & Gu, 2021, "A Minimalist Approach to Offline Reinforcement
Learning", arXiv:2106.06860): TD3 learned from a dataset, its actor's objective plus a
behaviour-cloning term, observations standardised by the dataset's statistics.

The actor maximises ``lambda * Q_1(s, pi(s)) - (pi(s) - a)^2`` over the dataset's
``(s, a)``, with ``lambda = alpha / mean |Q_1(s, pi(s))|`` (the mean over the batch, no
gradient through it) so that ``alpha`` weighs the two terms whatever the scale of the
returns; actions are in unit form ``[-1, 1]`` (the env's Box bounds mapped there). The
critics, their targets (clipped double-Q, target smoothing) and the delayed actor are
TD3's own code (:mod:`jaxrl.algorithms.ddpg`) run on :mod:`jaxrl.algorithms.offline`'s
data path, so the state is TD3's networks and continues online as TD3
(:func:`finetune_program`). ::

    dataset = data.load("pendulum.npz", env_id="Pendulum-v1")
    config = td3_bc.Config(env_id="Pendulum-v1")
    out = jax.jit(td3_bc.train)(jax.random.key(0), config, dataset)

    online = td3_bc.online_config(config, total_timesteps=20_000, learning_starts=0)
    run = td3_bc.finetune_program(online, keep_dataset=True)
    tuned = jax.jit(offline.finetune, static_argnums=0)(run, key, out.state)
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import data, loop
from jaxrl.algorithms import actor_critic, ddpg, offline, offpolicy, td3
from jaxrl.config import require_int, require_range, static


@struct.dataclass
class Config(offline.Config):
    """TD3+BC settings: :class:`jaxrl.algorithms.offline.Config`'s and these (the
    paper's defaults)."""

    ALGORITHM = "TD3+BC"

    policy_delay: int = static(2)  # critic updates per actor / target update
    alpha: float = 2.5  # weight of the Q term against behaviour cloning
    target_noise: float = 0.2  # target smoothing std, in units of the half action range
    target_noise_clip: float = 0.5

    def __post_init__(self):
        super().__post_init__()
        require_int(self, "policy_delay", 1)

    def check_traced(self) -> None:
        super().check_traced()
        for field in ("alpha", "target_noise", "target_noise_clip"):
            require_range(self, field, 0.0, float("inf"))


PRESETS = {
    # Measured on a 20,000-transition Pendulum-v1 mixture (a SAC policy stopped at a third
    # of the expert's return, and random actions): notebooks/offline_to_online.ipynb and
    # benchmarks/RESULTS.md's offline learning table.
    "Pendulum-v1": dict(hidden_sizes=(64, 64), num_updates=10_000),
}


@struct.dataclass
class State:
    params: dict  # {"actor": flax params, "obs_stats": the dataset's}: all ``act`` needs
    critic_params: Any  # the twin critics' flax params (leading [2] axis)
    target_params: dict  # {"actor": ..., "critic": ...}
    opt_state: dict  # {"actor": ..., "critic": ...}
    dataset: data.Dataset  # the [S, ...] transitions batches are drawn from
    updates: jax.Array  # int32 critic updates so far


def online_config(config: Config, **fields) -> td3.Config:
    """The :class:`jaxrl.algorithms.td3.Config` of these networks and numbers
    (:func:`jaxrl.algorithms.offline.online_config`), then ``fields``: TD3's own losses
    while learning offline, the online run's settings for :func:`finetune_program`."""
    losses = dict(
        policy_delay=config.policy_delay,
        target_noise=config.target_noise,
        target_noise_clip=config.target_noise_clip,
        num_updates=config.policy_delay,
    )
    return offline.online_config(config, td3.Config, **{**losses, **fields})


# ----------------------------------------------------------------------------- set-up


def init(key: jax.Array, config: Config, dataset: data.Dataset) -> State:
    """Actor, twin critics, their targets (copies), optimisers, and the dataset with its
    observation statistics."""
    config.check_traced()
    offline.check_dataset(config, dataset)
    online = online_config(config)
    nets = offline.init_networks(
        key, config, {"actor": (ddpg.make_actor(online), False), "critic": (ddpg.make_critic(online), True)}
    )
    optimizer = actor_critic.make_optimizer(online)
    return State(
        params=offline.with_obs_stats({"actor": nets["actor"]}, dataset, config),
        critic_params=nets["critic"],
        target_params=nets,
        opt_state={name: optimizer.init(params) for name, params in nets.items()},
        dataset=dataset,
        updates=jnp.zeros((), jnp.int32),
    )


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B, *action_shape], carry)``: the actor's action at raw observations
    ``obs [B, ...]``, within the bounds. The policy is deterministic (offline, nothing
    is explored), so ``key`` and ``deterministic`` change nothing; ``carry`` is ``()``."""
    del key, deterministic
    online = online_config(config)
    unit = ddpg.policy(params["actor"], offpolicy.observe(params, obs, online), online)
    return actor_critic.env_action(unit, online), carry


# ----------------------------------------------------------------------------- learning


def actor_loss(actor_params, critic_params, batch: dict, config, alpha: jax.Array) -> jax.Array:
    """``-lambda * mean Q_1(s, pi(s)) + mean (pi(s) - a)^2`` over the batch, ``lambda =
    alpha / mean |Q_1(s, pi(s))|`` held constant, actions in unit form; ``config`` is
    the online TD3 Config (:func:`online_config`)."""
    unit = ddpg.policy(actor_params, batch["obs"], config)
    first = jax.tree.map(lambda p: p[:1], critic_params)
    q = ddpg.q_values(first, batch["obs"], unit, config, 1)[0]
    lmbda = alpha / jax.lax.stop_gradient(jnp.mean(jnp.abs(q)))
    behaviour = jnp.mean(jnp.square(unit - actor_critic.unit_action(batch["action"], config)))
    return -lmbda * jnp.mean(q) + behaviour


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """TD3's update (:func:`jaxrl.algorithms.ddpg.update`) with :func:`actor_loss`, the
    actor and the targets moving on every ``policy_delay``-th (``index``, an int32
    scalar: the scan's counter, so a real branch under vmap)."""
    objective = functools.partial(actor_loss, alpha=config.alpha)
    update_actor = (index + 1) % config.policy_delay == 0
    return ddpg.update(state, batch, key, online_config(config), update_actor, objective)


# ----------------------------------------------------------------------------- offline to online


def hand_over(online_state: ddpg.State, state: State, keep_dataset: bool = True) -> ddpg.State:
    """``online_state`` (TD3's, freshly initialised) with this state's actor, critics,
    targets, optimiser moments and observation statistics, and with ``keep_dataset`` the
    dataset in its replay (:func:`jaxrl.algorithms.offline.hand_over`)."""
    return offline.hand_over(online_state, state, keep_dataset)


def finetune_program(online: td3.Config, keep_dataset: bool = True) -> loop.Program:
    """TD3's run of ``online`` (:func:`online_config`) started from a TD3+BC state: run
    it with ``jaxrl.algorithms.offline.finetune(program, key, state)``. ``online`` must
    keep the offline networks (:func:`online_config` does) and, to carry the dataset's
    observation statistics on, ``normalize_observations``."""
    return offline.finetune_program(td3.program(online), functools.partial(hand_over, keep_dataset=keep_dataset))


algorithm = offline.algorithm(
    "td3_bc", Config, init, act, learn, PRESETS, "TD3+BC: offline TD3 with a behaviour-cloning term"
)
__getattr__ = algorithm.module_getattr(__name__)  # td3_bc.train, td3_bc.preset: the record's
