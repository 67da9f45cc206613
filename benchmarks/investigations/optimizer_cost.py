"""What PPO's optimiser costs at the ``ppo-gru`` benchmark's settings: jaxrl's GRU PPO
timed as it is (global-norm clipping then Adam, 16 minibatch updates an iteration), with
two cheaper ways to run the same optimiser (Adam on one flat vector of every parameter,
``optax.flatten``; the learning-rate schedule as a plain schedule instead of
``optax.inject_hyperparams``), and with the optimiser swapped for a plain SGD step like
the floor row's; evaluations off in all. The SGD difference is the part of the gap
between jaxrl and the floor that the optimiser takes; with SGD, the rest of PPO
(sampling, losses, GAE, shuffles) is what remains.

    python benchmarks/investigations/optimizer_cost.py
"""

import sys
import time

import jax
import jax.numpy as jnp
import optax

from jaxrl.algorithms import onpolicy, ppo

STEPS = 102_400


def time_per_iteration(config) -> float:
    """Milliseconds per iteration of ``jit(vmap(ppo.train))`` at 1 seed, fastest of 3."""
    train = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))
    keys = jax.random.split(jax.random.key(0), 1)
    compiled = train.lower(keys, config).compile()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(keys, config))
        times.append(time.perf_counter() - start)
    return 1000 * min(times) / config.num_iterations


def main() -> int:
    config = ppo.Config(
        total_timesteps=STEPS,
        num_envs=4,
        num_steps=128,
        hidden_sizes=(128,),
        memory="gru",
        memory_size=128,
        activation="relu",
        num_evals=0,
        num_reports=0,
    )
    make_optimizer = onpolicy.make_optimizer
    adam = time_per_iteration(config)
    onpolicy.make_optimizer = lambda config, updates: optax.flatten(make_optimizer(config, updates))
    flat = time_per_iteration(config)
    # The learning-rate metric reads inject_hyperparams' state: report 0 for the variants without it.
    onpolicy.current_learning_rate = lambda opt_state: 0.0

    def scheduled(config, updates):
        num_updates = config.num_iterations * updates
        learning_rate = lambda count: config.learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)
        return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(learning_rate, eps=1e-5))

    onpolicy.make_optimizer = scheduled
    schedule = time_per_iteration(config)
    onpolicy.make_optimizer = lambda config, updates: optax.sgd(1e-6)  # the floor's step: no clipping, no moments
    sgd = time_per_iteration(config)
    print(
        f"GRU PPO, {STEPS:,} steps, 1 seed, ms per iteration: clip + Adam {adam:.2f}, the same on a flat vector "
        f"{flat:.2f}, with a plain schedule {schedule:.2f}, SGD {sgd:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
