"""How a policy explores, as config parts (:func:`jaxrl.config.part`): a Config field holds
one of them, its class the choice and its numbers the settings.

For value-based agents, the probability of a random action per env lane:
:class:`EpsilonGreedy` (a linear schedule) and :class:`ApeXEpsilons` (Ape-X's fixed
per-actor values); :class:`NoisyNets` explores through the network's noise instead. All
three say how the Q-network is built (:meth:`NoisyNets.network_settings`) and draw its
noise (:meth:`NoisyNets.draw`: None for random actions), so a learner never asks which.
For deterministic continuous actors, noise added to the action: :class:`Gaussian` and
:class:`OrnsteinUhlenbeck`, whose state is carried between steps. For Gaussian policies,
:class:`GSDE`, state-dependent noise from a matrix drawn per episode, or without it
:class:`PolicySampling`, a fresh sample of the policy at every step
(:func:`policy_exploration` picks one from a Config's ``sde``).

Each part's traced numbers are pytree leaves of the Config (sweepable); its static ones
fix the program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl import networks
from jaxrl.config import part, require_int, require_range, static
from jaxrl.distributions import StateDependentNoise, sde_initial_carry, sde_next_matrix

# ----------------------------------------------------------------------------- random actions


class RandomActions:
    """What the parts that explore by random actions share: a network without noise."""

    def network_settings(self) -> dict:
        """The Q-network's noise settings (:class:`jaxrl.networks.QNetwork`'s): none."""
        return {}

    def draw(self, key: jax.Array, network, shape: tuple = ()):
        """No network noise: None, or ``shape[0]`` Nones where several draws are asked for."""
        return (None,) * shape[0] if shape else None


@part
class EpsilonGreedy(RandomActions):
    """A uniformly random action with probability epsilon, annealed linearly from
    ``start`` to ``end`` over the first ``fraction`` of the run's env steps, then held."""

    start: float = 1.0
    end: float = 0.05
    fraction: float = 0.2  # of the run's env steps to anneal over

    def check_traced(self) -> None:
        require_range(self, "start", 0.0, 1.0)
        require_range(self, "end", 0.0, 1.0)
        require_range(self, "fraction", 0.0, 1.0, low_open=True)

    def epsilons(self, timesteps: jax.Array, total_timesteps: int, num_envs: int) -> jax.Array:
        """Each env lane's epsilon ``[num_envs]`` after ``timesteps`` env steps."""
        progress = jnp.clip(timesteps / (self.fraction * total_timesteps), 0.0, 1.0)
        return jnp.full((num_envs,), self.start + progress * (self.end - self.start), jnp.float32)


@part
class ApeXEpsilons(RandomActions):
    """Ape-X's actors (Horgan et al., 2018, arXiv:1803.00933): env lane ``i`` of ``N``
    keeps the fixed epsilon ``epsilon ** (1 + alpha * i / (N - 1))`` for the whole run."""

    epsilon: float = 0.4
    alpha: float = 7.0

    def check_traced(self) -> None:
        require_range(self, "epsilon", 0.0, 1.0)
        require_range(self, "alpha", 0.0, float("inf"))

    def epsilons(self, timesteps: jax.Array, total_timesteps: int, num_envs: int) -> jax.Array:
        """Each env lane's epsilon ``[num_envs]`` (``timesteps`` does not matter)."""
        lane = jnp.arange(num_envs) / max(num_envs - 1, 1)
        return (self.epsilon ** (1.0 + self.alpha * lane)).astype(jnp.float32)


@part
class NoisyNets:
    """Noisy nets (Fortunato et al., 2018, arXiv:1706.10295): the value network's dense
    layers are noisy (factorised Gaussian noise, initial scale ``sigma / sqrt(fan_in)``),
    fresh noise at every action and in every loss, and no random actions."""

    sigma: float = static(0.5)

    def __post_init__(self):
        require_range(self, "sigma", 0.0, float("inf"), low_open=True)

    def epsilons(self, timesteps: jax.Array, total_timesteps: int, num_envs: int) -> jax.Array:
        """Zeros ``[num_envs]``: the noise explores."""
        return jnp.zeros((num_envs,), jnp.float32)

    def network_settings(self) -> dict:
        """The Q-network's noise settings (:class:`jaxrl.networks.QNetwork`'s): noisy head layers of ``sigma``."""
        return {"noisy": True, "noisy_sigma": self.sigma}

    def draw(self, key: jax.Array, network, shape: tuple = ()) -> jax.Array:
        """Standard normal draws ``[*shape, noise_size]`` for ``network`` (a noisy
        :class:`jaxrl.networks.QNetwork`): ``prod(shape)`` noise samples in one RNG call."""
        return jax.random.normal(key, shape + (network.noise_size(),))


