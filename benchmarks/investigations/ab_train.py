"""Time one algorithm at a README benchmark setting, for A/B comparisons of jaxrl trees.

    PYTHONPATH=TREE python benchmarks/investigations/ab_train.py ALGO SEEDS STEPS [RUNS]

``ALGO``: an entry of ``benchmarks/throughput.py`` (``ppo``, ``dqn``, ``sac``, ``td3`` ...:
its settings, ``STEPS`` env steps per seed), ``rainbow`` (``dqn.rainbow("CartPole-v1")``)
``bridge`` (PPO's defaults on ``gymnasium:CartPole-v1``, no evaluation) or
``cell:NAME`` (a cell of ``benchmarks/time_to_solve.py``, e.g. ``cell:cartpole-dqn``). ``TREE`` is the jaxrl checkout to
time (e.g. a ``git worktree`` of another commit). Compiles ``jit(vmap(train))`` over
``SEEDS`` seeds once, runs it ``RUNS`` times (default 3) and prints the compile time and
the fastest run. Alternate trees run after run: this machine's speed drifts by several
percent over minutes.
"""

import importlib
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def make_config(name: str, steps: int):
    from jaxrl.algorithms import dqn, ppo

    if name == "bridge":
        return ppo, ppo.Config(env_id="gymnasium:CartPole-v1", total_timesteps=steps, num_evals=0, num_reports=0)
    if name.startswith("cell:"):
        import time_to_solve

        cell = time_to_solve.CELLS[name.removeprefix("cell:")]
        config = cell.config().replace(total_timesteps=steps)
        return importlib.import_module(f"jaxrl.algorithms.{cell.algorithm}"), config
    if name == "rainbow":
        return dqn, dqn.rainbow("CartPole-v1", total_timesteps=steps, num_reports=0)
    import throughput

    module, config = throughput.jaxrl_config(throughput.ENTRIES[name], quick=False)
    return module, config.replace(total_timesteps=steps)


def main(name: str, seeds: int, steps: int, runs: int) -> None:
    module, config = make_config(name, steps)
    keys = jax.random.split(jax.random.key(0), seeds)
    train = jax.jit(jax.vmap(module.train, in_axes=(0, None)))
    start = time.perf_counter()
    compiled = train.lower(keys, config).compile()
    compile_s = time.perf_counter() - start
    times = []
    for run in range(runs):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(jax.random.split(jax.random.key(run), seeds), config))
        times.append(time.perf_counter() - start)
    returns = np.asarray(out.metrics["eval_return"])
    final = np.nanmean([row[np.isfinite(row)][-1] for row in returns]) if np.isfinite(returns).any() else np.nan
    print(
        f"{name} seeds={seeds} steps={steps} compile={compile_s:.2f}s fastest={min(times):.3f}s "
        f"steps/s={seeds * steps / min(times):,.0f} runs={' '.join(f'{t:.2f}' for t in times)} "
        f"final_eval={final:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 3)
