"""MAPPO: PPO for several agents with a centralised critic (Yu et al., 2022, arXiv:2103.01955).

It is :mod:`jaxrl.algorithms.ppo` with ``multi_agent=True`` and
``centralised_critic=True``, not a copy (:mod:`jaxrl.algorithms.ippo` without the
centralised critic): a multi-agent env (``jaxmarl:<id>``, ``MultiAgentClimbing-v0``)
is seen through :class:`jaxrl.envs.multiagent.AgentBatch`, so its agents are a batch
axis — rollouts are ``[T, N, A, ...]`` and one network call serves every agent. The
critic reads the env's global state and the agent's id (``info["global_state"]``,
bootstrapped at a time limit from the global state before the reset); the actor reads
only the agent's own observation. By default one network is shared by all agents and told
the agent's one-hot id; ``share_parameters=False`` gives each agent its own (the
parameters gain a leading ``[A]`` axis). Action masks (SMAX, Hanabi) and memory work
as in PPO, the critic's memory its own (``shared_memory=False``); agents that leave an
episode early (dead SMAX units) drop out of the loss. ::

    config = mappo.preset("jaxmarl:MPE_simple_spread_v3")
    out = jax.jit(mappo.train)(jax.random.key(0), config)
    out.metrics["episode_return"]   # the mean agent's return over finished episodes
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import ippo
from jaxrl.config import static


@struct.dataclass
class Config(ippo.Config):
    """IPPO's Config with a centralised critic (see :class:`jaxrl.algorithms.ppo.Config`);
    ``num_envs`` counts envs, each of ``A`` agents, and ``total_timesteps`` env steps."""

    centralised_critic: bool = static(True)
    shared_memory: bool = static(False)  # with memory: the critic's input differs from the actor's


PRESETS = ippo.PRESETS


algorithm = ippo.algorithm.variant("mappo", Config, PRESETS, summary="MAPPO: multi-agent PPO with a centralised critic")
__getattr__ = algorithm.module_getattr(__name__)  # mappo.train, mappo.preset: the record's
