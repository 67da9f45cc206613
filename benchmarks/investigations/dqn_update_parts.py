"""Where DQN's update on MinAtar goes, beside the throughput floor's step: each part in a
``lax.scan`` of updates from a trained state (DQN's MinAtar preset, one seed).

- ``floor step``: the floor's passes (online forward and backward, target forward) and an
  SGD step on both networks, as ``benchmarks/throughput.py``'s ``dqn_passes``;
- ``update, fixed batch``: DQN's update (Huber loss, global-norm clipping, Adam, target
  refresh) on one batch;
- ``update, fixed batch, SGD``: the same with ``optax.sgd`` in place of the optimiser;
- ``sample``: drawing a batch from the replay ring (its loss-free cost);
- ``sample + update``: what every update of a run does.

    python benchmarks/investigations/dqn_update_parts.py [--updates 2000]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import optax

from jaxrl.algorithms import dqn


def per_update_ms(fn, carry, keys) -> float:
    compiled = jax.jit(lambda c, k: jax.lax.scan(fn, c, k)[0]).lower(carry, keys).compile()
    jax.block_until_ready(compiled(carry, keys))
    times = []
    for _ in range(3):  # the fastest: other work on the machine only slows a run
        start = time.perf_counter()
        jax.block_until_ready(compiled(carry, keys))
        times.append(time.perf_counter() - start)
    return min(times) / len(keys) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=2000, help="updates per scan (default: %(default)s)")
    args = parser.parse_args()

    config = dqn.preset("Breakout-MinAtar", total_timesteps=6_000, num_reports=0, num_evals=0)
    state = jax.jit(dqn.train)(jax.random.key(0), config).state  # a filled ring, 1,000 steps of learning
    learner = dqn.learner
    batch = learner.sample(state, jax.random.key(1), config)
    network = dqn.make_network(config)

    def update(config):
        return lambda state, key: (learner.learn(state, batch, key, jnp.int32(0), config)[0], None)

    def sample(state, key):  # every field summed, so that XLA drops no gather
        drawn = jax.tree.leaves(learner.sample(state, key, config))
        return state.replace(updates=state.updates + sum(jnp.sum(x).astype(jnp.int32) for x in drawn)), None

    def sample_and_update(state, key):
        key, sample_key = jax.random.split(key)
        return learner.learn(state, learner.sample(state, sample_key, config), key, jnp.int32(0), config)[0], None

    def floor(params, key):
        def loss(online):
            next_q = network.apply(params["target"], batch["next_obs"])
            return jnp.mean(jnp.square(network.apply(online, batch["obs"]) - jax.lax.stop_gradient(next_q)))

        grads = jax.grad(loss)(params["online"])
        return {name: jax.tree.map(lambda p, g: p - 1e-6 * g, p, grads) for name, p in params.items()}, None

    keys = jax.random.split(jax.random.key(2), args.updates)
    floor_params = {"online": state.params["network"], "target": state.target_params}
    rows = [("floor step", per_update_ms(floor, floor_params, keys))]
    rows.append(("update, fixed batch", per_update_ms(update(config), state, keys)))
    original = dqn.make_optimizer
    dqn.make_optimizer = lambda config: optax.sgd(1e-6)  # DQN's update reads it from the module
    try:
        sgd_state = state.replace(opt_state=optax.sgd(1e-6).init(state.params["network"]))
        rows.append(("update, fixed batch, SGD", per_update_ms(update(config), sgd_state, keys)))
    finally:
        dqn.make_optimizer = original
    rows.append(("sample", per_update_ms(sample, state, keys)))
    rows.append(("sample + update", per_update_ms(sample_and_update, state, keys)))
    print(f"jax {jax.__version__}; DQN's MinAtar preset, batch {config.batch_size}, {args.updates} updates per scan")
    print("| part | ms per update |\n| --- | ---: |")
    for name, ms in rows:
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
