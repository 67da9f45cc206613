"""DQN on CartPole-v1 with users' torsos: why notebooks/custom_networks.ipynb trains its
attention encoder with the Rainbow preset. 4 seeds (``jax.random.split(key(0), 4)``),
vmapped, learning rate traced; prints each seed's final evaluation return and the mean
curve of evaluations::

    python benchmarks/investigations/dqn_custom_torsos.py attention default 100000
    python benchmarks/investigations/dqn_custom_torsos.py residual default 100000
    python benchmarks/investigations/dqn_custom_torsos.py attention rainbow 70000
"""

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algorithms import dqn
from jaxrl.networks import MLP


class FeatureAttention(nn.Module):
    """The notebook's encoder: a token per feature, one self-attention layer, the tokens
    beside the raw features into jaxrl's MLP."""

    embed: int = 16
    heads: int = 2

    @nn.compact
    def __call__(self, obs):
        tokens = nn.Dense(self.embed)(obs[..., None])
        tokens = tokens + self.param("position", nn.initializers.normal(0.02), tokens.shape[-2:])
        tokens = tokens + nn.MultiHeadDotProductAttention(num_heads=self.heads)(tokens)
        return MLP((128, 128), "relu")(jnp.concatenate([obs, tokens.reshape(*tokens.shape[:-2], -1)], axis=-1))


class Residual(nn.Module):
    """A LayerNorm residual torso, as the notebook's PPO and SAC use, 128 wide."""

    width: int = 128
    blocks: int = 2

    @nn.compact
    def __call__(self, obs):
        x = nn.Dense(self.width)(obs)
        for _ in range(self.blocks):
            x = x + nn.Dense(self.width)(nn.relu(nn.LayerNorm()(x)))
        return nn.relu(nn.LayerNorm()(x))


def main(torso: str, preset: str, steps: int) -> None:
    network = {"attention": FeatureAttention(), "residual": Residual()}[torso]
    make = dqn.rainbow if preset == "rainbow" else dqn.Config
    config = make(env_id="CartPole-v1", network=network, total_timesteps=steps, num_reports=0)
    config = config.replace(learning_rate=jnp.asarray(config.learning_rate))
    keys = jax.random.split(jax.random.key(0), 4)
    out = jax.jit(jax.vmap(dqn.train, in_axes=(0, None)))(keys, config)
    evals = np.asarray(out.metrics["eval_return"])
    evals = evals[:, ~np.isnan(evals[0])]
    print(f"{torso} {preset} {steps}: final {np.round(evals[:, -1], 1)}, mean curve {np.round(evals.mean(0)).tolist()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
