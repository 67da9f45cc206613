"""envpool Atari: acting steps/s through envpool's XLA interface (``"envpool:<id>"``
inside ``jit``) against envpool's own Python loop, with the same networks.

For PPO's actor-critic and DQN's Q-network (``network="nature_cnn"`` unless
``--network``; parameters from the algorithm's own ``init``), one measurement is ``num_envs x steps`` env steps of
"act, then step every env":

- ``xla``: ``jaxrl.rollout.collect`` over ``jaxrl.envs.make("envpool:<id>",
  channels_last=True)`` (episode statistics included), one compiled program per
  repeat; compile time reported apart.
- ``python``: ``envpool.make(<id>, env_type="gymnasium")`` stepped from Python, the
  action of each step from the same ``act`` under ``jax.jit`` (the frames moved to
  ``[H, W, C]`` inside it, as the adapter does), numpy in and out.

Acting only (no learner updates: both paths would run the same update program). Run:
``python benchmarks/envpool_atari.py [--env Pong-v5] [--num-envs 8] [--steps 128]
[--repeats 3] [--network mlp]``; prints a Markdown table. The XLA path's timed region
includes its reset (one host call), the Python path's does not. Needs ``pip install "envpool==1.2.5"``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np


def configs(env_id: str, num_envs: int, network: str):
    from jaxrl.algorithms import dqn, ppo

    common = dict(env_id="envpool:" + env_id, env_kwargs={"channels_last": True}, network=network)
    return {
        "ppo": (ppo, ppo.Config(num_envs=num_envs, num_reports=0, **common)),
        "dqn": (dqn, dqn.Config(num_envs=num_envs, num_reports=0, **common)),
    }


def policy_fn(module, config):
    """``act(params, obs [N, H, W, C], key) -> action [N]`` as the algorithm acts in training."""
    if module.__name__.endswith("dqn"):
        return lambda params, obs, key: module.act(params, obs, (), key, config, epsilon=0.05)[0]
    return lambda params, obs, key: module.act(params, obs, (), key, config)[0]


def bench_xla(module, config, steps: int, repeats: int):
    from jaxrl import envs, rollout

    params = module.init(jax.random.key(0), config).params
    act = policy_fn(module, config)
    env, env_params = envs.make(config.env_id, **dict(config.env_kwargs))
    env = envs.EpisodeStatistics(env)

    def run(params, key):
        reset_key, run_key = jax.random.split(key)
        obs, env_state = rollout.reset(env, env_params, reset_key, config.num_envs)
        policy = lambda obs, carry, key: (act(params, obs, key), carry, {})  # noqa: E731
        trajectory, *_ = rollout.collect(env, env_params, policy, env_state, obs, run_key, steps)
        return trajectory.reward.sum()

    start = time.perf_counter()
    compiled = jax.jit(run).lower(params, jax.random.key(1)).compile()
    compile_s = time.perf_counter() - start
    times = []
    for repeat in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(params, jax.random.key(2 + repeat)))
        times.append(time.perf_counter() - start)
    return compile_s, times


def bench_python(module, config, env_id: str, steps: int, repeats: int):
    import envpool

    params = module.init(jax.random.key(0), config).params
    act = policy_fn(module, config)
    step_act = jax.jit(lambda params, obs, key: act(params, jnp.moveaxis(obs, 1, -1), key))
    pool = envpool.make(env_id, env_type="gymnasium", num_envs=config.num_envs, batch_size=config.num_envs, seed=0)
    obs, _ = pool.reset()
    start = time.perf_counter()
    jax.block_until_ready(step_act(params, obs, jax.random.key(0)))
    compile_s = time.perf_counter() - start
    times = []
    for repeat in range(repeats):
        keys = list(jax.random.split(jax.random.key(2 + repeat), steps))  # split outside the timed loop
        obs, _ = pool.reset()
        start = time.perf_counter()
        for t in range(steps):
            action = np.asarray(step_act(params, obs, keys[t]))
            obs, reward, terminated, truncated, info = pool.step(action)
        times.append(time.perf_counter() - start)
    pool.close()
    return compile_s, times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pong-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=128, help="steps per env per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--algorithms", default="ppo,dqn")
    parser.add_argument("--network", default="nature_cnn", help='"mlp" for vector observations (CartPole-v1)')
    args = parser.parse_args()
    rows = []
    for name, (module, config) in configs(args.env, args.num_envs, args.network).items():
        if name not in args.algorithms.split(","):
            continue
        for path in ("xla", "python"):
            if path == "xla":
                compile_s, times = bench_xla(module, config, args.steps, args.repeats)
            else:
                compile_s, times = bench_python(module, config, args.env, args.steps, args.repeats)
            rates = [args.num_envs * args.steps / t for t in times]
            rows.append((name, path, compile_s, np.median(rates), min(rates), max(rates)))
            print(f"{name} {path}: compile {compile_s:.1f}s, steps/s {np.round(rates, 0)}", flush=True)
    print()
    print(
        f"envpool {args.env}, {args.num_envs} envs x {args.steps} steps, {args.repeats} repeats; "
        f"jax {jax.__version__} on {jax.default_backend()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    print()
    print("| algorithm (network) | path | compile s | env steps/s (median) | min | max |")
    print("|---|---|---:|---:|---:|---:|")
    for name, path, compile_s, median, low, high in rows:
        print(f"| {name} ({args.network}) | {path} | {compile_s:.1f} | {median:,.0f} | {low:,.0f} | {high:,.0f} |")


if __name__ == "__main__":
    main()
