"""IPPO: independent PPO for several agents (de Witt et al., 2020, arXiv:2011.09533).

It is :mod:`jaxrl.algorithms.ppo`'s functions with a multi-agent Config (PPO's
settings and :class:`jaxrl.algorithms.onpolicy.MultiAgent`), not a copy: a multi-agent
env (``jaxmarl:<id>``, ``MultiAgentClimbing-v0``) is seen through
:class:`jaxrl.envs.multiagent.AgentBatch`, so its agents are a batch axis — rollouts
are ``[T, N, A, ...]`` and one network call serves every agent. Each agent's critic
reads its own observation. By default one network is shared by all agents and told
the agent's one-hot id; ``share_parameters=False`` gives each agent its own (the
parameters gain a leading ``[A]`` axis). Action masks (SMAX, Hanabi) and memory work
as in PPO; agents that leave an episode early (dead SMAX units) drop out of the loss. ::

    config = ippo.preset("jaxmarl:MPE_simple_spread_v3")
    out = jax.jit(ippo.train)(jax.random.key(0), config)
    out.metrics["episode_return"]   # the mean agent's return over finished episodes
"""

from __future__ import annotations

from flax import struct

from jaxrl.algorithms import onpolicy, ppo


@struct.dataclass
class Config(onpolicy.MultiAgent, ppo.Settings, onpolicy.Config):
    """PPO's settings (:class:`jaxrl.algorithms.ppo.Settings`) on a multi-agent env's
    agents (:class:`jaxrl.algorithms.onpolicy.MultiAgent`: ``share_parameters``);
    ``num_envs`` counts envs, each of ``A`` agents, and ``total_timesteps`` env steps."""


PRESETS = {
    # 16 envs x 128 steps (PPO's other defaults): tests/test_marl_ppo.py's learning test and the benchmark.
    "jaxmarl:MPE_simple_spread_v3": dict(num_envs=16, num_steps=128, total_timesteps=1_000_000),
}


algorithm = ppo.algorithm.variant(
    "ippo", Config, PRESETS, summary="IPPO: independent PPO on a multi-agent env's agents"
)
__getattr__ = algorithm.module_getattr(__name__)  # ippo.train, ippo.preset: the record's
