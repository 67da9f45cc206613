"""Where DQN's update on MinAtar goes, beside the throughput floor's step: each part in a
``lax.scan`` of updates from a trained state (DQN's MinAtar preset, one seed).

- ``floor step``: the floor's passes (online forward and backward, target forward) and an
  SGD step on both networks, as ``benchmarks/throughput.py``'s ``dqn_passes``;
- ``update, fixed batch``: DQN's update (Huber loss, global-norm clipping, Adam, target
  refresh) on one batch;
- ``update, fixed batch, SGD``: the same with ``optax.sgd`` in place of the optimiser;
- ``sample``: drawing a batch from the replay ring (its loss-free cost);
- ``sample + update``: what every update of a run does;
- both again with the frames in float32 replay, as the env emits them (the preset
  stores them as bool: ``replay_obs_dtype``).

Every part is compiled first, then all are timed in turn, ``--rounds`` times, and the
fastest round of each is kept: this machine's speed drifts between runs.

    python benchmarks/investigations/dqn_update_parts.py [--updates 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import optax

from jaxrl.algorithms import dqn


def scanned(fn, carry, keys):
    """``fn`` scanned over ``keys``, compiled and run once: ``() -> carry``."""
    compiled = jax.jit(lambda c, k: jax.lax.scan(fn, c, k)[0]).lower(carry, keys).compile()
    jax.block_until_ready(compiled(carry, keys))
    return lambda: compiled(carry, keys)


def per_update_ms(parts: dict, num_updates: int, rounds: int) -> dict:
    """The fastest of ``rounds`` timings of each part, taken in turn; other work on the
    machine only slows a run."""
    times = {name: [] for name in parts}
    for _ in range(rounds):
        for name, run in parts.items():
            start = time.perf_counter()
            jax.block_until_ready(run())
            times[name].append(time.perf_counter() - start)
    return {name: min(t) / num_updates * 1e3 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=2000, help="updates per scan (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timings of each part (default: %(default)s)")
    args = parser.parse_args()

    config = dqn.preset("Breakout-MinAtar", total_timesteps=6_000, num_reports=0, num_evals=0)
    state = jax.jit(dqn.train)(jax.random.key(0), config).state  # a filled ring, 1,000 steps of learning
    learner = dqn.learner
    batch = learner.sample(state, jax.random.key(1), config)
    network = dqn.make_network(config)

    def update(config):
        return lambda state, key: (learner.learn(state, batch, key, jnp.int32(0), config)[0], None)

    def sample(config):
        def one(state, key):  # every field summed, so that XLA drops no gather
            drawn = jax.tree.leaves(learner.sample(state, key, config))
            return state.replace(updates=state.updates + sum(jnp.sum(x).astype(jnp.int32) for x in drawn)), None

        return one

    def sample_and_update(config):
        def one(state, key):
            key, sample_key = jax.random.split(key)
            return learner.learn(state, learner.sample(state, sample_key, config), key, jnp.int32(0), config)[0], None

        return one

    def floor(params, key):
        def loss(online):
            next_q = network.apply(params["target"], batch["next_obs"])
            return jnp.mean(jnp.square(network.apply(online, batch["obs"]) - jax.lax.stop_gradient(next_q)))

        grads = jax.grad(loss)(params["online"])
        return {name: jax.tree.map(lambda p, g: p - 1e-6 * g, p, grads) for name, p in params.items()}, None

    keys = jax.random.split(jax.random.key(2), args.updates)
    floor_params = {"online": state.params["network"], "target": state.target_params}
    parts = {"floor step": scanned(floor, floor_params, keys)}
    parts["update, fixed batch"] = scanned(update(config), state, keys)
    original = dqn.make_optimizer
    dqn.make_optimizer = lambda config: optax.sgd(1e-6)  # DQN's update reads it from the module
    try:
        sgd_state = state.replace(opt_state=optax.sgd(1e-6).init(state.params["network"]))
        parts["update, fixed batch, SGD"] = scanned(update(config), sgd_state, keys)
    finally:
        dqn.make_optimizer = original
    parts["sample"] = scanned(sample(config), state, keys)
    parts["sample + update"] = scanned(sample_and_update(config), state, keys)
    # The same ring with its frames in float32, and the learner told so.
    float_data = {**state.buffer.data, **{k: state.buffer.data[k].astype(jnp.float32) for k in ("obs", "next_obs")}}
    float_state = state.replace(buffer=state.buffer.replace(data=float_data))
    float_config = config.replace(replay_obs_dtype=None)
    parts["sample, float32 replay"] = scanned(sample(float_config), float_state, keys)
    parts["sample + update, float32 replay"] = scanned(sample_and_update(float_config), float_state, keys)
    print(f"jax {jax.__version__}; DQN's MinAtar preset, batch {config.batch_size}, {args.updates} updates per scan")
    print("| part | ms per update |\n| --- | ---: |")
    for name, ms in per_update_ms(parts, args.updates, args.rounds).items():
        print(f"| {name} | {ms:.3f} |")


if __name__ == "__main__":
    main()