# ----------------------------------------------------------------------------- action noise


@part
class Gaussian:
    """Independent Gaussian noise of standard deviation ``std`` on every action entry, in
    units of half the action range (actions scaled to ``[-1, 1]``)."""

    std: float = 0.1

    def check_traced(self) -> None:
        require_range(self, "std", 0.0, float("inf"))

    def initial_carry(self, batch_size: int, action_dim: int):
        """No state: ``()``."""
        return ()

    def perturb(self, unit_action: jax.Array, carry, key: jax.Array):
        """``(unit_action + noise, carry)``, unclipped."""
        return unit_action + self.std * jax.random.normal(key, unit_action.shape), carry


@part
class OrnsteinUhlenbeck:
    """Ornstein-Uhlenbeck noise (Uhlenbeck & Ornstein, 1930), as DDPG explores
    (Lillicrap et al., 2016): ``x <- x - theta * x * dt + sigma * sqrt(dt) * eps`` per
    step, ``eps ~ N(0, 1)``, its state kept in the policy's carry and reset at episode
    ends. Its steps are correlated over about ``1 / (theta * dt)`` steps, so actions push
    one way long enough to explore (MountainCarContinuous)."""

    sigma: float = 0.1  # in units of half the action range
    theta: float = 0.15  # the pull toward 0 per unit of time
    dt: float = 0.01  # the time one env step takes

    def check_traced(self) -> None:
        require_range(self, "sigma", 0.0, float("inf"))
        require_range(self, "theta", 0.0, float("inf"), low_open=True)
        require_range(self, "dt", 0.0, float("inf"), low_open=True)

    def initial_carry(self, batch_size: int, action_dim: int) -> jax.Array:
        """The noise before an episode: zeros ``[batch_size, action_dim]``."""
        return jnp.zeros((batch_size, action_dim), jnp.float32)

    def step(self, noise: jax.Array, key: jax.Array) -> jax.Array:
        """One Euler step of the process from ``noise [B, d]``."""
        eps = jax.random.normal(key, noise.shape)
        return noise - self.theta * noise * self.dt + self.sigma * jnp.sqrt(self.dt) * eps

    def perturb(self, unit_action: jax.Array, noise: jax.Array, key: jax.Array):
        """``(unit_action + noise', noise')`` with ``noise'`` the process's next step."""
        noise = self.step(noise, key)
        return unit_action + noise, noise


# ----------------------------------------------------------------------------- Gaussian policies


