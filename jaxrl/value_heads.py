"""What a value network outputs per action and how a TD loss reads it, as config parts
(:func:`jaxrl.config.part`): the ``head`` field of the DQN family's Configs (DQN, R2D2,
IQL, VDN).

Every head answers the same questions, so a loss holds one head and never asks which
one it is (the choice is made once, when the program is traced):

* ``outputs``: the network's outputs per action (the ``num_atoms`` of
  :class:`jaxrl.networks.QNetwork`; 1 gives Q-values ``[..., A]``, more give ``[..., A,
  outputs]``);
* ``q_values(out)``: the action values ``[..., A]`` of the network's ``out``;
* ``at_action(out, action)``: ``out`` at the actions ``[...]``;
* ``target(next_out, reward, discount)``: the one-step target from ``next_out``, the
  target network's output at the next action (``discount`` includes termination);
* ``td_loss(out, target)``: ``(loss, priority_error, q)``, each ``[...]``: the loss per
  sample, the error prioritized replay turns into priorities, and the value of ``out``;
* ``network_settings()``: what the head changes in the Q-network (merged with the
  ``exploration`` part's by :func:`jaxrl.algorithms.dqn.make_network`);
* ``acting_fractions(key)`` and ``learning_fractions(key, shape)``: the network's extra
  input, the quantile fractions ``taus`` of :class:`ImplicitQuantile`, drawn from ``key``
  for acting and for a loss, with the key left for the rest (every other head: None, the
  key untouched, so its programs are what they were).

:class:`Scalar` learns Q-values with a Huber or squared TD loss; :class:`Rescaled`
learns R2D2's rescaled values ``h(Q)``; :class:`Categorical` learns C51's distribution
of returns; :class:`Quantile` (QR-DQN) learns the return distribution's quantiles at
fixed fractions and :class:`ImplicitQuantile` (IQN) at fractions sampled afresh for every
network call, which the network takes as an input. Both train with the quantile Huber
loss (:func:`quantile_huber_loss`). An IQN network's output is the pair ``(quantiles
[..., A, N], taus [..., N])``: its values and the fractions they were computed at, so
the head's methods read the pair and the learner never asks which head it holds.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl import returns
from jaxrl.config import part, require_choice, require_int, require_range, static

LOSSES = {  # a scalar head's loss on the TD error
    "huber": optax.huber_loss,
    "mse": lambda td: 0.5 * jnp.square(td),
}


class ObservationInputs:
    """What the heads whose network reads observations alone share: no change to the
    network and no quantile fractions to draw."""

    def network_settings(self) -> dict:
        """The Q-network's settings this head adds (:class:`jaxrl.networks.QNetwork`'s): none."""
        return {}

    def acting_fractions(self, key: jax.Array | None):
        """``(key, None)``: no fractions; ``key`` untouched."""
        return key, None

    def learning_fractions(self, key: jax.Array, shape: tuple):
        """``(key, (None, None, None))``: no fractions for the online, target and
        next-action networks; ``key`` untouched."""
        return key, (None, None, None)


@part
class Scalar(ObservationInputs):
    """Q-values trained toward ``reward + discount * Q_target(s', a*)`` with a Huber
    (``loss="huber"``) or squared (``"mse"``) loss on the TD error, which is also the
    priority error."""

    loss: str = static("huber")

    outputs = 1  # the network's outputs per action

    def __post_init__(self):
        require_choice(self, "loss", LOSSES)

    def q_values(self, out: jax.Array) -> jax.Array:
        """The Q-values themselves, ``[..., A]``."""
        return out

    def at_action(self, out: jax.Array, action: jax.Array) -> jax.Array:
        """``out [..., A]`` at ``action [...]``: ``[...]``."""
        return jnp.take_along_axis(out, action[..., None], axis=-1)[..., 0]

    def target(self, next_out: jax.Array, reward: jax.Array, discount: jax.Array) -> jax.Array:
        """``reward + discount * next_out``, each ``[...]``."""
        return reward + discount * next_out

    def td_loss(self, out: jax.Array, target: jax.Array):
        """``(loss, td, out)`` with ``td = target - out``, each ``[...]``."""
        td = target - out
        return LOSSES[self.loss](td), td, out

    def n_step_targets(self, r_t, q_next_online_t, q_next_target_t, terminated_t, truncated_t, gamma, n: int):
        """n-step double-Q targets over sequences ``[T, ...]``
        (:func:`jaxrl.returns.double_q_n_step_targets`)."""
        return returns.double_q_n_step_targets(
            r_t, q_next_online_t, q_next_target_t, terminated_t, truncated_t, gamma, n
        )


@part
class Rescaled(Scalar):
    """R2D2's value rescaling (Pohlen et al., 2018, arXiv:1805.11593; Kapturowski et al.,
    2019): the network learns ``h(Q)`` with ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps
    x`` (:func:`jaxrl.returns.value_rescale`), so targets unrescale the bootstrap value,
    back up and rescale: ``h(reward + discount * h^-1(next_out))``."""

    eps: float = 1e-3  # h's linear term

    def check_traced(self) -> None:
        require_range(self, "eps", 0.0, float("inf"))

    def target(self, next_out: jax.Array, reward: jax.Array, discount: jax.Array) -> jax.Array:
        """``h(reward + discount * h^-1(next_out))``, each ``[...]``."""
        next_value = returns.value_unrescale(next_out, self.eps)
        return returns.value_rescale(reward + discount * next_value, self.eps)

    def n_step_targets(self, r_t, q_next_online_t, q_next_target_t, terminated_t, truncated_t, gamma, n: int):
        """Rescaled n-step double-Q targets over sequences ``[T, ...]``
        (:func:`jaxrl.returns.double_q_n_step_targets` with ``rescale_eps``)."""
        return returns.double_q_n_step_targets(
            r_t, q_next_online_t, q_next_target_t, terminated_t, truncated_t, gamma, n, self.eps
        )


@part
class Categorical(ObservationInputs):
    """C51 (Bellemare et al., 2017, arXiv:1707.06887): each action's return distribution
    on ``num_atoms`` atoms evenly spaced on ``[v_min, v_max]``, trained by cross-entropy
    toward the projected target distribution; the priority error is the KL divergence
    from it, and the Q-values are the distributions' means."""

    num_atoms: int = static(51)
    v_min: float = 0.0
    v_max: float = 100.0

    def __post_init__(self):
        require_int(self, "num_atoms", 2)

    def check_traced(self) -> None:
        if not isinstance(self.v_min, jax.core.Tracer) and not isinstance(self.v_max, jax.core.Tracer):
            if not np.all(np.asarray(self.v_min) < np.asarray(self.v_max)):
                raise ValueError(f"v_min ({self.v_min}) must be below v_max ({self.v_max})")

    @property
    def outputs(self) -> int:
        """The atoms: the network's logits per action."""
        return self.num_atoms

    def support(self) -> jax.Array:
        """The atoms ``[num_atoms]``, evenly spaced on ``[v_min, v_max]``."""
        return jnp.linspace(self.v_min, self.v_max, self.num_atoms)

    def q_values(self, out: jax.Array) -> jax.Array:
        """The means ``[..., A]`` of the logits ``out [..., A, K]``."""
        return jnp.sum(jax.nn.softmax(out, axis=-1) * self.support(), axis=-1)

    def at_action(self, out: jax.Array, action: jax.Array) -> jax.Array:
        """The logits ``out [..., A, K]`` at ``action [...]``: ``[..., K]``."""
        return jnp.take_along_axis(out, action[..., None, None], axis=-2)[..., 0, :]

    def target(self, next_out: jax.Array, reward: jax.Array, discount: jax.Array) -> jax.Array:
        """The distribution of ``reward + discount * Z'`` projected on the support
        (:func:`jaxrl.returns.categorical_projection`), ``[B, K]``, from the next logits
        ``next_out [B, K]``."""
        return returns.categorical_projection(jax.nn.softmax(next_out), reward, discount, self.support())

    def td_loss(self, out: jax.Array, target: jax.Array):
        """``(cross-entropy, KL divergence, mean)`` of the logits ``out [B, K]`` against
        the target probabilities ``[B, K]``, each ``[B]``."""
        log_probs = jax.nn.log_softmax(out)
        cross_entropy = -jnp.sum(target * log_probs, axis=-1)
        kl = cross_entropy + jnp.sum(jax.scipy.special.xlogy(target, target), axis=-1)
        return cross_entropy, kl, jnp.sum(jnp.exp(log_probs) * self.support(), axis=-1)


