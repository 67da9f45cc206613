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
  sample, the error prioritized replay turns into priorities, and the value of ``out``.

:class:`Scalar` learns Q-values with a Huber or squared TD loss; :class:`Rescaled`
learns R2D2's rescaled values ``h(Q)``; :class:`Categorical` learns C51's distribution
of returns. Quantile heads (QR-DQN's fixed fractions, IQN's sampled ones) are more heads
answering the same questions.
"""

from __future__ import annotations

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


@part
class Scalar:
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
class Categorical:
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


HEADS = {"scalar": Scalar, "rescaled": Rescaled, "categorical": Categorical}  # the shorthands a Config takes
