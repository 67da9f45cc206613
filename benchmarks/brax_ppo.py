"""jaxrl's PPO against brax's own PPO trainer on the same brax env, in one process.

    python benchmarks/brax_ppo.py                          # 262,144 steps each
    python benchmarks/brax_ppo.py --total-timesteps 65536 --env inverted_pendulum

Both train on brax's ``inverted_pendulum`` (its default "generalized" backend), episodes
cut at ``--episode-length`` steps, with the same settings as far as the two allow: 16
envs x 64-step rollouts (brax: ``unroll_length=64``, ``batch_size * num_minibatches =
num_envs``, so one unroll of all envs per update), 8 minibatches, 10 epochs
(``num_updates_per_batch``), learning rate 1e-3 held constant, gamma 0.99, GAE lambda
0.95, clip 0.2, gradient norm 0.5, no entropy bonus, observation normalisation, 32x32
tanh policy and value networks, deterministic evaluation on 16 episodes at the end.

What the two do not share: brax's policy is a tanh-squashed Gaussian with a
state-dependent std, jaxrl's a Gaussian with a learned state-independent std whose
samples are clipped to [-1, 1]; brax's minibatches are whole 64-step unrolls, jaxrl's
single transitions; jaxrl clips nothing of the value loss here (``clip_value_loss=False``,
brax's default); brax's auto-reset replays each env's first state, jaxrl's adapter
draws a fresh one.

Timing (JAX's persistent compilation cache off):

* jaxrl: ``jax.jit(ppo.train).lower(...).compile()`` is the compile time; the compiled
  program then runs ``--runs`` times (fastest kept), steps/s = total steps / run time.
  The run includes the final evaluation (16 episodes).
* brax: its trainer times each training epoch (``training/sps`` and
  ``training/walltime`` in what it passes to ``progress_fn``, evaluation excluded); it
  runs ``--epochs`` epochs, the first including the compile. Steady steps/s is the
  median of the later epochs'; compile = first epoch's time - its steps / steady steps/s
  (brax compiles its evaluator apart; that time is in neither figure).
* floor: the same env steps and policy-network passes (``lax.scan`` over 64 steps of
  ``vmap(env.step)`` of the adapter and a 32x32 MLP, for as many iterations), nothing
  else, compiled by the same XLA.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="inverted_pendulum")
    parser.add_argument("--total-timesteps", type=int, default=262_144)
    parser.add_argument("--episode-length", type=int, default=200)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--unroll-length", type=int, default=64)
    parser.add_argument("--num-minibatches", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=4, help="brax's training epochs (num_evals - 1)")
    parser.add_argument("--runs", type=int, default=2, help="runs of jaxrl's compiled program")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-floor", action="store_true")
    return parser.parse_args(argv)


SETTINGS = dict(learning_rate=1e-3, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, max_grad_norm=0.5, update_epochs=10)
HIDDEN = (32, 32)
EVAL_EPISODES = 16


def jaxrl_ppo(jax, args):
    from jaxrl.algorithms import ppo

    config = ppo.Config(
        env_id=f"brax:{args.env}",
        env_kwargs={"max_steps_in_episode": args.episode_length},
        num_envs=args.num_envs,
        num_steps=args.unroll_length,
        total_timesteps=args.total_timesteps,
        num_minibatches=args.num_minibatches,
        num_epochs=SETTINGS["update_epochs"],
        hidden_sizes=HIDDEN,
        activation="tanh",
        learning_rate=SETTINGS["learning_rate"],
        anneal_lr=False,
        gamma=SETTINGS["gamma"],
        gae_lambda=SETTINGS["gae_lambda"],
        clip_eps=SETTINGS["clip_eps"],
        max_grad_norm=SETTINGS["max_grad_norm"],
        ent_coef=0.0,
        clip_value_loss=False,
        normalize_observations=True,
        num_evals=1,
        eval_episodes=EVAL_EPISODES,
        num_reports=0,
    )
    key = jax.random.key(args.seed)
    start = time.perf_counter()
    compiled = jax.jit(ppo.train).lower(key, config).compile()
    compile_s = time.perf_counter() - start
    times, out = [], None
    for _ in range(args.runs):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(key, config))
        times.append(time.perf_counter() - start)
    steps = config.num_iterations * config.num_envs * config.num_steps
    evals = [float(x) for x in jax.device_get(out.metrics["eval_return"]) if x == x]
    return dict(
        compile_s=compile_s, steps=steps, sps=steps / min(times), final_return=evals[-1], wall_s=compile_s + min(times)
    )


def _device_put_replicated(jax):
    """``jax.device_put_replicated``, which JAX 0.10 removed and brax 0.14.2's trainer
    still calls: a copy of ``x`` per device, placed as ``jax.pmap``'s outputs are (so
    that the trainer's pmapped epoch does not compile again for its own outputs)."""
    import jax.numpy as jnp

    def device_put_replicated(x, devices):
        stacked = jax.tree.map(lambda a: jnp.stack([jnp.asarray(a)] * len(devices)), x)
        return jax.pmap(lambda tree: tree, devices=devices)(stacked)

    return device_put_replicated


