"""Conservative Q-learning (Kumar, Zhou, Tucker & Levine, 2020, "Conservative Q-Learning
for Offline Reinforcement Learning", arXiv:2006.04779): SAC learned from a dataset, each
critic's regression plus a term that pushes its values down on actions the policy and a
uniform proposal pick and up on the dataset's actions, so the learned Q-function
lower-bounds the policy's value and the actor does not chase actions the data never
tried.

The term is CQL(H) with importance sampling (the paper's appendix F; CORL's and
JAX-CORL's implementations), for each critic ``i``::

    gap_i = mean_s [ T logsumexp_j (q_ij / T) - Q_i(s, a_data) ]

over ``3N`` proposals ``q_ij``: ``Q_i(s, a) - log(0.5^A)`` for ``N`` uniform unit
actions (the density of the uniform law on ``[-1, 1]^A``), ``Q_i(s, a) - log pi(a|s)``
for ``N`` actions of the policy at ``s`` and ``Q_i(s, a') - log pi(a'|s')`` for ``N`` of
the policy at ``s'`` (:func:`cql_penalty`), ``T`` the ``temperature``. The critics
minimise SAC's squared TD error plus ``cql_alpha * sum_i gap_i``; with ``lagrange`` the
weight is ``alpha' * cql_alpha``, ``alpha' = clip(exp(log_alpha'), 0, 1e6)`` learned by
gradient descent on ``-alpha' * cql_alpha * (mean_i gap_i - target_action_gap)``
(:func:`alpha_prime_loss`): it grows while the gap is above ``target_action_gap`` and
shrinks below it.

The networks, the soft target, the actor's and the temperature's losses are SAC's own
code (:mod:`jaxrl.algorithms.sac`) run on :mod:`jaxrl.algorithms.offline`'s data path;
``backup_entropy=False`` (CORL's default) leaves the entropy out of the target. The state
is SAC's networks and continues online as SAC (:func:`finetune_program`). For discrete
actions see :mod:`jaxrl.algorithms.discrete_cql`. ::

    dataset = data.load("pendulum.npz", env_id="Pendulum-v1")
    config = cql.Config(env_id="Pendulum-v1")
    out = jax.jit(cql.train)(jax.random.key(0), config, dataset)

    online = cql.online_config(config, total_timesteps=20_000, learning_starts=0)
    run = cql.finetune_program(online, keep_dataset=True)
    tuned = jax.jit(offline.finetune, static_argnums=0)(run, key, out.state)
"""

from __future__ import annotations

import functools
import math
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import data, loop, optim
from jaxrl.algorithms import actor_critic, offline, offpolicy, sac
from jaxrl.config import require_int, require_range, static

ALPHA_PRIME_MAX = 1e6  # CORL's clip of alpha'
LOG_ALPHA_PRIME_INIT = 1.0  # log alpha' at the start, as CORL and JAX-CORL


@struct.dataclass
class Config(offline.Config):
    """CQL settings: :class:`jaxrl.algorithms.offline.Config`'s, SAC's temperature
    (``autotune``, ``alpha``, ``target_entropy``, as in :class:`jaxrl.algorithms.sac.Config`)
    and the conservative term's. The defaults are CORL's / JAX-CORL's, but for one learning
    rate for every network."""

    ALGORITHM = "CQL"

    autotune: bool = static(True)  # learn alpha; False keeps it at ``alpha``
    num_sampled_actions: int = static(10)  # N: uniform, current-policy and next-policy proposals each
    lagrange: bool = static(False)  # learn the weight alpha' toward target_action_gap
    backup_entropy: bool = static(False)  # the soft target subtracts alpha log pi(a'|s') (SAC's); CORL's: no
    alpha: float = 1.0  # SAC's temperature, or its initial value with autotune (CORL: log alpha = 0)
    target_entropy: Any = None  # None: -|A|
    cql_alpha: float = 5.0  # weight of the conservative term (times alpha' with lagrange)
    target_action_gap: float = 1.0  # with lagrange: the gap alpha' holds the critics to (JAX-CORL's)
    temperature: float = 1.0  # T of the logsumexp

    def __post_init__(self):
        super().__post_init__()
        require_int(self, "num_sampled_actions", 1)

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "alpha", 0.0, float("inf"), low_open=True)
        require_range(self, "cql_alpha", 0.0, float("inf"))
        require_range(self, "temperature", 0.0, float("inf"), low_open=True)
        require_range(self, "target_action_gap", -float("inf"), float("inf"))
        if self.target_entropy is not None:
            require_range(self, "target_entropy", -float("inf"), float("inf"))


