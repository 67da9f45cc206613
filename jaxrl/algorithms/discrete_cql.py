"""Conservative Q-learning for discrete actions (Kumar, Zhou, Tucker & Levine, 2020,
arXiv:2006.04779, section 4 and its Atari experiments): double DQN learned from a
dataset, its TD loss plus CQL(H)'s term in closed form::

    cql_alpha * mean_s [ logsumexp_a Q(s, a) - Q(s, a_data) ]

(:func:`cql_penalty`), which lowers the values of every action in proportion to its
softmax weight and raises the dataset's, so the greedy policy stays on actions the data
supports. Where observations carry an action mask (``obs["action_mask"]``), masked
actions are left out of the logsumexp and never picked.

The Q-network, the double-DQN target (the online network picks the next action, the
target network values it), the Huber TD loss and the optimiser (Adam with the gradient's
global norm clipped at 10) are DQN's own code (:mod:`jaxrl.algorithms.dqn`) with a plain
(not dueling) :class:`jaxrl.networks.QNetwork`, run on :mod:`jaxrl.algorithms.offline`'s
data path. The target network follows by Polyak averaging at ``tau`` after every update
(no periodic copies). For continuous actions see :mod:`jaxrl.algorithms.cql`. ::

    dataset = data.load("cartpole.npz", env_id="CartPole-v1")
    config = discrete_cql.Config(env_id="CartPole-v1")
    out = jax.jit(discrete_cql.train)(jax.random.key(0), config, dataset)
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import data, envs
from jaxrl.algorithms import dqn, offline, requirements
from jaxrl.config import require_range, static
from jaxrl.distributions import mask_actions


@struct.dataclass
class Config(offline.Config):
    """Discrete CQL settings: :class:`jaxrl.algorithms.offline.Config`'s (with a
    Discrete action space) and the conservative term's weight."""

    ALGORITHM = "discrete CQL"

    env_id: str = static("CartPole-v1")
    cql_alpha: float = 1.0  # weight of the conservative term (d3rlpy's DiscreteCQL default)

    def check_actions(self) -> envs.EnvSpec:
        """The env's spec; ValueError unless its actions are Discrete."""
        spec = envs.config_spec(self)
        requirements.refuse_multi_discrete(spec, self.env_id, "discrete_cql")
        if not spec.discrete:
            raise ValueError(
                f"discrete CQL needs a Discrete action space; env_id {self.env_id!r} has a continuous (Box) "
                f"action space of shape {spec.action_shape} (use cql)"
            )
        return spec

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "cql_alpha", 0.0, float("inf"))


PRESETS = {
    # Measured on a 20,000-transition CartPole-v1 mixture (tests/offline_datasets.py):
    # longer runs drift below their peak (benchmarks/RESULTS.md's offline learning table).
    "CartPole-v1": dict(hidden_sizes=(64, 64), batch_size=128, learning_rate=1e-3, num_updates=2_500),
}


@struct.dataclass
class State:
    params: dict  # {"network": flax params, "obs_stats": the dataset's}: all ``act`` needs
    target_params: Any  # the target network's flax params
    opt_state: Any
    dataset: data.Dataset  # the [S, ...] transitions batches are drawn from
    updates: jax.Array  # int32 updates so far


def online_config(config: Config, **fields) -> dqn.Config:
    """The :class:`jaxrl.algorithms.dqn.Config` whose functions this module calls: these
    networks and numbers (:func:`jaxrl.algorithms.offline.online_config`), one-step double
    Q-learning without dueling or prioritized replay, the target moving by ``tau`` after
    every update; then ``fields``."""
    losses = dict(double=True, dueling=False, n_step=1, prioritized=None, target_update_period=1)
    return offline.online_config(config, dqn.Config, **{**losses, **fields})


# ----------------------------------------------------------------------------- set-up


def init(key: jax.Array, config: Config, dataset: data.Dataset) -> State:
    """The Q-network, its target (a copy), the optimiser, and the dataset with its
    observation statistics."""
    config.check_traced()
    offline.check_dataset(config, dataset)
    online = online_config(config)
    network_params = dqn.init_network(online, key, envs.config_spec(config).zeros((1,)))
    return State(
        params=offline.with_obs_stats({"network": network_params}, dataset, config),
        target_params=network_params,
        opt_state=dqn.make_optimizer(online).init(network_params),
        dataset=dataset,
        updates=jnp.zeros((), jnp.int32),
    )


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B], carry)``: the greedy action at raw observations ``obs [B, ...]``,
    never a masked one. Nothing is explored offline, so ``key`` and ``deterministic``
    change nothing; ``carry`` is ``()``."""
    del deterministic
    return dqn.act(params, obs, carry, key, online_config(config), deterministic=True)


# ----------------------------------------------------------------------------- learning


def cql_penalty(q: jax.Array, action: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """CQL(H)'s term for discrete actions: ``mean_b [logsumexp_a q_ba - q_b,action_b]``.

    Args:
      q: ``[B, A]`` the values of every action.
      action: ``[B]`` int, the dataset's actions.
      mask: ``[B, A]`` bool, the allowed actions (None: all); masked ones are left out
        of the logsumexp.
    Returns a scalar."""
    chex.assert_rank([q, action], [2, 1])
    taken = jnp.take_along_axis(q, action[:, None], axis=-1)[:, 0]
    if mask is not None:
        q = mask_actions(q, mask)
    return jnp.mean(jax.nn.logsumexp(q, axis=-1) - taken)


def loss_fn(network_params, target_params, batch: dict, key: jax.Array, online: dqn.Config, cql_alpha):
    """DQN's TD loss (:func:`jaxrl.algorithms.dqn.loss_fn`) plus ``cql_alpha`` times
    :func:`cql_penalty` at the batch's ``obs``. Returns ``(loss, (metrics,
    priority_error))`` as DQN's, the metrics with ``td_loss`` and ``cql_gap``."""
    td_loss, (metrics, priority_error) = dqn.loss_fn(network_params, target_params, batch, key, online)
    q = dqn.network_out(dqn.make_network(online), network_params, batch["obs"], None)
    mask = batch["obs"][envs.ACTION_MASK] if dqn.env_spec(online).action_mask else None
    gap = cql_penalty(q, batch["action"], mask)
    loss = td_loss + cql_alpha * gap
    return loss, ({**metrics, "loss": loss, "td_loss": td_loss, "cql_gap": gap}, priority_error)


def learn(state: State, batch: dict, key: jax.Array, index, config: Config):
    """One gradient step of :func:`loss_fn` and the target's Polyak step
    (:func:`jaxrl.algorithms.dqn.optimize`). ``index`` is unused."""
    del index
    objective = functools.partial(loss_fn, cql_alpha=config.cql_alpha)
    state, metrics, _ = dqn.optimize(state, batch, key, online_config(config), objective)
    return state, metrics


algorithm = offline.algorithm(
    "discrete_cql",
    Config,
    init,
    act,
    learn,
    PRESETS,
    "Conservative Q-learning for discrete actions: offline double DQN with CQL(H)'s logsumexp term",
)
__getattr__ = algorithm.module_getattr(__name__)  # discrete_cql.train, discrete_cql.preset: the record's
