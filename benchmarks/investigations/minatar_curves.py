"""jaxrl's PPO learning curves on the MinAtar games beside gymnax-blines' own runs.

gymnax-blines (RobertTLange/gymnax-blines at 3f029d6) published one PPO run per game at
the settings jaxrl's MinAtar preset copies (``agents/<game>-MinAtar/ppo.pkl``: the
network and the run's log, ``log_steps`` / ``log_return``: the mean return of sampled
episodes every 320,000 env steps). ``benchmarks/learning_table.py`` holds their curves as
data (``BLINES_LOG_RETURNS``), read with::

    git -C gymnax-blines show 3f029d6:agents/Breakout-MinAtar/ppo.pkl > ppo.pkl
    python -c "import pickle; d = pickle.load(open('ppo.pkl', 'rb')); print(d['log_steps'], d['log_return'])"

This script reads the raw results of ``benchmarks/learning_table.py ppo --envs
<game>-MinAtar --markdown FILE`` (greedy returns of 32 episodes at 20 points per seed)
and prints, at each of those points, their run's return (linear between their log's
points) beside jaxrl's seeds: the IQM, the lowest and the highest.

    python benchmarks/investigations/minatar_curves.py FILE.md [FILE.md ...]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
from learning_table import BLINES_LOG_RETURNS, BLINES_LOG_STEPS, iqm, load_results  # noqa: E402


def curve_table(result: dict) -> str:
    returns = np.asarray(result["eval_returns"], np.float64)  # [seeds, points]
    game = result["env_id"].removesuffix("-MinAtar")
    theirs = np.interp(result["eval_steps"], BLINES_LOG_STEPS, BLINES_LOG_RETURNS[game])
    lines = [
        f"{result['algorithm']} on {result['env_id']}, {returns.shape[0]} seeds from {result['seed']}:",
        "",
        "| env steps | gymnax-blines (1 run, sampled) | jaxrl greedy: IQM | lowest seed | highest seed |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for k, step in enumerate(result["eval_steps"]):
        column = returns[:, k]
        lines.append(f"| {step:,} | {theirs[k]:.1f} | {iqm(column):.1f} | {column.min():.1f} | {column.max():.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="learning_table.py --markdown files")
    args = parser.parse_args()
    for path in args.files:
        for result in load_results(path):
            if result.get("env_id", "").removesuffix("-MinAtar") in BLINES_LOG_RETURNS and "eval_returns" in result:
                print(curve_table(result), end="\n\n")


if __name__ == "__main__":
    main()
