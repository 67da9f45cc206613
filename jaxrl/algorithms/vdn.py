"""Value decomposition networks (VDN; Sunehag et al., 2018, arXiv:1706.05296): the team's
action value is the sum of the agents' own, ``Q_tot(o, u) = sum_a Q_a(o_a, u_a)``,
trained end to end on the team's reward, while each agent acts greedily on its own
``Q_a``.

It is :mod:`jaxrl.algorithms.dqn` with ``multi_agent=True`` and ``mixer="vdn"``, not a
copy: every function is DQN's. The agents are a batch axis
(:class:`jaxrl.envs.multiagent.AgentBatch`) and share one Q-network told each agent's
one-hot id. Replay stores each agent's transitions as its own lane (``num_envs * A``
lanes: ``buffer_size`` counts agent-transitions); a batch samples ``batch_size`` lanes
and takes every agent's lane of the same env step (:func:`jaxrl.algorithms.offpolicy.sample` with
``team``), and the loss is the Huber (or squared) error of ``Q_tot`` against ``sum_a
(r_a^(n) / A + gamma^m (1 - terminated_a) Q_target,a(o'_a, a*_a))``
(:func:`jaxrl.algorithms.dqn.vdn_values`: the team's reward is the agents' mean).
``double``, ``dueling``, ``n_step``, ``prioritized`` (every agent's lane of a sampled
step gets the team's TD error) and ``noisy`` apply; ``distributional`` does not::

    config = vdn.Config()  # MultiAgentClimbing-v0
    out = jax.jit(vdn.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import iql
from jaxrl.config import static


@struct.dataclass
class Config(iql.Config):
    """IQL's Config (its climbing-game defaults) with ``mixer="vdn"`` (see
    :class:`jaxrl.algorithms.dqn.Config`); ``batch_size`` counts env steps, each with every
    agent's transition."""

    mixer: str = static("vdn")


PRESETS = iql.PRESETS


algorithm = iql.algorithm.variant(
    "vdn", Config, PRESETS, summary="VDN: DQN trained through the sum of the agents' Q-values"
)
__getattr__ = algorithm.module_getattr(__name__)  # vdn.train, vdn.preset: the record's
