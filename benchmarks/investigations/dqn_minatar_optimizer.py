"""DQN's MinAtar preset on one game with the MinAtar paper's optimiser in place of Adam:
RMSProp as its code runs it (PyTorch's ``RMSprop``: centered, squared-gradient decay
0.95, ``eps`` 0.01 added outside the square root, no gradient clipping), the preset's
learning rate of 2.5e-4. The learning table's row (``benchmarks/learning_table.py dqn
--envs GAME``: its Config, 4 seeds from base seed 0); prints each seed's greedy return at every
evaluation, its final one and its behaviour policy's return over the run's last tenth,
to set beside the row's.

    python benchmarks/investigations/dqn_minatar_optimizer.py [Freeway-MinAtar]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import numpy as np
import optax

from jaxrl.algorithms import dqn


def paper_rmsprop(config) -> optax.GradientTransformation:
    return optax.inject_hyperparams(optax.rmsprop)(
        learning_rate=config.learning_rate, decay=0.95, eps=0.01, eps_in_sqrt=False, centered=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_id", nargs="?", default="Freeway-MinAtar", help="a MinAtar game (default: %(default)s)")
    args = parser.parse_args()
    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))
    from learning_table import ROWS, config_for  # noqa: PLC0415

    dqn.make_optimizer = paper_rmsprop  # DQN's update and init read it from the module
    _, config = config_for(next(row for row in ROWS if row.algorithm == "dqn" and row.env_id == args.env_id))
    keys = jax.random.split(jax.random.key(0), 4)
    start = time.perf_counter()
    out = jax.block_until_ready(jax.jit(jax.vmap(dqn.train, in_axes=(0, None)), static_argnums=1)(keys, config))
    evals = np.asarray(out.metrics["eval_return"])
    evals = evals[:, ~np.isnan(evals[0])]
    episodes = np.asarray(out.metrics["episode_return"])
    last = episodes[:, -max(1, episodes.shape[1] // 10) :]  # as learning_table.py keeps it
    print(
        json.dumps(
            dict(
                env_id=args.env_id,
                run_s=round(time.perf_counter() - start, 1),
                final=[round(float(x), 2) for x in evals[:, -1]],
                training=[round(float(np.nanmean(seed)), 2) for seed in last],
                eval_returns=np.round(evals, 2).tolist(),
            )
        )
    )


if __name__ == "__main__":
    main()
