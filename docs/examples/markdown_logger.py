"""A logger for the runner: a Markdown table of a few metrics, the mean over seeds,
one line per metrics row."""

import os

import numpy as np

from jaxrl.algorithms import ppo
from jaxrl.workflow import runner
from jaxrl.workflow.logging import seed_mean
from jaxrl.workflow.options import RunOptions


class MarkdownLogger:
    """Appends the rows of each chunk to a Markdown table at ``path``.

    The runner calls ``write(iterations [R], values {name: [seeds, R]})`` after every
    chunk, ``truncate(iteration, step)`` when a run resumes from a checkpoint (rows after
    ``iteration`` were computed again, so they go), and ``close()`` at the end.
    """

    def __init__(self, path: str, metrics=("timesteps", "episode_return", "eval_return")):
        self.path = path
        self.metrics = tuple(metrics)

    def write(self, iterations: np.ndarray, values: dict) -> None:
        new = not os.path.exists(self.path)
        with open(self.path, "a") as f:
            if new:
                f.write("| iteration | " + " | ".join(self.metrics) + " |\n")
                f.write("|---" * (len(self.metrics) + 1) + "|\n")
            for row, iteration in enumerate(iterations):
                cells = [self._cell(values.get(name), row) for name in self.metrics]
                f.write(f"| {int(iteration)} | " + " | ".join(cells) + " |\n")

    def truncate(self, iteration: int, step: int) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            lines = f.readlines()
        header, rows = lines[:2], lines[2:]
        kept = [line for line in rows if int(line.split("|")[1]) <= iteration]
        with open(self.path, "w") as f:
            f.writelines(header + kept)

    def close(self) -> None:
        pass

    @staticmethod
    def _cell(column, row: int) -> str:
        if column is None:
            return ""
        value = seed_mean(column)[row]  # NaN where no seed had a value (no evaluation at this row)
        return "" if np.isnan(value) else f"{value:.1f}"


def train_with_logger(logdir: str):
    """Two seeds of a short PPO run, logged to ``<logdir>/metrics.md`` beside the CSV."""
    config = ppo.Config(env_id="CartPole-v1", num_envs=4, num_steps=16, total_timesteps=4 * 16 * 8, num_evals=2)
    logger = MarkdownLogger(f"{logdir}/metrics.md")
    return runner.run("ppo", config, seeds=2, chunk_iterations=4, options=RunOptions(logdir, ("csv", logger)))
