"""SAC and PPO with gSDE (``sde=GSDE(...)``) on gymnax's MountainCarContinuous-v0, at
rl-baselines3-zoo's settings for the task translated to our Config fields, several seeds
vmapped in one program; prints each seed's deterministic evaluation returns over the run.

    PYTHONPATH=. python benchmarks/investigations/gsde_mountaincar.py sac ppo --seeds 4
    PYTHONPATH=. python benchmarks/investigations/gsde_mountaincar.py sac --set sde.sample_freq=0

The zoo's ``hyperparams/sac.yml`` and ``ppo.yml`` (MountainCarContinuous-v0 entries),
field by field, as ``sac.preset`` and ``ppo.preset`` hold them for the task (PPO's preset
then anneals the learning rate and runs 300k steps, which ``SETTINGS`` undoes here):

* SAC: ``learning_rate``, ``buffer_size``, ``batch_size``, ``gamma``, ``tau``,
  ``learning_starts`` as given; ``ent_coef: 0.1`` is a fixed temperature
  (``autotune=False, alpha=0.1``); ``train_freq: 32, gradient_steps: 32`` with one env is
  ``num_steps=32, num_updates=32``; ``net_arch=[64, 64]`` is ``hidden_sizes``;
  ``log_std_init`` is ``sde.log_std_init``. Stable-Baselines3 draws the noise matrix at
  each rollout's start (every ``train_freq`` steps, its ``sde_sample_freq=-1``), so
  ``sde.sample_freq=32`` here.
* PPO: ``normalize: true`` (observations and rewards) is ``normalize_observations`` and
  ``scale_rewards``; ``n_envs: 1, n_steps: 8`` is ``num_envs, num_steps``; a
  ``batch_size`` larger than the 8-step rollout makes one minibatch
  (``num_minibatches=1``); ``n_epochs``, ``gamma``, ``learning_rate`` (constant:
  ``anneal_lr=False``), ``ent_coef``, ``clip_range`` (``clip_eps``), ``gae_lambda``,
  ``max_grad_norm``, ``vf_coef`` as given; no value clipping (``clip_range_vf`` unset);
  Stable-Baselines3's default 64x64 tanh network; ``log_std_init`` is
  ``sde.log_std_init``, and the matrix is drawn at each 8-step rollout's start
  (``sde.sample_freq=8``). ``ortho_init=False`` has no counterpart (our layers start
  orthogonal).
"""

from __future__ import annotations

import argparse
import ast
import time

import jax
import numpy as np

from jaxrl.algorithms import ppo, sac
from jaxrl.config import replace_paths

ENV = "MountainCarContinuous-v0"
EVAL = dict(num_evals=10, eval_episodes=10, num_reports=0)

# SAC's preset is the zoo's settings; PPO's anneals the learning rate and runs 300k steps,
# so these two overrides give the zoo's settings back.
SETTINGS = {"sac": {}, "ppo": dict(anneal_lr=False, total_timesteps=20_000)}
MODULES = {"sac": sac, "ppo": ppo}


def run(name: str, seeds: int, overrides: dict) -> None:
    config = replace_paths(MODULES[name].preset(ENV, **SETTINGS[name], **EVAL), overrides)
    train = jax.jit(jax.vmap(MODULES[name].train, in_axes=(0, None)), static_argnums=1)
    keys = jax.random.split(jax.random.key(0), seeds)
    start = time.perf_counter()
    compiled = train.lower(keys, config).compile()
    compile_time = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    run_time = time.perf_counter() - start
    evals = np.asarray(out.metrics["eval_return"])  # [seeds, iterations], NaN between evaluations
    steps = np.asarray(out.metrics["timesteps"])[0]
    at = ~np.isnan(evals[0])
    print(f"{name} {overrides or ''}: compile {compile_time:.0f} s, run {run_time:.0f} s")
    print("  evaluated at steps", steps[at].tolist())
    for seed, returns in enumerate(evals[:, at]):
        print(f"  seed {seed}: " + " ".join(f"{r:7.1f}" for r in returns))
    final = evals[:, at][:, -1]
    print(f"  final: mean {final.mean():.1f}, per seed {np.round(final, 1).tolist()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algorithms", nargs="+", choices=sorted(SETTINGS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument(
        "--set", action="append", default=[], help="FIELD=VALUE overrides (Python literals; a part's field by its path)"
    )
    args = parser.parse_args()
    overrides = {}
    for item in args.set:
        field, value = item.split("=", 1)
        overrides[field] = ast.literal_eval(value)
    for name in args.algorithms:
        run(name, args.seeds, overrides)


if __name__ == "__main__":
    main()
