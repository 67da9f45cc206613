"""Independent Q-learning (IQL; Tan, 1993, with deep Q-networks as in Tampuu et al.,
2017): every agent of a multi-agent env learns its own action values from its own
reward, treating the other agents as part of the environment.

It is :mod:`jaxrl.algorithms.value_decomposition` with the
:class:`~jaxrl.algorithms.value_decomposition.Independent` mixer: the agents share one
Q-network told each agent's one-hot id, replay stores each agent's transitions as its
own lane (``buffer_size`` counts agent-transitions), and the loss is DQN's on
agent-transitions, so ``double``, ``dueling``, ``n_step``, ``prioritized``, every
``head`` (C51, QR-DQN and IQN included) and every ``exploration`` (noisy nets included) apply::

    config = iql.Config()  # MultiAgentClimbing-v0
    out = jax.jit(iql.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import value_decomposition


@struct.dataclass
class Config(value_decomposition.Config):
    """The multi-agent Q-learning Config (:class:`jaxrl.algorithms.value_decomposition.Config`:
    DQN's fields, the climbing game's defaults) with the ``Independent`` mixer."""

    mixer = value_decomposition.Independent()


algorithm = value_decomposition.algorithm_of("iql", Config, "Independent Q-learning: DQN on a multi-agent env's agents")
__getattr__ = algorithm.module_getattr(__name__)  # iql.train, iql.preset: the record's
