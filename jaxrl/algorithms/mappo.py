"""MAPPO: PPO for several agents with a centralised critic (Yu et al., 2022, arXiv:2103.01955).

It is :mod:`jaxrl.algorithms.ppo`'s functions with a multi-agent Config whose critic is
centralised (PPO's settings and :class:`jaxrl.algorithms.onpolicy.CentralisedCritic`),
not a copy (:mod:`jaxrl.algorithms.ippo` without the centralised critic): a multi-agent
env (``jaxmarl:<id>``, ``MultiAgentClimbing-v0``) is seen through
:class:`jaxrl.envs.multiagent.AgentBatch`, so its agents are a batch axis — rollouts
are ``[T, N, A, ...]`` and one network call serves every agent. The
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

from jaxrl.algorithms import ippo, onpolicy, ppo


@struct.dataclass
class Config(onpolicy.CentralisedCritic, ppo.Settings, onpolicy.Config):
    """PPO's settings (:class:`jaxrl.algorithms.ppo.Settings`) on a multi-agent env's
    agents with a centralised critic (:class:`jaxrl.algorithms.onpolicy.CentralisedCritic`:
    ``share_parameters``, and ``shared_memory`` False by default); ``num_envs`` counts
    envs, each of ``A`` agents, and ``total_timesteps`` env steps."""


PRESETS = ippo.PRESETS


algorithm = ppo.algorithm.variant("mappo", Config, PRESETS, summary="MAPPO: multi-agent PPO with a centralised critic")
__getattr__ = algorithm.module_getattr(__name__)  # mappo.train, mappo.preset: the record's
