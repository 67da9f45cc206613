"""Return at equal wall-clock time: PQN, DQN and PPO on one env, each given the same
seconds of training on this machine (PQN's claim, Gallici et al., 2024: much faster to a
given return than DQN with replay, and as fast as PPO).

    python benchmarks/equal_time.py                                   # Breakout-MinAtar, 300 s, 2 seeds
    python benchmarks/equal_time.py --seconds 60 --seeds 1 --algorithms pqn ppo
    python benchmarks/equal_time.py --env CartPole-v1 --seconds 30

Each algorithm runs at its preset for the env (DQN's on MinAtar: the MinAtar paper's,
Young & Tian 2019, on the MinAtar CNN) with ``SETTINGS`` over it. A budget only
means something with the schedules that go with it (epsilon, learning-rate annealing),
so each algorithm gets the env steps it can take in ``--seconds``: a probe run of
``--probe-steps`` env steps (no evaluation, learning from the first iteration on)
measures its steady-state steps/s (compile apart),
then a fresh run trains ``steps/s * seconds`` env steps per seed (whole iterations)
through :func:`jaxrl.workflow.runner.run`, its seeds vmapped. The table gives each run's
env steps, compile and run seconds and the final greedy evaluation (mean and per seed).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import fmt  # noqa: E402

# Per env: {algorithm: Config fields over its preset}.
SETTINGS = {
    "Breakout-MinAtar": {"pqn": {}, "ppo": {}, "dqn": {}},
    "CartPole-v1": {"pqn": {}, "ppo": {}, "dqn": {}},
}
EXPLORATION_STEPS = 100_000  # DQN's MinAtar preset anneals epsilon over these env steps


def config_for(algorithm: str, env_id: str, total_timesteps: int, probe: bool = False):
    """The algorithm's Config for ``total_timesteps``; a ``probe`` (steady-state speed)
    evaluates never and learns from its first iteration on."""
    from jaxrl import algorithms
    from jaxrl.exploration import EpsilonGreedy

    record = algorithms.get(algorithm)
    fields = dict(SETTINGS[env_id][algorithm])
    if algorithm == "dqn" and env_id.endswith("MinAtar"):
        fields["exploration"] = EpsilonGreedy(end=0.1, fraction=min(1.0, EXPLORATION_STEPS / total_timesteps))
    config = record.preset(env_id, total_timesteps=total_timesteps, num_reports=0, num_evals=4, eval_episodes=16)
    config = config.replace(**fields)
    if probe:
        config = config.replace(num_evals=0)
        if hasattr(config, "learning_starts"):  # replay: one iteration of random steps, then updates
            config = config.replace(learning_starts=max(config.batch_size, steps_per_iteration(config)))
    return config


def steps_per_iteration(config) -> int:
    return config.num_envs * config.num_steps


def train(algorithm: str, env_id: str, total_timesteps: int, seeds: int, probe: bool = False):
    from jaxrl.workflow import runner
    from jaxrl.workflow.options import RunOptions

    config = config_for(algorithm, env_id, total_timesteps, probe)
    iterations = config.num_iterations
    result = runner.run(
        algorithm,
        config,
        seeds=seeds,
        chunk_iterations=max(1, math.gcd(iterations, max(1, iterations // 4))),
        options=RunOptions(progress=False),
    )
    return config, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Breakout-MinAtar", choices=sorted(SETTINGS))
    parser.add_argument("--algorithms", nargs="+", default=["pqn", "dqn", "ppo"])
    parser.add_argument("--seconds", type=float, default=300.0, help="training seconds each algorithm gets")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--probe-steps", type=int, default=20_000, help="env steps per seed of each speed probe")
    args = parser.parse_args(argv)

    import numpy as np

    rows = []
    for algorithm in args.algorithms:
        per_iteration = steps_per_iteration(config_for(algorithm, args.env, 10**9))
        probe_steps = max(2, -(-args.probe_steps // per_iteration)) * per_iteration
        _, probed = train(algorithm, args.env, probe_steps, args.seeds, probe=True)
        rate = probed.completed * per_iteration / probed.run_seconds  # env steps/s per seed
        budget = int(rate * args.seconds) // per_iteration * per_iteration
        print(f"{algorithm}: probe {rate:,.0f} env steps/s per seed -> {budget:,} steps", flush=True)
        start = time.perf_counter()
        config, result = train(algorithm, args.env, budget, args.seeds)
        wall = time.perf_counter() - start
        final = np.asarray(result.metrics["eval_return"])
        final = np.array([row[np.isfinite(row)][-1] for row in final])
        rows.append((algorithm, budget, result.compile_seconds, result.run_seconds, wall, final))
        print(f"{algorithm}: {budget:,} steps, run {result.run_seconds:.0f} s, final {np.round(final, 1)}", flush=True)

    print(f"\n{args.env}, {args.seconds:.0f} s of training each, {args.seeds} seeds (vmapped)\n")
    print("| algorithm | env steps per seed | compile s | run s | wall s | final eval return (mean) | per seed |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for algorithm, budget, compile_s, run_s, wall, final in rows:
        per_seed = ", ".join(f"{x:.1f}" for x in final)
        cells = [algorithm, f"{budget:,}", fmt(compile_s, ".1f"), f"{run_s:.0f}", f"{wall:.0f}", f"{final.mean():.1f}"]
        print("| " + " | ".join(cells + [per_seed]) + " |")
    print(f"\ncommand: python benchmarks/equal_time.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