def quantile_huber_loss(quantiles: jax.Array, fractions: jax.Array, targets: jax.Array, kappa) -> jax.Array:
    """The quantile Huber loss of QR-DQN (Dabney et al., 2017, "Distributional
    Reinforcement Learning with Quantile Regression", arXiv:1710.10044, eq. 10) and IQN
    (Dabney et al., 2018, arXiv:1806.06923, eq. 3).

    Args:
      quantiles: ``[N]`` the estimated quantiles ``theta_i`` of one return distribution.
      fractions: ``[N]`` the fractions ``tau_i`` they estimate (QR-DQN's midpoints
        ``(2i + 1) / 2N``, IQN's samples).
      targets: ``[M]`` samples ``T_j`` of the target distribution (its quantiles).
      kappa: the Huber threshold, ``> 0``.
    Returns the scalar ``sum_i mean_j |tau_i - 1{u_ij < 0}| L_kappa(u_ij) / kappa`` of the
    pairwise errors ``u_ij = T_j - theta_i``, with ``L_kappa(u) = u^2 / 2`` for ``|u| <=
    kappa`` and ``kappa (|u| - kappa / 2)`` beyond. Gradients flow into every argument:
    stop the targets' where they must not. Batch with ``jax.vmap``.
    """
    chex.assert_rank([quantiles, fractions, targets], 1)
    chex.assert_equal_shape([quantiles, fractions])
    u = targets[None, :] - quantiles[:, None]  # [N, M]
    weight = jnp.abs(fractions[:, None] - (u < 0).astype(u.dtype))
    # optax's Huber: min and abs, no select between the branches, whose gradient costs more
    return jnp.sum(jnp.mean(weight * optax.huber_loss(u, delta=kappa) / kappa, axis=-1))


