"""What an algorithm requires of its env, checked at config time with errors that name
the env and the algorithms that do take it."""

from __future__ import annotations

from jaxrl.envs import EnvSpec, config_spec


def require_transitions_only(config, algorithm: str) -> None:
    """ValueError if the config's env pads its episodes with steps that are not
    transitions (:attr:`EnvSpec.padding_steps`): for the algorithms that cannot leave
    them out of their losses yet."""
    if config_spec(config).padding_steps:
        raise ValueError(
            f"{algorithm} cannot train on {config.env_id}: the env inserts steps that are not transitions "
            "(info['valid'] False, e.g. envpool's reset step), which it cannot leave out; ppo, a2c, reinforce, "
            "impala, dqn, sac, ddpg and td3 can, without memory"
        )


#: The algorithms whose policies take MultiDiscrete actions (a factored categorical).
MULTI_DISCRETE_ALGORITHMS = ("ppo", "a2c", "reinforce", "impala")


def refuse_multi_discrete(spec: EnvSpec, env_id: str, algorithm: str) -> None:
    """ValueError if ``spec``'s actions are MultiDiscrete: for the algorithms not in
    :data:`MULTI_DISCRETE_ALGORITHMS`, called at config time."""
    if spec.multi_discrete:
        raise ValueError(
            f"{algorithm} does not take MultiDiscrete actions; env_id {env_id!r} has the action space "
            f"MultiDiscrete({list(spec.action_nvec)}) (Gymnasium's MultiDiscrete and MultiBinary map onto it). "
            f"{', '.join(MULTI_DISCRETE_ALGORITHMS)} take them"
        )
