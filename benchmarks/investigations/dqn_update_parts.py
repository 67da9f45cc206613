"""Where DQN's update on MinAtar goes, beside the throughput floor's step: each part in a
``lax.scan`` of updates from a trained state (DQN's MinAtar preset, one seed).

- ``floor step``: the floor's passes (online forward and backward, target forward) and an
  SGD step on both networks, as ``benchmarks/throughput.py``'s ``dqn_passes``;
- ``update, drawn batches``: DQN's update (Huber loss, global-norm clipping, Adam, target
  refresh);
- ``update, drawn batches, SGD``: the same with ``optax.sgd`` in place of the optimiser;

These three take four batches drawn from the ring in turn, as the floor does: on one
fixed batch XLA hoists what the network computes from its input alone (a uint8 frame's
scaling, the first convolution's patches) out of the loop.
- ``sample``: drawing a batch from the replay ring (its loss-free cost);
- ``sample + update``: what every update of a run does;
- both again with the frames in float32 replay, as the env emits them (the preset
  stores them as bool: ``replay_obs_dtype``).

With ``--atari``, the same parts at ``benchmarks/throughput.py``'s ``dqn-atari`` settings
(envpool Pong's 84x84x4 uint8 frames, the Nature CNN's 1.7M parameters) on a ring of
random frames; no float32 rows (the frames are uint8 already).

Every part is compiled first, then all are timed in turn, ``--rounds`` times, and the
fastest round of each is kept: this machine's speed drifts between runs.

With ``--iterations N``, whole iterations too (``N`` per scan): the floor's env steps
(acting by the argmax, no replay), DQN's collection (epsilon-greedy acting and the
replay writes) and the iteration (collection and updates), to set against a run's time.

    python benchmarks/investigations/dqn_update_parts.py [--updates 2000] [--rounds 5] [--atari] [--iterations 32]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import optax

from jaxrl.algorithms import dqn, offpolicy


def scanned(fn, carry, xs):
    """``fn`` scanned over ``xs``, compiled and run once: ``() -> carry``."""
    compiled = jax.jit(lambda c, x: jax.lax.scan(fn, c, x)[0]).lower(carry, xs).compile()
    jax.block_until_ready(compiled(carry, xs))
    return lambda: compiled(carry, xs)


def fastest_ms(parts: dict, steps: int, rounds: int) -> dict:
    """Milliseconds per step (update or iteration) of each part scanning ``steps`` of them:
    the fastest of ``rounds`` timings, taken in turn; other work on the machine only slows
    a run."""
    times = {name: [] for name in parts}
    for _ in range(rounds):
        for name, run in parts.items():
            start = time.perf_counter()
            jax.block_until_ready(run())
            times[name].append(time.perf_counter() - start)
    return {name: min(t) / steps * 1e3 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=2000, help="updates per scan (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timings of each part (default: %(default)s)")
    parser.add_argument("--atari", action="store_true", help="throughput.py's dqn-atari settings (needs envpool)")
    parser.add_argument(
        "--iterations", type=int, default=0, help="also time whole iterations, this many per scan (default: none)"
    )
    args = parser.parse_args()

    if args.atari:
        sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
        from throughput import ENTRIES  # noqa: PLC0415

        config = dqn.Config(env_id=ENTRIES["dqn-atari"].env_id, **ENTRIES["dqn-atari"].config, num_evals=0)
        state = dqn.init(jax.random.key(0), config)
        frames = jax.random.randint(jax.random.key(1), state.buffer.data["obs"].shape, 0, 256).astype(jnp.uint8)
        full = state.buffer.replace(
            data={**state.buffer.data, "obs": frames, "next_obs": frames}, size=state.buffer.num_rows
        )
        state = state.replace(buffer=full)
        name = "dqn-atari"
    else:
        config = dqn.preset("Breakout-MinAtar", total_timesteps=6_000, num_reports=0, num_evals=0)
        state = jax.jit(dqn.train)(jax.random.key(0), config).state  # a filled ring, 1,000 steps of learning
        name = "DQN's MinAtar preset"
    learner = dqn.learner
    drawn = [learner.sample(state, jax.random.key(k), config) for k in range(4)]
    batches = jax.tree.map(lambda *x: jnp.stack(x), *drawn)

    def batch_at(i):
        return jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i % 4, keepdims=False), batches)

    network = dqn.make_network(config)

    def update(config):
        def one(state, i):
            return learner.learn(state, batch_at(i), jax.random.key(0), jnp.int32(0), config)[0], None

        return one

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

    def floor(params, i):
        batch = batch_at(i)

        def loss(online):
            next_q = network.apply(params["target"], batch["next_obs"])
            return jnp.mean(jnp.square(network.apply(online, batch["obs"]) - jax.lax.stop_gradient(next_q)))

        grads = jax.grad(loss)(params["online"])
        return {name: jax.tree.map(lambda p, g: p - 1e-6 * g, p, grads) for name, p in params.items()}, None

    keys = jax.random.split(jax.random.key(2), args.updates)
    steps = jnp.arange(args.updates)
    floor_params = {"online": state.params["network"], "target": state.target_params}
    parts = {"floor step": scanned(floor, floor_params, steps)}
    parts["update, drawn batches"] = scanned(update(config), state, steps)
    original = dqn.make_optimizer
    dqn.make_optimizer = lambda config: optax.sgd(1e-6)  # DQN's update reads it from the module
    try:
        sgd_state = state.replace(opt_state=optax.sgd(1e-6).init(state.params["network"]))
        parts["update, drawn batches, SGD"] = scanned(update(config), sgd_state, steps)
    finally:
        dqn.make_optimizer = original
    parts["sample"] = scanned(sample(config), state, keys)
    parts["sample + update"] = scanned(sample_and_update(config), state, keys)
    if not args.atari:  # the same ring with its frames in float32, and the learner told so
        float_data = {**state.buffer.data, **{k: state.buffer.data[k].astype(jnp.float32) for k in ("obs", "next_obs")}}
        float_state = state.replace(buffer=state.buffer.replace(data=float_data))
        float_config = config.replace(replay_obs_dtype=None)
        parts["sample, float32 replay"] = scanned(sample(float_config), float_state, keys)
        parts["sample + update, float32 replay"] = scanned(sample_and_update(float_config), float_state, keys)
    print(f"jax {jax.__version__}; {name}, batch {config.batch_size}, {args.updates} updates per scan")
    print("| part | ms per update |\n| --- | ---: |")
    for name, ms in fastest_ms(parts, args.updates, args.rounds).items():
        print(f"| {name} | {ms:.3f} |")
    if args.iterations:
        print_iterations(state, config, network, args)


def print_iterations(state, config, network, args) -> None:
    """Whole iterations (``num_steps`` env steps in every env, then ``num_updates``
    updates) beside their parts, from ``state``: what a run's time should add up to."""
    env, env_params = offpolicy.make_env(config)
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def floor_steps(state, key):  # the floor's acting: the argmax, no exploration, no replay
        def one_step(carry, keys):
            env_state, obs = carry
            action = jnp.argmax(network.apply(state.params["network"], obs), axis=-1)
            next_obs, env_state, *_ = env_step(keys, env_state, action, env_params)
            return (env_state, next_obs), None

        keys = jax.random.split(key, (config.num_steps, config.num_envs))
        env_state, obs = jax.lax.scan(one_step, (state.env_state, state.obs), keys)[0]
        return state.replace(env_state=env_state, obs=obs), None

    def collect(state, key):
        return offpolicy.collect(state, dqn.behaviour(state, config, False)[0], key, config)[0], None

    def iteration(state, key):
        return dqn.learner.step(state, key, config)[0], None

    keys = jax.random.split(jax.random.key(3), args.iterations)
    parts = {name: scanned(fn, state, keys) for name, fn in
             (("floor's env steps", floor_steps), ("collect", collect), ("iteration", iteration))}  # fmt: skip
    print(f"\n{config.num_steps} env steps x {config.num_envs} envs and {config.num_updates} updates per iteration")
    print("| part | ms per iteration |\n| --- | ---: |")
    for name, ms in fastest_ms(parts, args.iterations, args.rounds).items():
        print(f"| {name} | {ms:.2f} |")


if __name__ == "__main__":
    main()
