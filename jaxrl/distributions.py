"""Action distributions as small pytrees: ``sample``, ``log_prob``, ``entropy``, ``mode``.

Batch dims lead; continuous distributions are diagonal over the last (action) axis, and
:class:`MultiCategorical` factors over its choices, so ``log_prob`` and ``entropy`` sum
over that axis and return ``[...]``. :class:`StateDependentNoise` is generalized
state-dependent exploration (gSDE): the scale of a :class:`Normal` or
:class:`TanhNormal` and the noise matrices that explore with it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_LOG_2PI = math.log(2.0 * math.pi)


def mask_actions(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """``scores [..., K]`` (logits or Q-values) with the actions where ``mask [..., K]``
    is False at the lowest float: as logits, probability exactly 0 (and no NaN in
    entropies or gradients); never an argmax while any action is allowed."""
    return jnp.where(mask, scores, jnp.finfo(scores.dtype).min)


@struct.dataclass
class Categorical:
    """Categorical over the last axis of ``logits [..., K]``; samples are int32 ``[...]``."""

    logits: jax.Array

    def sample(self, key):
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, action):
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        # A one-hot product rather than a gather: its gradient is not a scatter, which
        # is slow on CPU.
        one_hot = jax.nn.one_hot(action, self.logits.shape[-1], dtype=log_p.dtype)
        return jnp.sum(jnp.where(one_hot > 0, log_p, 0.0), axis=-1)

    def entropy(self):
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        # Masked actions (logit -inf) contribute 0, not 0 * -inf = NaN.
        return -jnp.sum(jnp.where(log_p > -jnp.inf, jnp.exp(log_p) * log_p, 0.0), axis=-1)

    def mode(self):
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def probs(self):
        return jax.nn.softmax(self.logits, axis=-1)


@struct.dataclass
class MultiCategorical:
    """Independent categoricals over ``k`` choices (a MultiDiscrete action space), choice
    ``i`` with ``nvec[i]`` values.

    ``logits [..., sum(nvec)]`` hold the choices' logits one after another: choice ``i``'s
    are ``logits[..., sum(nvec[:i]) : sum(nvec[:i + 1])]``. Samples and modes are int32
    ``[..., k]``; ``log_prob`` and ``entropy`` sum over the choices and return ``[...]``.
    """

    logits: jax.Array
    nvec: tuple = struct.field(pytree_node=False)

    def _choices(self) -> Categorical:
        """One :class:`Categorical` over ``[..., k, max(nvec)]``: each choice's logits,
        padded with masked values so the choices share one array (one op each below)."""
        if self.logits.shape[-1] != sum(self.nvec):
            raise ValueError(f"logits [..., {sum(self.nvec)}] for nvec {list(self.nvec)}, got {self.logits.shape}")
        width, start, choices = max(self.nvec), 0, []
        for n in self.nvec:
            pad = [(0, 0)] * (self.logits.ndim - 1) + [(0, width - n)]
            choices.append(jnp.pad(self.logits[..., start : start + n], pad, constant_values=0.0))
            start += n
        valid = np.arange(width) < np.asarray(self.nvec)[:, None]  # [k, max(nvec)]
        return Categorical(mask_actions(jnp.stack(choices, axis=-2), valid))

    def sample(self, key):
        return self._choices().sample(key)

    def log_prob(self, action):
        return jnp.sum(self._choices().log_prob(action), axis=-1)

    def entropy(self):
        return jnp.sum(self._choices().entropy(), axis=-1)

    def mode(self):
        return self._choices().mode()


@struct.dataclass
class Normal:
    """Diagonal Gaussian with ``loc, scale [..., A]``."""

    loc: jax.Array
    scale: jax.Array

    def sample(self, key):
        return self.loc + self.scale * jax.random.normal(key, self.loc.shape, self.loc.dtype)

    def log_prob(self, action):
        z = (action - self.loc) / self.scale
        return jnp.sum(-0.5 * z**2 - jnp.log(self.scale) - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self):
        return jnp.sum(0.5 + 0.5 * _LOG_2PI + jnp.log(self.scale) * jnp.ones_like(self.loc), axis=-1)

    def mode(self):
        return self.loc

    def at_noise(self, noise: jax.Array) -> jax.Array:
        """The action ``loc + noise`` for a given displacement ``noise [..., A]`` (gSDE's
        ``z(s) @ theta``, :meth:`StateDependentNoise.noise`)."""
        return self.loc + noise


def _log_one_minus_tanh_sq(x):
    """``log(1 - tanh(x)^2)``, computed stably as ``2 (log 2 - x - softplus(-2x))``."""
    return 2.0 * (math.log(2.0) - x - jax.nn.softplus(-2.0 * x))


@struct.dataclass
class TanhNormal:
    """``tanh(u)`` with ``u ~ Normal(loc, scale)``: actions in ``(-1, 1)^A``.

    ``log_prob(a) = log N(u) - sum log(1 - tanh(u)^2)``. Use
    :meth:`sample_and_log_prob` when sampling so the log-prob is computed from the
    pre-squash value ``u`` (inverting ``tanh`` near +-1 loses precision).
    """

    loc: jax.Array
    scale: jax.Array

    def _base(self):
        return Normal(self.loc, self.scale)

    def sample_and_log_prob(self, key):
        u = self._base().sample(key)
        return jnp.tanh(u), self._base().log_prob(u) - jnp.sum(_log_one_minus_tanh_sq(u), axis=-1)

    def sample(self, key):
        return jnp.tanh(self._base().sample(key))

    def log_prob(self, action, eps: float = 1e-6):
        u = jnp.arctanh(jnp.clip(action, -1.0 + eps, 1.0 - eps))
        return self._base().log_prob(u) - jnp.sum(_log_one_minus_tanh_sq(u), axis=-1)

    def entropy(self, key, num_samples: int = 1):
        """No closed form: a Monte-Carlo estimate ``-E[log p(a)]``."""
        keys = jax.random.split(key, num_samples)
        _, log_p = jax.vmap(self.sample_and_log_prob)(keys)
        return -jnp.mean(log_p, axis=0)

    def mode(self):
        return jnp.tanh(self.loc)

    def at_noise(self, noise: jax.Array) -> jax.Array:
        """The action ``tanh(loc + noise)`` for a given displacement ``noise [..., A]``
        before the squash (gSDE's ``z(s) @ theta``, :meth:`StateDependentNoise.noise`)."""
        return jnp.tanh(self.loc + noise)


@struct.dataclass
class StateDependentNoise:
    """Generalized state-dependent exploration (gSDE; Raffin, Kober & Stulp, 2021,
    "Smooth Exploration for Robotic Reinforcement Learning", arXiv:2005.05719).

    The exploration noise at state ``s`` is ``z(s) @ theta``: the policy's latent
    features ``z(s)`` (``features [..., F]``, the actor's last hidden layer) times a noise
    matrix ``theta [F, A]`` with independent entries ``theta_ji ~ N(0, exp(log_std_ji)^2)``
    (``log_std [F, A]``, learned), drawn per env and kept between resamples, so that one
    state always gets the same push while the matrix stands. Given the features, that
    noise is Gaussian with per-dimension variance ``sum_j z_j(s)^2 exp(log_std_ji)^2``:
    the policy is ``Normal(mean(s), scale())`` (before any tanh squash), whose log-prob
    and entropy the losses use.

    The features enter under ``stop_gradient`` (as Stable-Baselines3's default,
    ``learn_features=False``): the spread is learned through ``log_std`` alone, and the
    features serve the mean.
    """

    features: jax.Array  # [..., F]
    log_std: jax.Array  # [F, A]
    epsilon: float = struct.field(pytree_node=False, default=1e-6)  # variance floor

    def scale(self) -> jax.Array:
        """The policy's standard deviation ``[..., A]``: ``sqrt(z^2 @ exp(2 log_std) +
        epsilon)``; the floor keeps it positive (a finite log-prob) where every feature
        is 0, as ReLU features can be."""
        z = jax.lax.stop_gradient(self.features)
        return jnp.sqrt(jnp.square(z) @ jnp.exp(2.0 * self.log_std) + self.epsilon)

    def noise(self, unit_matrix: jax.Array) -> jax.Array:
        """The exploration noise ``z @ theta`` ``[..., A]`` with ``theta = exp(log_std) *
        unit_matrix``: ``unit_matrix [..., F, A]`` holds standard normals, one matrix per
        row of ``features`` (:func:`sde_next_matrix`)."""
        z = jax.lax.stop_gradient(self.features)
        return jnp.einsum("...f,...fa->...a", z, jnp.exp(self.log_std) * unit_matrix)


def sde_initial_carry(batch_size: int, num_features: int, action_dim: int) -> dict:
    """The gSDE state of ``batch_size`` envs before an episode's first step (all zeros,
    so resetting a carry to zeros restarts it): ``"matrix"`` ``[batch_size,
    num_features, action_dim]``, each env's standard normals (the noise matrix divided by
    ``exp(log_std)``: see :meth:`StateDependentNoise.noise`), and ``"steps"`` int32
    ``[batch_size]``, the steps taken with that matrix (modulo the sample frequency)."""
    return {
        "matrix": jnp.zeros((batch_size, num_features, action_dim), jnp.float32),
        "steps": jnp.zeros((batch_size,), jnp.int32),
    }


def sde_next_matrix(carry: dict, key: jax.Array, sample_freq: int):
    """The unit noise matrix ``[B, F, A]`` each env acts with at this step, and the gSDE
    carry (:func:`sde_initial_carry`) after it.

    An env draws a fresh matrix (standard normals from ``key``) where its ``steps`` is 0,
    at an episode's first step (the rollout resets the carry to zeros) and, with
    ``sample_freq`` (static) > 0, every ``sample_freq`` steps after it; ``sample_freq=0``
    keeps one matrix for the whole episode. Storing standard normals rather than
    ``theta`` lets the noise follow ``log_std`` as it is learned."""
    matrix, steps = carry["matrix"], carry["steps"]
    fresh = jax.random.normal(key, matrix.shape, matrix.dtype)
    matrix = jnp.where((steps == 0)[:, None, None], fresh, matrix)
    steps = steps + 1
    if sample_freq > 0:
        steps = steps % sample_freq
    return matrix, {"matrix": matrix, "steps": steps}
