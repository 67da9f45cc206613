"""jaxrl's PPO learning curves on the MinAtar games beside gymnax-blines' own runs.

gymnax-blines (RobertTLange/gymnax-blines at 3f029d6) published one PPO run per game at
the settings jaxrl's MinAtar preset copies (``agents/<game>-MinAtar/ppo.pkl``: the
network and the run's log, ``log_steps`` / ``log_return``: the mean return of sampled
episodes every 320,000 env steps). Their curves are below as data, read with::

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
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
from learning_table import iqm  # noqa: E402

LOG_STEPS = [319_936 + 320_000 * k for k in range(31)]  # every run's log
BLINES_RETURNS = {
    "Asterix-MinAtar": [
        1.36, 1.62, 1.8, 2.14, 2.55, 2.76, 3.45, 4.67, 5.38, 7.21, 6.68, 7.0, 8.64, 7.65, 8.08, 7.65,
        8.54, 9.99, 11.26, 9.72, 10.48, 12.51, 12.38, 11.49, 11.46, 13.77, 12.74, 13.34, 14.83, 15.37, 14.95,
    ],
    "Breakout-MinAtar": [
        8.37, 15.45, 16.63, 15.71, 16.02, 15.42, 16.29, 16.23, 15.63, 15.54, 14.91, 16.54, 17.9, 21.63, 21.97,
        21.95, 22.51, 22.72, 23.02, 22.55, 22.99, 22.12, 22.87, 22.91, 23.34, 20.7, 23.04, 23.46, 23.46, 20.07, 22.88,
    ],
    "Freeway-MinAtar": [
        24.69, 28.16, 29.04, 30.25, 32.8, 36.16, 38.32, 40.33, 43.18, 43.77, 46.99, 48.57, 49.6, 50.78, 52.09,
        51.23, 53.98, 54.64, 54.52, 54.49, 54.41, 55.73, 55.28, 56.45, 57.04, 57.54, 57.86, 57.4, 57.51, 58.27, 58.8,
    ],
    "SpaceInvaders-MinAtar": [
        19.4, 30.37, 50.38, 58.38, 71.53, 84.32, 87.51, 89.55, 94.06, 90.36, 88.91, 92.37, 99.55, 97.34, 99.87,
        92.71, 105.68, 112.76, 122.37, 118.57, 125.35, 126.55, 125.74, 123.34, 126.72, 120.77, 126.03, 127.53,
        130.36, 136.54, 131.64,
    ],
}  # fmt: skip


def raw_results(path: str) -> list[dict]:
    """The raw results a learning-table ``--markdown`` file ends with."""
    text = open(path).read()
    return json.loads(text[text.index("```json") + len("```json") : text.rindex("```")])


def curve_table(result: dict) -> str:
    returns = np.asarray(result["eval_returns"], np.float64)  # [seeds, points]
    theirs = np.interp(result["eval_steps"], LOG_STEPS, BLINES_RETURNS[result["env_id"]])
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
        for result in raw_results(path):
            if result.get("env_id") in BLINES_RETURNS and "eval_returns" in result:
                print(curve_table(result), end="\n\n")


if __name__ == "__main__":
    main()