PRESETS = {
    # Measured on a 20,000-transition Pendulum-v1 mixture (tests/offline_datasets.py): the
    # paper's 10 proposals per state and batch 256 cost 10x more on a CPU for no gain
    # there (benchmarks/RESULTS.md's offline learning table).
    "Pendulum-v1": dict(
        hidden_sizes=(64, 64), batch_size=128, num_sampled_actions=2, learning_rate=1e-3, num_updates=3_000
    ),
}


@struct.dataclass
class State:
    params: dict  # {"actor": flax params, "obs_stats": the dataset's}: all ``act`` needs
    critic_params: Any  # the twin critics' flax params (leading [2] axis)
    target_params: dict  # {"critic": ...}
    log_alpha: jax.Array  # float32 scalar: log of SAC's temperature
    log_alpha_prime: jax.Array  # float32 scalar: log of the conservative weight's factor (moves with lagrange)
    opt_state: dict  # {"actor": ..., "critic": ..., "alpha": ..., "alpha_prime": ...}
    dataset: data.Dataset  # the [S, ...] transitions batches are drawn from
    updates: jax.Array  # int32 updates so far


def online_config(config: Config, **fields) -> sac.Config:
    """The :class:`jaxrl.algorithms.sac.Config` of these networks and numbers
    (:func:`jaxrl.algorithms.offline.online_config`) with this config's temperature, then
    ``fields``: the online run's settings for :func:`finetune_program`."""
    losses = dict(autotune=config.autotune, alpha=config.alpha, target_entropy=config.target_entropy)
    return offline.online_config(config, sac.Config, **{**losses, **fields})


# ----------------------------------------------------------------------------- set-up


def init(key: jax.Array, config: Config, dataset: data.Dataset) -> State:
    """Actor, twin critics, their targets (copies), the temperature, ``log alpha' = 1``,
    optimisers, and the dataset with its observation statistics."""
    config.check_traced()
    offline.check_dataset(config, dataset)
    online = online_config(config)
    nets = offline.init_networks(
        key, config, {"actor": (sac.make_actor(online), False), "critic": (sac.make_critic(online), True)}
    )
    log_alpha = jnp.log(jnp.asarray(config.alpha, jnp.float32))
    log_alpha_prime = jnp.asarray(LOG_ALPHA_PRIME_INIT, jnp.float32)
    optimizer = actor_critic.make_optimizer(online)
    trained = {"actor": nets["actor"], "critic": nets["critic"], "alpha": log_alpha, "alpha_prime": log_alpha_prime}
    return State(
        params=offline.with_obs_stats({"actor": nets["actor"]}, dataset, config),
        critic_params=nets["critic"],
        target_params={"critic": nets["critic"]},
        log_alpha=log_alpha,
        log_alpha_prime=log_alpha_prime,
        opt_state={name: optimizer.init(params) for name, params in trained.items()},
        dataset=dataset,
        updates=jnp.zeros((), jnp.int32),
    )


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """SAC's :func:`jaxrl.algorithms.sac.act`: ``(action [B, *action_shape], carry)`` at
    raw observations ``obs [B, ...]``, sampled from the policy or, ``deterministic``, its
    mode; ``carry`` is ``()``."""
    return sac.act(params, obs, carry, key, online_config(config), deterministic)


# ----------------------------------------------------------------------------- the conservative term


def cql_penalty(
    q_data: jax.Array,
    q_random: jax.Array,
    q_current: jax.Array,
    q_next: jax.Array,
    log_prob_current: jax.Array,
    log_prob_next: jax.Array,
    action_dim: int,
    temperature: float | jax.Array = 1.0,
) -> jax.Array:
    """CQL(H)'s gap per critic, importance-sampled (Kumar et al., 2020, appendix F).

    Args:
      q_data: ``[C, B]`` each critic's value of the dataset's action.
      q_random: ``[C, B, N]`` values of ``N`` actions uniform on ``[-1, 1]^A`` at ``s``.
      q_current: ``[C, B, N]`` values of ``N`` actions of the policy at ``s``.
      q_next: ``[C, B, N]`` values at ``s`` of ``N`` actions of the policy at ``s'``.
      log_prob_current: ``[B, N]`` their log-densities under the policy at ``s``.
      log_prob_next: ``[B, N]`` those of the actions at ``s'``, under the policy at ``s'``.
      action_dim: ``A``, for the uniform proposal's log-density ``log(0.5^A)``.
      temperature: ``T`` of the logsumexp.

    Returns ``[C]``: ``mean_b [T logsumexp_j (q_bj / T) - q_data_b]`` over the ``3N``
    proposals ``q_random - log(0.5^A)``, ``q_current - log_prob_current``, ``q_next -
    log_prob_next``."""
    chex.assert_rank([q_data, q_random, q_current, q_next, log_prob_current, log_prob_next], [2, 3, 3, 3, 2, 2])
    chex.assert_equal_shape([q_random, q_current, q_next])
    chex.assert_equal_shape([log_prob_current, log_prob_next, q_random[0]])
    random_log_density = action_dim * math.log(0.5)
    proposals = jnp.concatenate(
        [q_random - random_log_density, q_current - log_prob_current, q_next - log_prob_next], axis=-1
    )
    soft_max = temperature * jax.nn.logsumexp(proposals / temperature, axis=-1)  # [C, B]
    return jnp.mean(soft_max - q_data, axis=-1)