def batched_quantile_loss(quantiles: jax.Array, fractions: jax.Array, targets: jax.Array, kappa):
    """:func:`quantile_huber_loss` of each row: ``quantiles [..., N]``, ``fractions``
    ``[..., N]`` or ``[N]`` (shared), ``targets [..., M]``; returns ``[...]``."""
    batch = quantiles.shape[:-1]
    fractions = jnp.broadcast_to(fractions, quantiles.shape).reshape(-1, quantiles.shape[-1])
    flat = jax.vmap(quantile_huber_loss, in_axes=(0, 0, 0, None))(
        quantiles.reshape(-1, quantiles.shape[-1]), fractions, targets.reshape(-1, targets.shape[-1]), kappa
    )
    return flat.reshape(batch)


def quantile_midpoints(num: int, upper=1.0) -> jax.Array:
    """The ``num`` fractions ``(2i + 1) / (2 num) * upper``, ``i = 0..num-1``: the
    midpoints of ``num`` equal cells of ``[0, upper]``, ``[num]``."""
    return (2.0 * jnp.arange(num, dtype=jnp.float32) + 1.0) / (2.0 * num) * upper


class QuantileLoss:
    """What the quantile heads share: their TD loss and its checks."""

    def check_traced(self) -> None:
        require_range(self, "kappa", 0.0, float("inf"), low_open=True)

    def quantile_loss(self, quantiles: jax.Array, fractions: jax.Array, target: jax.Array):
        """``(loss, loss, mean)``, each ``[...]``: the quantile Huber loss
        (:func:`quantile_huber_loss`) of ``quantiles [..., N]`` at ``fractions`` against
        the target samples ``[..., M]``, which is also the priority error (prioritized
        replay then prefers the samples whose distribution is fitted worst, as Rainbow
        prioritizes C51's by its loss), and the mean of ``quantiles``."""
        loss = batched_quantile_loss(quantiles, fractions, target, self.kappa)
        return loss, loss, jnp.mean(quantiles, axis=-1)