@part
class GSDE:
    """Generalized state-dependent exploration (gSDE; Raffin, Kober & Stulp, 2021,
    arXiv:2005.05719) for a Gaussian policy: the noise is ``z(s) @ theta``, the actor's
    last features times a matrix ``theta`` drawn at each episode's first step and, with
    ``sample_freq > 0``, every ``sample_freq`` steps (kept in the policy's carry), and the
    Gaussian's scale follows from a learned ``[features, actions]`` log-std, initialised
    at ``log_std_init`` (:class:`jaxrl.distributions.StateDependentNoise`)."""

    sample_freq: int = static(0)  # steps between draws of theta; 0: once per episode
    log_std_init: float = -2.0  # Stable-Baselines3's default

    state_dependent_std = True  # jaxrl.networks.ActorCritic's: the scale from the features and a learned log-std
    actor_kind = "state_dependent"  # jaxrl.networks.Actor's: (loc, features, log-std)

    def __post_init__(self):
        require_int(self, "sample_freq", 0)

    def check_traced(self) -> None:
        require_range(self, "log_std_init", -float("inf"), float("inf"))

    def initial_carry(self, batch_size: int, num_features: int, action_dim: int) -> dict:
        """The matrices' state before an episode (:func:`jaxrl.distributions.sde_initial_carry`)."""
        return sde_initial_carry(batch_size, num_features, action_dim)

    def next_matrix(self, carry: dict, key: jax.Array):
        """``(unit matrix [B, F, A], carry)`` for this step (:func:`jaxrl.distributions.sde_next_matrix`)."""
        return sde_next_matrix(carry, key, self.sample_freq)

    def initial_params(self, params) -> dict:
        """The network's parameters ``params`` with the learned log-std at ``log_std_init``
        (:func:`jaxrl.networks.fill_param`: it may be traced)."""
        return networks.fill_param(params, networks.SDE_LOG_STD, self.log_std_init)

    def distribution(self, out, family: type):
        """``(family(loc, scale), noise)`` from the actor's output ``out = (loc [..., A],
        features [..., F], log_std [F, A])``: ``family`` (:class:`jaxrl.distributions.Normal`
        or ``TanhNormal``) with the state-dependent scale of ``noise``, the
        :class:`jaxrl.distributions.StateDependentNoise` that acting adds."""
        loc, features, log_std = out
        noise = StateDependentNoise(features, log_std)
        return family(loc, noise.scale()), noise

    def first_step(self, noise: StateDependentNoise) -> StateDependentNoise:
        """The noise of a sequence of one step (features ``[1, ..., F]``) at that step."""
        return noise.replace(features=noise.features[0])

    def act(self, distribution, noise: StateDependentNoise, carry: dict, key: jax.Array, deterministic: bool = False):
        """``(action, carry)``: the distribution's mode if ``deterministic`` (``carry``
        unchanged), else its action at the noise ``z(s) @ theta`` of this step's matrix
        (:meth:`next_matrix`; ``distribution.at_noise``), and the matrices' state after it."""
        if deterministic:
            return distribution.mode(), carry
        matrix, carry = self.next_matrix(carry, key)
        return distribution.at_noise(noise.noise(matrix)), carry

    def join(self, memory, carry: dict) -> dict:
        """A policy's carry holding its ``memory`` and the matrices' state ``carry``:
        ``{"memory": memory, "sde": carry}``."""
        return {"memory": memory, "sde": carry}

    def split(self, policy_carry: dict):
        """``(memory, matrices' state)`` of a carry made by :meth:`join`."""
        return policy_carry["memory"], policy_carry["sde"]


class PolicySampling:
    """How a policy explores without gSDE (a Config's ``sde=None``): a fresh sample of its
    distribution at every step, with no state. It has :class:`GSDE`'s methods, so that
    acting and building the policy are written once for both (:func:`policy_exploration`)."""

    state_dependent_std = False  # jaxrl.networks.ActorCritic's: a learned log-std per action
    actor_kind = "gaussian"  # jaxrl.networks.Actor's: (loc, log_std)

    def initial_carry(self, batch_size: int, num_features: int, action_dim: int):
        """No state: ``()``."""
        return ()

    def initial_params(self, params) -> dict:
        return params

    def distribution(self, out, family: type):
        """``(family(loc, exp(log_std)), None)`` from the actor's ``out = (loc [..., A],
        log_std)``, the scale broadcast to ``loc``'s shape."""
        loc, log_std = out
        return family(loc, jnp.broadcast_to(jnp.exp(log_std), loc.shape)), None

    def first_step(self, noise: None) -> None:
        return noise

    def act(self, distribution, noise: None, carry, key: jax.Array, deterministic: bool = False):
        """``(the distribution's mode if deterministic, else a sample; carry)``."""
        return (distribution.mode() if deterministic else distribution.sample(key)), carry

    def join(self, memory, carry):
        """A policy's carry: its ``memory`` alone."""
        return memory

    def split(self, policy_carry):
        return policy_carry, ()


def policy_exploration(sde: GSDE | None) -> GSDE | PolicySampling:
    """How a Gaussian policy explores: ``sde`` (:class:`GSDE`), or without it (None)
    :class:`PolicySampling`. The one place a Config's ``sde`` is asked about."""
    return PolicySampling() if sde is None else sde
