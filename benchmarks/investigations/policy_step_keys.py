"""What a host actor's policy step costs on a CPU, by the PRNG its key uses: one compiled
call of a 64x64 MLP on 4 CartPole observations, then epsilon-greedy (a split, a uniform
and a randint) or a categorical sample (a fold_in and Gumbel noise), answered to NumPy,
as ``jaxrl.workflow.actor_learner``'s host actors call it once per env step.

    python benchmarks/investigations/policy_step_keys.py
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np


def main() -> None:
    w1, w2, w3 = jnp.ones((4, 64)), jnp.ones((64, 64)), jnp.ones((64, 2))
    obs = jax.device_put(np.ones((4, 4), np.float32))

    def q_values(x):
        return jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3

    @jax.jit
    def greedy(x):
        return jnp.argmax(q_values(x), -1)

    @jax.jit
    def epsilon_greedy(x, key):
        explore_key, action_key = jax.random.split(key)
        random_action = jax.random.randint(action_key, (4,), 0, 2)
        explore = jax.random.uniform(explore_key, (4,)) < 0.1
        return jnp.where(explore, random_action, jnp.argmax(q_values(x), -1))

    @jax.jit
    def categorical(x, key):
        return jax.random.categorical(jax.random.fold_in(key, 3), q_values(x))

    def microseconds(fn, calls=2000):
        fn()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1e6

    print(f"{'greedy, no randomness':>40}: {microseconds(lambda: np.asarray(greedy(obs))):6.1f} us")
    for impl in ("threefry2x32", "rbg", "unsafe_rbg"):
        key = jax.random.key(0, impl=impl)
        for name, fn in (("epsilon-greedy", epsilon_greedy), ("categorical", categorical)):
            cost = microseconds(lambda fn=fn, key=key: np.asarray(fn(obs, key)))
            print(f"{f'{name}, {impl} key':>40}: {cost:6.1f} us")


if __name__ == "__main__":
    main()
