"""Time to solve CartPole-v1 with evolution strategies: jaxrl's ``es`` (OpenAI-ES)
against a loop written with evosax alone at the same population, network and ES
settings, and against jaxrl's PPO, all in this one process.

    python benchmarks/es_time_to_solve.py                 # 3 seeds each
    python benchmarks/es_time_to_solve.py --seeds 5 --max-seconds 300

"Solved": the mean return of 10 deterministic evaluation episodes of the current policy
(the search distribution's mean, for ES) reaches 475, checked after every chunk (ES: 2
generations; PPO: 10 iterations of 512 env steps). Each run is one seed, compiled once
per method (compile seconds shown apart; the first seed pays it, later seeds reuse the
compiled chunk). Time = compile + the chunks until solved, evaluation included.

The evosax loop: ``evosax.algorithms.Open_ES`` (mirrored sampling, centred ranks) with
Adam at the same learning rate and sigma, the same 4-16-2 tanh network, one episode per
member played as a ``lax.scan`` over the 500-step time limit (evosax's own examples'
form: no early exit), no observation normalisation, no weight decay.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl import envs, evaluation, loop
from jaxrl.algorithms import es, ppo

SOLVED = 475.0
POPULATION, HIDDEN, SIGMA, LEARNING_RATE = 32, (16,), 0.05, 0.03


def time_jaxrl(module, config, chunk: int, seed: int, max_seconds: float, compiled: dict):
    """Seconds (compile, run) until the program's evaluation reaches SOLVED, and the env steps."""
    program = module.program(config)
    key = jax.random.key(seed)
    init_key, run_key, eval_key = jax.random.split(key, 3)
    compile_seconds = 0.0
    if module.__name__ not in compiled:
        start = time.perf_counter()
        init = jax.jit(lambda k: program.init(k, ())).lower(init_key).compile()
        state = init(init_key)
        run = (
            jax.jit(lambda s, k, i: loop.iterate(program._replace(num_evals=0), s, k, i, chunk), donate_argnums=0)
            .lower(state, run_key, jnp.int32(0))
            .compile()
        )
        evaluate = jax.jit(program.evaluate).lower(state.params, eval_key).compile()
        compiled[module.__name__] = init, run, evaluate
        compile_seconds = time.perf_counter() - start
    init, run, evaluate = compiled[module.__name__]
    start = time.perf_counter()
    state = init(init_key)
    for index in range(0, program.num_iterations - chunk + 1, chunk):
        state, metrics = run(state, run_key, jnp.int32(index))
        solved = float(jnp.mean(evaluate(state.params, jax.random.fold_in(eval_key, index)).returns)) >= SOLVED
        if solved or time.perf_counter() - start > max_seconds:
            break
    return compile_seconds, time.perf_counter() - start, int(metrics["timesteps"][-1]), solved


