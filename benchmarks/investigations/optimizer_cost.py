"""What PPO's optimiser step costs per iteration at the ``ppo-gru`` benchmark's settings
(global-norm clipping then Adam on the GRU actor-critic's parameters, 16 minibatch updates
an iteration), against the floor row's plain SGD step on the same parameters: the part of
the gap between jaxrl and the floor that any PPO with Adam pays.

    python benchmarks/investigations/optimizer_cost.py
"""

import time

import jax
import jax.numpy as jnp
import optax

from jaxrl import onpolicy
from jaxrl.algorithms import ppo

ITERATIONS, UPDATES = 976, 16  # 500k steps of 4 envs x 128; 4 epochs x 4 minibatches


def main():
    config = ppo.Config(
        num_envs=4, num_steps=128, hidden_sizes=(128,), memory="gru", memory_size=128, activation="relu"
    )
    state = ppo.init(jax.random.key(0), config)
    params = state.params["network"]
    grads = jax.tree.map(lambda x: 1e-3 * jnp.ones_like(x), params)
    optimizer = onpolicy.make_optimizer(config, UPDATES)

    def adam(carry, _):
        params, opt_state = carry
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def sgd(params, _):
        return jax.tree.map(lambda p, g: p - 1e-6 * g, params, grads), None

    def run(step, carry):
        iteration = lambda carry, _: (jax.lax.scan(step, carry, None, length=UPDATES)[0], None)
        return jax.lax.scan(iteration, carry, None, length=ITERATIONS)[0]

    count = sum(x.size for x in jax.tree.leaves(params))
    print(
        f"{count:,} parameters in {len(jax.tree.leaves(params))} arrays, {ITERATIONS} iterations of {UPDATES} updates"
    )
    for name, step, carry in (("clip + Adam", adam, (params, state.opt_state)), ("SGD", sgd, params)):
        compiled = jax.jit(lambda carry, step=step: run(step, carry)).lower(carry).compile()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            jax.block_until_ready(compiled(carry))
            times.append(time.perf_counter() - start)
        print(f"{name:>12}: {1000 * min(times) / ITERATIONS:.2f} ms per iteration (fastest of 3)")


if __name__ == "__main__":
    main()
