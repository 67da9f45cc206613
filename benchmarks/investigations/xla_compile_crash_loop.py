"""Compile many distinct jaxrl programs in one process, as a test worker does, until
XLA:CPU crashes or the time is up (issue 40's segfault in ``backend_compile_and_load``).
Each program differs in a static field, so each is a fresh compile (nothing runs).

    gdb -q -batch -ex run -ex "thread apply all bt 25" \\
        --args python benchmarks/investigations/xla_compile_crash_loop.py SECONDS SEED

Two at once (seeds 1 and 2) load both cores as the suite's two workers do; under gdb a
crash leaves every thread's native stack in the log.
"""

import faulthandler
import random
import sys
import time

import jax

from jaxrl import algorithms

faulthandler.enable()

seconds, seed = float(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
small = dict(total_timesteps=4096, num_evals=2, num_reports=0)
makers = {
    "ppo": lambda r, w: r.Config(
        num_envs=2 + w % 5, num_steps=8, num_minibatches=1, num_epochs=1, hidden_sizes=(8 + w,), **small
    ),
    "ppo-gru": lambda r, w: r.Config(
        num_envs=2 + w % 5, num_steps=8, num_minibatches=1, num_epochs=1, hidden_sizes=(8 + w,), memory="gru", **small
    ),
    "dqn": lambda r, w: r.Config(
        num_envs=2, num_steps=2, hidden_sizes=(8 + w,), buffer_size=256, batch_size=8, learning_starts=16, **small
    ),
    "sac": lambda r, w: r.Config(
        env_id="Pendulum-v1",
        num_envs=2,
        hidden_sizes=(8 + w,),
        buffer_size=256,
        batch_size=8,
        learning_starts=16,
        **small,
    ),
    "r2d2": lambda r, w: r.Config(hidden_sizes=(8 + w,), memory_size=4 + w % 3, **small),
}
start, count = time.time(), 0
while time.time() - start < seconds:
    name = rng.choice(list(makers))
    record = algorithms.get(name.split("-")[0])
    config = makers[name](record, rng.randrange(1, 400))
    keys = jax.random.split(jax.random.key(count), 2)
    jax.jit(jax.vmap(record.train, in_axes=(0, None))).lower(keys, config).compile()
    count += 1
    if count % 10 == 0:
        jax.clear_caches()
        print(f"{count} compiles, {time.time() - start:.0f} s", flush=True)
print("done", count, "compiles without a crash", flush=True)
