"""Value decomposition networks (VDN; Sunehag et al., 2018, arXiv:1706.05296): the team's
action value is the sum of the agents' own, ``Q_tot(o, u) = sum_a Q_a(o_a, u_a)``,
trained end to end on the team's reward, while each agent acts greedily on its own
``Q_a``.

It is :mod:`jaxrl.algorithms.value_decomposition` with the
:class:`~jaxrl.algorithms.value_decomposition.Sum` mixer: the agents share one
Q-network told each agent's one-hot id; replay stores each agent's transitions as its
own lane (``buffer_size`` counts agent-transitions); a batch samples ``batch_size``
lanes and takes every agent's lane of the same env step, and the loss is the Huber (or
squared) error of ``Q_tot`` against ``sum_a (r_a^(n) / A + gamma^m (1 - terminated_a)
Q_target,a(o'_a, a*_a))`` (:func:`jaxrl.algorithms.value_decomposition.vdn_values`:
the team's reward is the agents' mean). ``double``, ``dueling``, ``n_step``,
``prioritized`` (every agent's lane of a sampled step gets the team's TD error) and
every ``exploration`` apply; the ``head`` is the scalar one::

    config = vdn.Config()  # MultiAgentClimbing-v0
    out = jax.jit(vdn.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import value_decomposition


@struct.dataclass
class Config(value_decomposition.Config):
    """The multi-agent Q-learning Config (:class:`jaxrl.algorithms.value_decomposition.Config`:
    DQN's fields, the climbing game's defaults) with the ``Sum`` mixer; ``batch_size``
    counts env steps, each with every agent's transition."""

    mixer = value_decomposition.Sum()


algorithm = value_decomposition.algorithm_of("vdn", Config, "VDN: DQN trained through the sum of the agents' Q-values")
__getattr__ = algorithm.module_getattr(__name__)  # vdn.train, vdn.preset: the record's
