"""How a learning test's budget was chosen: one run over many seeds, evaluated along the
way, each seed's return at each evaluation.

Where nothing in the config depends on the run's length (no schedule over
``total_timesteps``), the evaluation after N steps of a longer run is the last one of an
N-step run, so one run shows every shorter budget. The config is the command line's
(``--set`` as for ``python -m jaxrl train``), without the algorithm's preset::

    python benchmarks/investigations/budget_trials.py sac --env Pendulum-v1 \\
        --total-timesteps 20000 --set num_evals=20 --set num_reports=0 --key 42 --seeds 8 \\
        --threshold -250

prints a row per evaluation: its step, each seed's mean return, and how many seeds reach
the threshold.
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from jaxrl.algorithms import get
from jaxrl.workflow import cli


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key", type=int, default=0, help="seeds are jax.random.split(jax.random.key(KEY), SEEDS)")
    parser.add_argument("--threshold", type=float, required=True, help="the test's threshold on the return")
    ours, rest = parser.parse_known_args(argv)
    args = cli.build_parser().parse_args(["train", *rest, "--no-preset"])
    record = get(args.algorithm)
    config = cli.make_config(record, args)
    keys = jax.random.split(jax.random.key(ours.key), args.seeds)
    out = jax.jit(jax.vmap(record.train, in_axes=(0, None)))(keys, config)
    returns = np.asarray(out.metrics["eval_return"])  # (seeds, iterations), NaN between evaluations
    steps = np.asarray(out.metrics["timesteps"])[0]
    evaluated = ~np.isnan(returns[0])
    for step, row in zip(steps[evaluated], returns[:, evaluated].T):
        reached = int((row >= ours.threshold).sum())
        print(f"{int(step):>10}  " + " ".join(f"{r:8.1f}" for r in row) + f"   {reached}/{len(row)}")


if __name__ == "__main__":
    main(sys.argv[1:])
