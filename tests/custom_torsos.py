"""Users' own torsos for tests/test_custom_networks.py and the command line
(``--network custom_torsos:flat_residual``): plain flax modules written as a researcher
would, outside jaxrl."""

import flax.linen as nn
import jax.numpy as jnp

from jaxrl.networks import flatten_observation


class Residual(nn.Module):
    """A LayerNorm residual torso over an array observation ``[..., D]``."""

    width: int = 32
    blocks: int = 1

    @nn.compact
    def __call__(self, obs):
        x = nn.Dense(self.width)(obs.astype(jnp.float32))
        for _ in range(self.blocks):
            x = x + nn.Dense(self.width)(nn.relu(nn.LayerNorm()(x)))
        return nn.relu(nn.LayerNorm()(x))


class FlatResidual(nn.Module):
    """:class:`Residual` over any observation pytree, flattened by its layout (``obs_ndim``
    of the env's spec: what a factory reads)."""

    obs_ndim: int | tuple = 1
    width: int = 16

    @nn.compact
    def __call__(self, obs):
        return Residual(self.width)(flatten_observation(obs, self.obs_ndim))


def flat_residual(spec) -> FlatResidual:
    """A factory: called with the env's spec, it sizes the torso to the observation."""
    return FlatResidual(obs_ndim=spec.obs_ndim)


class Flattening(nn.Module):
    """Wrong: flattens the batch dims with the features, ``[N * D]``."""

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(4)(obs).reshape(-1)


class PixelsOnly(nn.Module):
    """Wrong for an array observation: reads a ``"pixels"`` leaf."""

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(4)(obs["pixels"])


class ListWidths(nn.Module):
    """Unhashable: a list field."""

    widths: list

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.widths[0])(obs)


# ----------------------------------------------------------------------------- whole networks


class ActorCriticNet(nn.Module):
    """A whole on-policy network: one shared residual torso, a policy and a value head,
    called as jaxrl.networks.ActorCritic is."""

    action_dim: int
    continuous: bool = False

    @nn.compact
    def __call__(self, obs, carry=(), reset=None, critic_obs=None):
        features = Residual(32)(obs)
        out = nn.Dense(self.action_dim)(features)
        value = nn.Dense(1)(features)[..., 0]
        if self.continuous:
            out = (out, self.param("log_std", nn.initializers.zeros, (self.action_dim,)))
        return out, value, carry


def actor_critic_net(spec) -> ActorCriticNet:
    if spec.continuous:
        return ActorCriticNet(spec.action_shape[0], continuous=True)
    return ActorCriticNet(spec.num_actions)


class QNet(nn.Module):
    """A whole Q-network ``(obs) -> q [..., A]``."""

    num_actions: int = 2

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.num_actions)(Residual(32)(obs))


class GaussianActor(nn.Module):
    """A whole SAC actor ``(obs) -> (loc, log_std)``."""

    action_dim: int = 1

    @nn.compact
    def __call__(self, obs):
        features = Residual(32)(obs)
        return nn.Dense(self.action_dim)(features), jnp.clip(nn.Dense(self.action_dim)(features), -5.0, 2.0)


class Critic(nn.Module):
    """A whole continuous critic ``(obs, action) -> q``."""

    @nn.compact
    def __call__(self, obs, action):
        return nn.Dense(1)(Residual(32)(jnp.concatenate([obs, action], axis=-1)))[..., 0]


class FlatQNet(nn.Module):
    """A whole Q-network over any observation pytree (``obs_ndim`` of the spec)."""

    obs_ndim: int | tuple = 1
    num_actions: int = 2

    @nn.compact
    def __call__(self, obs):
        return nn.Dense(self.num_actions)(FlatResidual(self.obs_ndim)(obs))


def flat_q_net(spec) -> FlatQNet:
    return FlatQNet(spec.obs_ndim, spec.num_actions)