@part
class Quantile(QuantileLoss, ObservationInputs):
    """QR-DQN (Dabney et al., 2017, arXiv:1710.10044): each action's return distribution
    as ``num_quantiles`` quantiles at the fixed fractions ``tau_i = (2i + 1) / 2N``,
    trained by the quantile Huber loss (:func:`quantile_huber_loss`, threshold
    ``kappa``) toward the samples ``reward + discount * theta'_j`` of the target
    network's quantiles at the next action (no projection); the Q-values are the
    quantiles' means and the priority error the loss.

    The paper's Atari agents use 200 quantiles; the default of 51 (C51's atom count)
    fits CartPole-sized tasks, whose loss costs ``N^2`` per sample on a CPU."""

    num_quantiles: int = static(51)
    kappa: float = 1.0  # the Huber threshold; 1 is the paper's QR-DQN-1

    def __post_init__(self):
        require_int(self, "num_quantiles", 1)

    @property
    def outputs(self) -> int:
        """The quantiles: the network's outputs per action."""
        return self.num_quantiles

    def fractions(self) -> jax.Array:
        """The fixed fractions ``[N]`` (:func:`quantile_midpoints`)."""
        return quantile_midpoints(self.num_quantiles)

    def q_values(self, out: jax.Array) -> jax.Array:
        """The means ``[..., A]`` of the quantiles ``out [..., A, N]``."""
        return jnp.mean(out, axis=-1)

    def at_action(self, out: jax.Array, action: jax.Array) -> jax.Array:
        """The quantiles ``out [..., A, N]`` at ``action [...]``: ``[..., N]``."""
        return jnp.take_along_axis(out, action[..., None, None], axis=-2)[..., 0, :]

    def target(self, next_out: jax.Array, reward: jax.Array, discount: jax.Array) -> jax.Array:
        """The target samples ``reward + discount * next_out``, ``[..., N]``, from the next
        quantiles ``next_out [..., N]``, ``reward`` and ``discount`` ``[...]``."""
        return reward[..., None] + discount[..., None] * next_out

    def td_loss(self, out: jax.Array, target: jax.Array):
        """``(loss, loss, mean)`` of the quantiles ``out [..., N]`` against the target
        samples ``[..., N]`` (:meth:`QuantileLoss.quantile_loss`), each ``[...]``."""
        return self.quantile_loss(out, self.fractions(), target)


RISKS = ("neutral", "cvar")  # ImplicitQuantile's acting distortions


