"""Flax linen networks: MLP and MinAtar CNN torsos, actor-critic heads."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "elu": nn.elu, "silu": nn.silu}


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def orthogonal(scale: float = np.sqrt(2.0)):
    return nn.initializers.orthogonal(scale)


class MLP(nn.Module):
    """Dense layers ``hidden_sizes`` with ``activation``; input ``[..., D]`` (trailing
    observation dims are flattened), output ``[..., hidden_sizes[-1]]``."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1  # number of trailing observation dims to flatten

    @nn.compact
    def __call__(self, x):
        x = x.reshape(x.shape[: x.ndim - self.obs_ndim] + (-1,)).astype(jnp.float32)
        act = activation_fn(self.activation)
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x))
        return x


class MinAtarCNN(nn.Module):
    """The MinAtar torso (Young & Tian, 2019): one 3x3 conv with 16 channels then dense
    layers. Input ``[..., 10, 10, C]``, output ``[..., hidden_sizes[-1]]``."""

    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    obs_ndim: int = 3

    @nn.compact
    def __call__(self, x):
        batch_shape = x.shape[:-3]
        x = x.reshape((-1,) + x.shape[-3:]).astype(jnp.float32)
        act = activation_fn(self.activation)
        x = act(nn.Conv(16, (3, 3), padding="VALID", kernel_init=orthogonal())(x))
        x = x.reshape(batch_shape + (-1,))
        return MLP(self.hidden_sizes, self.activation)(x)


def torso(kind: str, hidden_sizes, activation: str, obs_ndim: int) -> nn.Module:
    if kind == "mlp":
        return MLP(tuple(hidden_sizes), activation, obs_ndim)
    if kind == "cnn":
        if obs_ndim != 3:
            raise ValueError(f"network='cnn' needs image observations [H, W, C], got {obs_ndim} observation dims")
        return MinAtarCNN(tuple(hidden_sizes), activation)
    raise ValueError(f"network must be 'mlp' or 'cnn', got {kind!r}")


class ActorCritic(nn.Module):
    """Separate actor and critic torsos with a policy head and a scalar value head.

    Discrete: returns ``(logits [..., num_actions], value [...])``.
    Continuous: returns ``((mean [..., A], log_std [A]), value [...])`` with a
    state-independent learned ``log_std``.
    """

    action_dim: int
    discrete: bool
    network: str = "mlp"
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1
    log_std_init: float = 0.0

    def setup(self):
        self.actor_torso = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)
        self.critic_torso = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)
        self.policy_head = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))
        self.value_head = nn.Dense(1, kernel_init=orthogonal(1.0))
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (self.action_dim,))

    def __call__(self, obs):
        return self.policy(obs), self.value(obs)

    def policy(self, obs):
        out = self.policy_head(self.actor_torso(obs))
        return out if self.discrete else (out, self.log_std)

    def value(self, obs):
        return self.value_head(self.critic_torso(obs))[..., 0]
