"""How the asynchronous learning tests' thresholds were chosen: runs with two actors apart
from the learner (``jaxrl.workflow.actor_learner.run``), one per seed, each stopping when
its evaluation reaches the threshold, as tests/test_actor_learner.py's runs do. Such runs
are not reproducible (which params a block used depends on timing), so a threshold holds
only as often as these trials say.

    python benchmarks/investigations/actor_learner_trials.py apex --steps 80000 --threshold 200 --runs 12
    python benchmarks/investigations/actor_learner_trials.py appo --steps 100000 --threshold 450 --runs 8
    python benchmarks/investigations/actor_learner_trials.py impala --steps 100000 --threshold 200 --central

prints each run's best evaluation, its env steps when it stopped and its largest policy
lag, then how many runs reached the threshold.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from jaxrl import algorithms
from jaxrl.workflow import actor_learner


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algorithm", choices=("impala", "appo", "apex"))
    parser.add_argument("--env-id", default="gymnasium:CartPole-v1")
    parser.add_argument("--steps", type=int, required=True, help="the run's total_timesteps")
    parser.add_argument("--threshold", type=float, required=True, help="the test's threshold on the evaluation")
    parser.add_argument("--runs", type=int, default=8, help="seeds 0, 1, ... (default: %(default)s)")
    parser.add_argument("--actors", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--central", action="store_true", help="central inference (ActorOptions.central_inference)")
    args = parser.parse_args(argv)
    config = algorithms.get(args.algorithm).Config(env_id=args.env_id, total_timesteps=args.steps)
    options = actor_learner.ActorOptions(actors=args.actors, central_inference=args.central)
    best = []
    for seed in range(args.runs):
        start = time.perf_counter()
        result = actor_learner.run(args.algorithm, config, actors=options, seed=seed, target=args.threshold)
        best.append(float(np.nanmax(result.metrics["eval_return"])))
        print(
            f"seed {seed}: best evaluation {best[-1]:.1f} after {int(result.metrics['timesteps'][0, -1]):,} env "
            f"steps, largest policy lag {result.lags.max()}, {time.perf_counter() - start:.1f} s",
            flush=True,
        )
    reached = sum(b >= args.threshold for b in best)
    print(f"{args.algorithm}, {args.steps:,} env steps: {reached} of {args.runs} runs reached {args.threshold:g}")


if __name__ == "__main__":
    main()
