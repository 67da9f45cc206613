"""Compile and run times of three small training programs under one set of XLA flags:
the probe behind the suite's choice of XLA:CPU's elemental emitters
(benchmarks/RESULTS.md, "The test suite with XLA:CPU's elemental emitters").

Each setting runs in a fresh process, since XLA reads its flags once:

    JAX_DISABLE_MOST_OPTIMIZATIONS=1 python benchmarks/investigations/emitter_compile_times.py
    JAX_DISABLE_MOST_OPTIMIZATIONS=1 XLA_FLAGS=--xla_cpu_use_fusion_emitters=false \\
        python benchmarks/investigations/emitter_compile_times.py

(and both again without ``JAX_DISABLE_MOST_OPTIMIZATIONS`` for XLA's default level)."""

import time

import jax

from jaxrl.algorithms import dqn, ppo, sac

PROGRAMS = {
    "ppo": (ppo, dict(env_id="CartPole-v1", total_timesteps=2048, num_envs=4, num_steps=32)),
    "dqn": (dqn, dict(env_id="CartPole-v1", total_timesteps=4000)),
    "sac": (sac, dict(env_id="Pendulum-v1", total_timesteps=1200)),
}


def main() -> None:
    times = []
    for name, (algorithm, fields) in PROGRAMS.items():
        config = algorithm.Config(**fields, hidden_sizes=(32, 32), num_reports=0)
        key = jax.random.key(0)
        lowered = jax.jit(algorithm.train, static_argnums=1).lower(key, config)
        start = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(compiled(key))
        times.append(f"{name} compile {compile_s:.2f} s run {time.perf_counter() - start:.2f} s")
    print(" | ".join(times))


if __name__ == "__main__":
    main()
