"""AlphaZero self-play throughput on connect four: finished games per second of whole
training iterations (search, replay, updates), against the floor of the same self-play
moves with a fixed network (search and game steps only, no replay and no learning).

    python benchmarks/alphazero_selfplay.py [--simulations 32] [--games 64] [--iterations 20]

Compile time is measured apart from the steady state (the median of ``--repeats`` calls
of ``--iterations`` iterations each, after ``block_until_ready``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="pgx:connect_four")
    parser.add_argument("--simulations", type=int, default=32)
    parser.add_argument("--games", type=int, default=64)
    parser.add_argument("--steps", type=int, default=8, help="moves per game per iteration")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from jaxrl.algorithms import alphazero as az

    config = az.Config(
        env_id=args.env,
        num_games=args.games,
        num_steps=args.steps,
        num_simulations=args.simulations,
        total_timesteps=args.games * args.steps * args.iterations,
        hidden_sizes=(128, 128),
        num_updates=8,
        batch_size=256,
        buffer_size=20_000,
        random_move_prob=0.1,
    )

    def run(one_iteration):
        def many(state, key):
            def body(state, key):
                state, metrics = one_iteration(state, key, config)
                return state, metrics["games"]

            state, games = jax.lax.scan(body, state, jax.random.split(key, args.iterations))
            return state, jnp.sum(games)

        return jax.jit(many)

    state = jax.jit(az.init, static_argnums=1)(jax.random.key(0), config)
    rows = []
    for name, fn in (
        ("training iterations (self-play + replay + 8 updates)", az.step),
        ("floor: self-play only (search, game steps, replay writes), fixed network", az.self_play),
    ):
        compiled = run(fn)
        start = time.perf_counter()
        compiled = compiled.lower(state, jax.random.key(1)).compile()
        compile_s = time.perf_counter() - start
        times, games = [], 0
        for repeat in range(args.repeats):
            start = time.perf_counter()
            _, count = jax.block_until_ready(compiled(state, jax.random.key(2 + repeat)))
            times.append(time.perf_counter() - start)
            games = int(count)
        seconds = statistics.median(times)
        moves = args.games * args.steps * args.iterations
        rows.append((name, compile_s, seconds, games / seconds, moves / seconds))

    print(f"{args.env}, {args.games} games at once, {args.simulations} simulations per move, {jax.default_backend()}")
    print("| run | compile s | run s | games/s | moves/s |")
    print("|---|---|---|---|---|")
    for name, compile_s, seconds, games_per_s, moves_per_s in rows:
        print(f"| {name} | {compile_s:.1f} | {seconds:.2f} | {games_per_s:,.0f} | {moves_per_s:,.0f} |")
    print(f"training runs at {rows[0][3] / rows[1][3]:.2f}x the floor's games per second")


if __name__ == "__main__":
    main()