def penalty_weight(log_alpha_prime: jax.Array, config: Config) -> jax.Array:
    """The conservative term's weight: ``cql_alpha``, with ``lagrange`` times ``alpha' =
    clip(exp(log_alpha'), 0, 1e6)`` (CORL's)."""
    if not config.lagrange:
        return jnp.asarray(config.cql_alpha, jnp.float32)
    return jnp.clip(jnp.exp(log_alpha_prime), 0.0, ALPHA_PRIME_MAX) * config.cql_alpha


def alpha_prime_loss(log_alpha_prime: jax.Array, gap: jax.Array, config: Config) -> jax.Array:
    """The Lagrangian's loss in ``log alpha'`` (CORL's): ``-alpha' * cql_alpha * (mean_i
    gap_i - target_action_gap)`` with ``gap [C]`` (:func:`cql_penalty`) held constant,
    so descent raises ``alpha'`` while the gap is above ``target_action_gap``."""
    alpha_prime = jnp.clip(jnp.exp(log_alpha_prime), 0.0, ALPHA_PRIME_MAX)
    return -alpha_prime * config.cql_alpha * (jnp.mean(jax.lax.stop_gradient(gap)) - config.target_action_gap)


def policy_samples(actor_params, obs, key: jax.Array, num: int, online: sac.Config):
    """``(actions [B, N, A], log_probs [B, N])``: ``num`` unit actions of the policy at
    each of ``obs [B, ...]`` and their log-densities, with no gradient."""
    dist = sac.policy_distribution(actor_params, obs, online)
    actions, log_probs = jax.vmap(dist.sample_and_log_prob)(jax.random.split(key, num))  # [N, B, A], [N, B]
    return jax.lax.stop_gradient((jnp.swapaxes(actions, 0, 1), jnp.swapaxes(log_probs, 0, 1)))


def proposals(actor_params, batch: dict, key: jax.Array, config: Config, online: sac.Config) -> dict:
    """The actions the conservative term evaluates at the batch's ``obs``: ``actions [B,
    3N, A]`` (``N`` uniform unit actions, ``N`` of the policy at ``obs``, ``N`` at
    ``next_obs``) and the log-densities ``log_prob_current`` / ``log_prob_next [B, N]``."""
    random_key, current_key, next_key = jax.random.split(key, 3)
    num = config.num_sampled_actions
    current, log_prob_current = policy_samples(actor_params, batch["obs"], current_key, num, online)
    following, log_prob_next = policy_samples(actor_params, batch["next_obs"], next_key, num, online)
    uniform = jax.random.uniform(random_key, current.shape, jnp.float32, -1.0, 1.0)
    return {
        "actions": jnp.concatenate([uniform, current, following], axis=1),
        "log_prob_current": log_prob_current,
        "log_prob_next": log_prob_next,
    }


def sampled_q_values(critic_params, obs, actions: jax.Array, online: sac.Config) -> jax.Array:
    """Both critics' values ``[2, B, M]`` of ``actions [B, M, A]`` at ``obs [B, ...]`` (one
    critic call on the ``B * M`` pairs)."""
    batch, num = actions.shape[:2]
    repeated = jax.tree.map(lambda x: jnp.repeat(x, num, axis=0), obs)
    q = sac.q_values(critic_params, repeated, actions.reshape(batch * num, -1), online)
    return q.reshape(q.shape[0], batch, num)


def critic_loss(critic_params, target: jax.Array, batch: dict, online: sac.Config, samples: dict, weight, config):
    """SAC's critic loss (:func:`jaxrl.algorithms.sac.critic_loss`) plus ``weight * sum_i
    gap_i`` (:func:`cql_penalty` on the ``samples`` of :func:`proposals`). Returns
    ``(loss, (q_mean, gap [C]))``."""
    td_loss, q_mean = sac.critic_loss(critic_params, target, batch, online)
    q_data = sac.q_values(critic_params, batch["obs"], actor_critic.unit_action(batch["action"], online), online)
    q_random, q_current, q_next = jnp.split(
        sampled_q_values(critic_params, batch["obs"], samples["actions"], online), 3, -1
    )
    gap = cql_penalty(
        q_data,
        q_random,
        q_current,
        q_next,
        samples["log_prob_current"],
        samples["log_prob_next"],
        samples["actions"].shape[-1],
        config.temperature,
    )
    return td_loss + weight * jnp.sum(gap), (q_mean, gap)


