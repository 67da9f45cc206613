"""A flax NNX torso through flax's bridge (``flax.nnx.bridge.to_linen``) against the same
torso in linen: PPO on CartPole-v1, 8 seeds vmapped, 131,072 steps each, no evaluation.
Prints each one's compile time and three steady-state runs, and where their StableHLO
op counts differ (docs/guide/networks.md's NNX note)::

    python benchmarks/investigations/nnx_bridge.py
"""

import collections
import re
import time

import flax.linen as nn
import jax
from flax import nnx
from flax.nnx import bridge

from jaxrl.algorithms import ppo

SEEDS, STEPS = 8, 131_072


class LinenTorso(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.LayerNorm()(nn.Dense(64)(x)))


class NNXTorso(nnx.Module):
    def __init__(self, din: int, width: int, *, rngs: nnx.Rngs):
        self.dense = nnx.Linear(din, width, rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)

    def __call__(self, x):
        return nnx.relu(self.norm(self.dense(x)))


def op_counts(text: str) -> collections.Counter:
    return collections.Counter(re.findall(r"= \"?(stablehlo\.[a-z_]+)", text))


def main() -> None:
    keys = jax.random.split(jax.random.key(0), SEEDS)
    counts = {}
    for name, torso in [("linen", LinenTorso()), ("nnx bridge", bridge.to_linen(NNXTorso, 4, 64))]:
        config = ppo.Config(env_id="CartPole-v1", network=torso, total_timesteps=STEPS, num_evals=0, num_reports=0)
        train = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))
        lowered = train.lower(keys, config)
        counts[name] = op_counts(lowered.as_text())
        start = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
        jax.block_until_ready(compiled(keys, config))
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            jax.block_until_ready(compiled(keys, config))
            runs.append(time.perf_counter() - start)
        rate = SEEDS * STEPS / sorted(runs)[1]
        shown = ", ".join(f"{r:.2f}" for r in runs)
        print(f"{name:10s} compile {compile_s:5.1f} s  runs {shown} s  {rate:,.0f} steps/s (median run)")
    linen, bridged = counts["linen"], counts["nnx bridge"]
    differ = {op: (linen[op], bridged[op]) for op in sorted(set(linen) | set(bridged)) if linen[op] != bridged[op]}
    print("StableHLO op counts that differ (linen, nnx bridge):", differ or "none")


if __name__ == "__main__":
    main()
