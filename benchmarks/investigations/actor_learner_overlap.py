"""What overlapping an actor and the learner can give on this machine: one actor's
blocks and the learner's compiled ``learn`` on one block, each alone and then at the
same time in two threads, with the CPU cores each uses (process CPU seconds over wall
seconds). Where each side alone already keeps more than one core busy (XLA's threads
beside the actor's Python loop), two cores cannot run both at full speed.

    python benchmarks/investigations/actor_learner_overlap.py apex
    python benchmarks/investigations/actor_learner_overlap.py impala --env-id gymnasium:CartPole-v1
    python benchmarks/investigations/actor_learner_overlap.py appo
"""

from __future__ import annotations

import argparse
import functools
import resource
import threading
import time


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("algorithm", choices=("impala", "appo", "apex"))
    parser.add_argument("--env-id", default="gymnasium:CartPole-v1")
    parser.add_argument("--blocks", type=int, default=100, help="blocks each side makes or learns from")
    args = parser.parse_args()

    import jax

    from jaxrl import algorithms
    from jaxrl.workflow import actor_learner

    record = algorithms.get(args.algorithm)
    parts = record.actor_learner
    config = parts.prepare(record.Config(env_id=args.env_id))
    steps = args.blocks * parts.block_steps(config)
    state = jax.jit(functools.partial(parts.learner_init, config=config))(jax.random.key(0))
    params = jax.jit(parts.published)(state)
    actor = actor_learner.ActorPrograms(parts, config, 1).actor(0, jax.devices()[0], jax.random.key(1))
    block = jax.block_until_ready(actor.block(params, 0))
    learn = jax.jit(functools.partial(parts.learn, config=config), donate_argnums=0)
    # Twice at least (the second call's state is the first's output), and for Ape-X past
    # learning_starts, so that every timed call makes its updates.
    warm_up = -(-getattr(config, "learning_starts", 0) // parts.block_steps(config)) + 2
    for i in range(warm_up):
        state, _ = learn(state, block, jax.random.key(i))
    holder = {"state": jax.block_until_ready(state)}

    def act(rates):
        start = time.perf_counter()
        for i in range(args.blocks):
            jax.block_until_ready(actor.block(params, i))
        rates["actor"] = steps / (time.perf_counter() - start)

    def learner(rates):
        start = time.perf_counter()
        for i in range(args.blocks):  # one block at a time, as the decoupled learner takes them
            holder["state"], _ = learn(holder["state"], block, jax.random.key(i))
            jax.block_until_ready(holder["state"])
        rates["learner"] = steps / (time.perf_counter() - start)

    alone = {}
    for side in (act, learner):
        cpu, wall = cpu_seconds(), time.perf_counter()
        side(alone)
        print(
            f"{side.__name__:>8} alone: {alone[{'act': 'actor'}.get(side.__name__, 'learner')]:>9,.0f} env steps/s, "
            f"{(cpu_seconds() - cpu) / (time.perf_counter() - wall):.2f} cores"
        )
    together = {}
    cpu, wall = cpu_seconds(), time.perf_counter()
    threads = [threading.Thread(target=side, args=(together,)) for side in (act, learner)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cores = (cpu_seconds() - cpu) / (time.perf_counter() - wall)
    share = together["actor"] / alone["actor"] + together["learner"] / alone["learner"]
    print(
        f"together: actor {together['actor']:,.0f}, learner {together['learner']:,.0f} env steps/s, {cores:.2f} cores; "
        f"each at {together['actor'] / alone['actor']:.0%} and {together['learner'] / alone['learner']:.0%} of "
        f"its speed alone: {share:.2f}x the work of one side at a time"
    )
    actor.close()


if __name__ == "__main__":
    main()