# ----------------------------------------------------------------------------- learning


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """One step of the critics on SAC's loss and the conservative term, then the actor
    (against the updated critics, :func:`jaxrl.algorithms.sac.actor_loss`), the
    temperature (with ``autotune``), ``alpha'`` (with ``lagrange``, on the gap before
    the critics' step) and the Polyak update of the target critics. ``index`` is unused
    (every update alike)."""
    del index
    online = online_config(config)
    target_key, proposal_key, actor_key = jax.random.split(key, 3)
    optimizer = actor_critic.make_optimizer(online)
    alpha = jnp.exp(state.log_alpha)
    backup_alpha = alpha if config.backup_entropy else jnp.zeros_like(alpha)
    actor_params = state.params["actor"]
    target = sac.critic_target(actor_params, state.target_params["critic"], backup_alpha, batch, target_key, online)
    samples = proposals(actor_params, batch, proposal_key, config, online)
    weight = jax.lax.stop_gradient(penalty_weight(state.log_alpha_prime, config))
    loss = functools.partial(critic_loss, samples=samples, weight=weight, config=config)
    critic_params, critic_opt, c_loss, (q_mean, gap) = actor_critic.critic_step(state, loss, target, batch, online)
    actor_params, actor_opt, a_loss, entropy = optim.step(
        optimizer,
        sac.actor_loss,
        actor_params,
        state.opt_state["actor"],
        critic_params,
        alpha,
        batch,
        actor_key,
        online,
    )

    log_alpha, alpha_opt, t_loss = optim.step_if(
        config.autotune, optimizer, sac.alpha_loss, state.log_alpha, state.opt_state["alpha"], entropy, online
    )
    log_alpha_prime, alpha_prime_opt, p_loss = optim.step_if(
        config.lagrange, optimizer, alpha_prime_loss, state.log_alpha_prime, state.opt_state["alpha_prime"], gap, config
    )

    state = state.replace(
        params={**state.params, "actor": actor_params},
        critic_params=critic_params,
        target_params={"critic": offpolicy.polyak(state.target_params["critic"], critic_params, config.tau)},
        log_alpha=log_alpha,
        log_alpha_prime=log_alpha_prime,
        opt_state={"actor": actor_opt, "critic": critic_opt, "alpha": alpha_opt, "alpha_prime": alpha_prime_opt},
        updates=state.updates + 1,
    )
    metrics = {
        "critic_loss": c_loss,
        "actor_loss": a_loss,
        "alpha_loss": t_loss,
        "q_mean": q_mean,
        "alpha": alpha,
        "entropy": entropy,
        "cql_gap": jnp.mean(gap),
        "cql_weight": weight,
        "alpha_prime_loss": p_loss if config.lagrange else jnp.zeros((), jnp.float32),
    }
    return state, metrics


# ----------------------------------------------------------------------------- offline to online


def hand_over(online_state: sac.State, state: State, keep_dataset: bool = True) -> sac.State:
    """``online_state`` (SAC's, freshly initialised) with this state's actor, critics,
    target critics, temperature, optimiser moments and observation statistics, and with
    ``keep_dataset`` the dataset in its replay (:func:`jaxrl.algorithms.offline.hand_over`).
    ``alpha'`` stays behind: online SAC has no conservative term."""
    return offline.hand_over(online_state, state, keep_dataset, log_alpha=state.log_alpha)


def finetune_program(online: sac.Config, keep_dataset: bool = True) -> loop.Program:
    """SAC's run of ``online`` (:func:`online_config`) started from a CQL state: run it
    with ``jaxrl.algorithms.offline.finetune(program, key, state)``. ``online`` must keep
    the offline networks (:func:`online_config` does) and, to carry the dataset's
    observation statistics on, ``normalize_observations``."""
    return offline.finetune_program(sac.program(online), functools.partial(hand_over, keep_dataset=keep_dataset))


algorithm = offline.algorithm(
    "cql",
    Config,
    init,
    act,
    learn,
    PRESETS,
    "Conservative Q-learning: offline SAC whose critics are pushed down off the data",
)
__getattr__ = algorithm.module_getattr(__name__)  # cql.train, cql.preset: the record's