@part
class ImplicitQuantile(QuantileLoss):
    """IQN (Dabney et al., 2018, "Implicit Quantile Networks for Distributional
    Reinforcement Learning", arXiv:1806.06923): the network takes quantile fractions
    ``taus [..., N]`` as an input (their cosine embedding of ``embedding_dim`` terms
    multiplies the torso's features: :class:`jaxrl.networks.QuantileEmbedding`) and
    returns ``(quantiles [..., A, N], taus)``, the pair every method here reads. Each loss
    draws ``num_online`` fresh fractions per sample for the online network and
    ``num_target`` for the target network, all uniform on ``[0, 1]``, and trains with the
    quantile Huber loss (threshold ``kappa``) toward ``reward + discount *`` the target
    network's quantiles at the next action, which the mean over ``num_acting`` acting
    fractions picks (of the online network with ``double``, else of the target network).

    Acting takes the mean over ``num_acting`` fractions drawn afresh at every step;
    deterministic acting (evaluation, no key) takes their ``num_acting`` midpoints, so it
    is deterministic. ``risk="cvar"`` distorts acting (and the next-action choice) toward
    the worst outcomes: the acting fractions lie in ``[0, cvar_alpha]`` instead of ``[0,
    1]``, so the mean over them estimates CVaR at level ``cvar_alpha``, the mean of the
    lowest ``cvar_alpha`` share of returns (the paper's CVaR distortion, section 3.1);
    the loss still learns the whole distribution. ``"neutral"`` ignores ``cvar_alpha``.
    """

    num_online: int = static(64)  # N: fractions per sample for the online network
    num_target: int = static(64)  # N': fractions per sample for the target network
    num_acting: int = static(32)  # K: fractions for acting and for the next action's choice
    embedding_dim: int = static(64)  # n: cosine terms cos(pi i tau), i = 0..n-1
    risk: str = static("neutral")  # "neutral" or "cvar"
    kappa: float = 1.0  # the Huber threshold
    cvar_alpha: float = 0.25  # with risk="cvar": the share of worst returns acting averages

    outputs = 1  # per action and fraction

    def __post_init__(self):
        for field in ("num_online", "num_target", "num_acting", "embedding_dim"):
            require_int(self, field, 1)
        require_choice(self, "risk", RISKS)

    def check_traced(self) -> None:
        super().check_traced()
        require_range(self, "cvar_alpha", 0.0, 1.0, low_open=True)

    def network_settings(self) -> dict:
        """The Q-network's quantile input (:class:`jaxrl.networks.QNetwork`'s
        ``quantile_embedding``): ``embedding_dim`` cosine terms."""
        return {"quantile_embedding": self.embedding_dim}

    def draw_fractions(self, key: jax.Array | None, role: str, shape: tuple = ()) -> jax.Array:
        """Fractions ``[*shape, n]`` for ``role``: ``"online"`` (``n = num_online``),
        ``"target"`` (``num_target``), both uniform on ``[0, 1]``, or ``"acting"``
        (``num_acting``), uniform on ``[0, cvar_alpha]`` with ``risk="cvar"``. With
        ``key`` None, the ``n`` midpoints of that interval (:func:`quantile_midpoints`),
        the same for every row."""
        num = {"online": self.num_online, "target": self.num_target, "acting": self.num_acting}[role]
        upper = self.cvar_alpha if (role == "acting" and self.risk == "cvar") else 1.0
        if key is None:
            return jnp.broadcast_to(quantile_midpoints(num, upper), shape + (num,))
        return jax.random.uniform(key, shape + (num,), jnp.float32) * upper

    def acting_fractions(self, key: jax.Array | None):
        """``(key', taus [num_acting])``: fractions for acting, shared by a batch of
        observations: drawn from ``key``, whose other half is ``key'``; with ``key`` None
        (deterministic acting) the midpoints, and ``key'`` None."""
        if key is None:
            return None, self.draw_fractions(None, "acting")
        key, fraction_key = jax.random.split(key)
        return key, self.draw_fractions(fraction_key, "acting")

    def learning_fractions(self, key: jax.Array, shape: tuple):
        """``(key', (online [*shape, N], target [*shape, N'], acting [*shape, K]))``:
        fresh fractions per sample of a batch ``shape`` for the online network, the
        target network and the next action's choice, drawn from ``key``; ``key'`` is left
        for the rest of the loss (noisy nets' draws)."""
        key, online_key, target_key, acting_key = jax.random.split(key, 4)
        return key, (
            self.draw_fractions(online_key, "online", shape),
            self.draw_fractions(target_key, "target", shape),
            self.draw_fractions(acting_key, "acting", shape),
        )

    def q_values(self, out) -> jax.Array:
        """The means ``[..., A]`` of the quantiles of ``out = (quantiles [..., A, N],
        taus)``: the Q-values (under ``risk="cvar"`` with acting fractions, the CVaR)."""
        return jnp.mean(out[0], axis=-1)

    def at_action(self, out, action: jax.Array):
        """``out = (quantiles [..., A, N], taus [..., N])`` at ``action [...]``:
        ``(quantiles [..., N], taus)``."""
        quantiles, taus = out
        return jnp.take_along_axis(quantiles, action[..., None, None], axis=-2)[..., 0, :], taus

    def target(self, next_out, reward: jax.Array, discount: jax.Array) -> jax.Array:
        """The target samples ``reward + discount * quantiles'``, ``[..., N']``, from
        ``next_out = (quantiles' [..., N'], taus')`` at the next action."""
        return reward[..., None] + discount[..., None] * next_out[0]

    def td_loss(self, out, target: jax.Array):
        """``(loss, loss, mean)`` of ``out = (quantiles [..., N], taus [..., N])`` against
        the target samples ``[..., N']`` (:meth:`QuantileLoss.quantile_loss`), each ``[...]``."""
        quantiles, taus = out
        return self.quantile_loss(quantiles, taus, target)


# the shorthands a Config takes ("quantile" alone would not say which of the two)
HEADS = {
    "scalar": Scalar,
    "rescaled": Rescaled,
    "categorical": Categorical,
    "qr": Quantile,
    "iqn": ImplicitQuantile,
}
