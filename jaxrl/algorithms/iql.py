"""Independent Q-learning (IQL; Tan, 1993, with deep Q-networks as in Tampuu et al.,
2017): every agent of a multi-agent env learns its own action values from its own
reward, treating the other agents as part of the environment.

It is :mod:`jaxrl.algorithms.dqn` with ``multi_agent=True`` (and ``mixer="none"``), not
a copy: every function is DQN's. The agents are a batch axis
(:class:`jaxrl.envs.multiagent.AgentBatch`) and share one Q-network told each agent's
one-hot id, so acting is one network call for all agents; replay stores each agent's
transitions as its own lane (``num_envs * A`` lanes: ``buffer_size`` counts
agent-transitions), and the loss is DQN's on agent-transitions, so ``double``,
``dueling``, ``n_step``, ``prioritized``, ``distributional`` and ``noisy`` all apply::

    config = iql.Config()  # MultiAgentClimbing-v0
    out = jax.jit(iql.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import dqn
from jaxrl.config import static


@struct.dataclass
class Config(dqn.Config):
    """DQN's Config with ``multi_agent=True`` and defaults for the climbing game (see
    :class:`jaxrl.algorithms.dqn.Config`): ``MultiAgentClimbing-v0`` in 100k env steps
    (``tests/test_marl_dqn.py``'s learning test)."""

    env_id: str = static("MultiAgentClimbing-v0")
    multi_agent: bool = static(True)
    mixer: str = static("none")
    num_steps: int = static(4)
    num_updates: int = static(2)
    batch_size: int = static(64)  # agent-transitions
    buffer_size: int = static(20_000)  # agent-transitions
    learning_starts: int = static(500)
    hidden_sizes: tuple = static((64,))
    target_update_period: int = static(50)
    exploration_fraction: float = 0.5


PRESETS = {"MultiAgentClimbing-v0": {}}


algorithm = dqn.algorithm.variant(
    "iql", Config, PRESETS, summary="Independent Q-learning: DQN on a multi-agent env's agents"
)
__getattr__ = algorithm.module_getattr(__name__)  # iql.train, iql.preset: the record's
