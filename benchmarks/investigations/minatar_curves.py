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
points) beside jaxrl's seeds: the IQM, the lowest and the highest; one table for the rows
evaluated at the same points.

    python benchmarks/investigations/minatar_curves.py FILE.md [FILE.md ...] [--every 2]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
from learning_table import BLINES_LOG_RETURNS, BLINES_LOG_STEPS, iqm, load_results  # noqa: E402


def curve_table(results: list[dict], every: int) -> str:
    """One table for rows evaluated at the same points: per row, gymnax-blines' run and
    jaxrl's seeds (IQM [lowest, highest]) at every ``every``-th point, the last included."""
    steps = results[0]["eval_steps"]
    games = [result["env_id"].removesuffix("-MinAtar") for result in results]
    header, rule = ["env steps"], ["---:"]
    for game in games:
        header += [f"{game}: gymnax-blines", f"{game}: jaxrl IQM [lowest, highest]"]
        rule += ["---:", "---"]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    for k in range(len(steps) - 1, -1, -every)[::-1]:
        cells = [f"{steps[k]:,}"]
        for game, result in zip(games, results, strict=True):
            column = np.asarray(result["eval_returns"], np.float64)[:, k]
            theirs = np.interp(steps[k], BLINES_LOG_STEPS, BLINES_LOG_RETURNS[game])
            cells += [f"{theirs:.1f}", f"{iqm(column):.1f} [{column.min():.1f}, {column.max():.1f}]"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="learning_table.py --markdown files")
    parser.add_argument("--every", type=int, default=1, help="show every n-th evaluation (default: %(default)s)")
    args = parser.parse_args()
    by_points = {}  # rows evaluated at the same steps share a table
    for path in args.files:
        for result in load_results(path):
            if result.get("env_id", "").removesuffix("-MinAtar") in BLINES_LOG_RETURNS and "eval_returns" in result:
                by_points.setdefault(tuple(result["eval_steps"]), []).append(result)
    for results in by_points.values():
        print(curve_table(results, args.every), end="\n\n")


if __name__ == "__main__":
    main()