def time_evosax(seed: int, max_seconds: float, compiled: dict):
    """The same search written with evosax, gymnax and flax only."""
    import flax.linen as nn
    from evosax.algorithms import Open_ES

    env, env_params = envs.make("CartPole-v1")
    max_steps = env_params.max_steps_in_episode

    class Policy(nn.Module):
        @nn.compact
        def __call__(self, obs):
            x = obs
            for size in HIDDEN:
                x = jnp.tanh(nn.Dense(size)(x))
            return nn.Dense(2)(x)

    policy = Policy()
    key = jax.random.key(seed)
    net_key, strategy_key, run_key, eval_key = jax.random.split(key, 4)
    params = policy.init(net_key, jnp.zeros((4,)))
    strategy = Open_ES(
        POPULATION,
        params,
        optimizer=optax.adam(LEARNING_RATE),
        std_schedule=optax.constant_schedule(SIGMA),
    )
    strategy_params = strategy.default_params

    def episode_return(member, key):
        reset_key, step_key = jax.random.split(key)
        obs, state = env.reset(reset_key, env_params)

        def body(carry, step_key):
            obs, state, total, running = carry
            action = jnp.argmax(policy.apply(member, obs))
            obs, state, reward, terminated, truncated, _ = env.step(step_key, state, action, env_params)
            total = total + jnp.where(running, reward, 0.0)
            return (obs, state, total, running & ~(terminated | truncated)), None

        carry = (obs, state, jnp.zeros(()), jnp.ones((), bool))
        (_, _, total, _), _ = jax.lax.scan(body, carry, jax.random.split(step_key, max_steps))
        return total

    def generation(state, key):
        ask_key, play_key, tell_key = jax.random.split(key, 3)
        population, state = strategy.ask(ask_key, state, strategy_params)
        episode_key = jax.random.split(play_key, 1)[0]  # common random numbers, as jaxrl's es
        fitness = jax.vmap(episode_return, in_axes=(0, None))(population, episode_key)
        state, _ = strategy.tell(tell_key, population, -fitness, state, strategy_params)  # evosax minimises
        return state, None

    def chunk(state, index):
        keys = jax.vmap(lambda i: jax.random.fold_in(run_key, i))(index + jnp.arange(2))
        return jax.lax.scan(generation, state, keys)[0]

    def evaluate(state, key):
        mean = strategy.get_mean(state)
        act = lambda p, obs, carry, k: (jnp.argmax(policy.apply(p, obs), axis=-1), carry)  # noqa: E731
        return jnp.mean(evaluation.evaluate(act, mean, env, key, 10, env_params).returns)

    compile_seconds = 0.0
    state = strategy.init(strategy_key, params, strategy_params)
    if "evosax" not in compiled:
        start = time.perf_counter()
        compiled["evosax"] = (
            jax.jit(chunk).lower(state, jnp.int32(0)).compile(),
            jax.jit(evaluate).lower(state, eval_key).compile(),
        )
        compile_seconds = time.perf_counter() - start
    run, evaluate_compiled = compiled["evosax"]
    start = time.perf_counter()
    generations = 0
    while True:
        state = run(state, jnp.int32(generations))
        generations += 2
        solved = float(evaluate_compiled(state, jax.random.fold_in(eval_key, generations))) >= SOLVED
        if solved or time.perf_counter() - start > max_seconds:
            break
    # A fixed-length scan: every member steps the whole time limit every generation.
    return compile_seconds, time.perf_counter() - start, generations * POPULATION * max_steps, solved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=300.0, help="give up on a seed after this long")
    args = parser.parse_args()
    es_config = es.Config(
        population_size=POPULATION,
        hidden_sizes=HIDDEN,
        sigma=SIGMA,
        learning_rate=LEARNING_RATE,
        total_timesteps=POPULATION * 500 * 200,
        num_evals=0,
        num_reports=0,
    )
    ppo_config = ppo.Config(env_id="CartPole-v1", num_evals=0, num_reports=0)
    limit = args.max_seconds
    methods = {
        "jaxrl es (openai_es)": lambda seed, compiled: time_jaxrl(es, es_config, 2, seed, limit, compiled),
        "evosax Open_ES loop": lambda seed, compiled: time_evosax(seed, limit, compiled),
        "jaxrl ppo (defaults)": lambda seed, compiled: time_jaxrl(ppo, ppo_config, 10, seed, limit, compiled),
    }
    print(f"CartPole-v1, solved = deterministic evaluation >= {SOLVED:g}; jax {jax.__version__}, {jax.devices()}")
    print(f"{'method':<24} {'compile s':>10} {'median run s':>13} {'median env steps':>17}  solved")
    for name, measure in methods.items():
        compiled: dict = {}
        results = [measure(seed, compiled) for seed in range(args.seeds)]
        compile_seconds = max(r[0] for r in results)
        runs = [r[1] for r in results]
        steps = [r[2] for r in results]
        solved = sum(r[3] for r in results)
        print(
            f"{name:<24} {compile_seconds:>10.1f} {statistics.median(runs):>13.2f} "
            f"{int(statistics.median(steps)):>17,}  {solved}/{args.seeds}   runs: {np.round(runs, 2).tolist()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