def brax_ppo(jax, args):
    import brax.envs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo_train
    from flax import linen as nn

    env = brax.envs.get_environment(args.env)
    records = []

    def progress(step, metrics):
        records.append((step, dict(metrics), time.perf_counter()))

    network_factory = functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=HIDDEN,
        value_hidden_layer_sizes=HIDDEN,
        activation=nn.tanh,
    )
    steps_per_update = args.num_envs * args.unroll_length
    if "device_put_replicated" not in vars(jax):
        jax.device_put_replicated = _device_put_replicated(jax)
    start = time.perf_counter()
    ppo_train.train(
        environment=env,
        num_timesteps=args.total_timesteps,
        num_envs=args.num_envs,
        episode_length=args.episode_length,
        unroll_length=args.unroll_length,
        batch_size=args.num_envs // args.num_minibatches,
        num_minibatches=args.num_minibatches,
        num_updates_per_batch=SETTINGS["update_epochs"],
        learning_rate=SETTINGS["learning_rate"],
        discounting=SETTINGS["gamma"],
        gae_lambda=SETTINGS["gae_lambda"],
        clipping_epsilon=SETTINGS["clip_eps"],
        max_grad_norm=SETTINGS["max_grad_norm"],
        entropy_cost=0.0,
        normalize_observations=True,
        normalize_advantage=True,
        reward_scaling=1.0,
        network_factory=network_factory,
        num_evals=args.epochs + 1,
        num_eval_envs=EVAL_EPISODES,
        deterministic_eval=True,
        seed=args.seed,
        progress_fn=progress,
    )
    total_s = time.perf_counter() - start
    trained = [(step, m) for step, m, _ in records if "training/sps" in m]
    epoch_steps = trained[0][0]  # env steps after the first epoch
    epoch_s = [trained[0][1]["training/walltime"]] + [
        b[1]["training/walltime"] - a[1]["training/walltime"] for a, b in zip(trained, trained[1:], strict=False)
    ]
    steady = statistics.median(m["training/sps"] for _, m in trained[1:]) if len(trained) > 1 else float("nan")
    assert epoch_steps % steps_per_update == 0
    return dict(
        compile_s=epoch_s[0] - epoch_steps / steady,
        steps=trained[-1][0],
        sps=steady,
        final_return=float(records[-1][1]["eval/episode_reward"]),
        wall_s=total_s,
    )


def floor(jax, args):
    """The same env steps and policy passes, nothing else: no learning, no bookkeeping."""
    import jax.numpy as jnp
    from flax import linen as nn

    from jaxrl import envs

    env, params = envs.make(f"brax:{args.env}", max_steps_in_episode=args.episode_length)
    action_size = env.action_space(params).shape[0]

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for size in HIDDEN:
                x = nn.tanh(nn.Dense(size)(x))
            return nn.Dense(action_size)(x)

    network = MLP()
    iterations = args.total_timesteps // (args.num_envs * args.unroll_length)

    def run(key):
        reset_keys = jax.random.split(key, args.num_envs)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
        net = network.init(key, obs)

        def step(carry, keys):
            obs, state = carry
            action = jnp.clip(network.apply(net, obs), -1.0, 1.0)
            obs, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
            return (obs, state), reward

        def iteration(carry, iteration_key):
            # every step's env keys in one split up front, as jaxrl.rollout does
            keys = jax.random.split(iteration_key, (args.unroll_length, args.num_envs))
            return jax.lax.scan(step, carry, keys)

        carry, rewards = jax.lax.scan(iteration, (obs, state), jax.random.split(key, iterations))
        return carry, rewards.sum()  # the final states too: XLA drops what nothing uses

    key = jax.random.key(args.seed)
    start = time.perf_counter()
    compiled = jax.jit(run).lower(key).compile()
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        jax.block_until_ready(compiled(key))
        times.append(time.perf_counter() - start)
    steps = iterations * args.num_envs * args.unroll_length
    return dict(
        compile_s=compile_s,
        steps=steps,
        sps=steps / min(times),
        final_return=float("nan"),
        wall_s=compile_s + min(times),
    )


def main(argv=None):
    args = parse_args(argv)
    assert args.num_envs % args.num_minibatches == 0, "brax needs batch_size = num_envs / num_minibatches"
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    import importlib.metadata as md

    load_before = os.getloadavg()[0]
    rows = {}
    for name, measure in [("jaxrl PPO", jaxrl_ppo), ("brax PPO", brax_ppo)] + (
        [] if args.no_floor else [("floor", floor)]
    ):
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        rows[name] = measure(jax, args)
    load_after = os.getloadavg()[0]

    ratio = rows["jaxrl PPO"]["sps"] / rows["brax PPO"]["sps"]
    lines = [
        f"brax:{args.env} (generalized backend), {args.episode_length}-step episodes, "
        f"{args.num_envs} envs x {args.unroll_length} steps, {args.num_minibatches} minibatches, "
        f"{SETTINGS['update_epochs']} epochs, seed {args.seed}",
        "",
        "| trainer | env steps | compile (s) | steady env steps/s | wall (s) | final return (16 episodes, max "
        f"{args.episode_length}) |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        final = "-" if row["final_return"] != row["final_return"] else f"{row['final_return']:.1f}"
        lines.append(
            f"| {name} | {row['steps']:,} | {row['compile_s']:.1f} | {row['sps']:,.0f} "
            f"| {row['wall_s']:.1f} | {final} |"
        )
    lines += [
        "",
        f"jaxrl / brax steady steps/s: {ratio:.2f}"
        + (f"; jaxrl / floor: {rows['jaxrl PPO']['sps'] / rows['floor']['sps']:.2f}" if "floor" in rows else ""),
        "wall: jaxrl and floor, compile + one run; brax, its whole train() call (compiles, "
        f"{args.epochs} epochs, {args.epochs + 1} evaluations)",
        "",
        f"command: python benchmarks/brax_ppo.py {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip(),
        f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load_before:.1f} before, {load_after:.1f} after",
        f"jax {jax.__version__}, jaxlib {md.version('jaxlib')}, brax {md.version('brax')}, "
        f"backend {jax.default_backend()}",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
