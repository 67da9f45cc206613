"""Hashes of the StableHLO that ``jax.jit(jax.vmap(train))`` lowers to, per algorithm and
seed count: two source trees that print the same hashes compile the same programs, so
their throughput cannot differ. Run it once per tree and compare the lines::

    PYTHONPATH=OLD_TREE python benchmarks/investigations/program_hashes.py > old.txt
    PYTHONPATH=.        python benchmarks/investigations/program_hashes.py > new.txt
    diff old.txt new.txt
"""

import hashlib
import sys

import jax

from jaxrl import algorithms

ENTRIES = {"ppo": "CartPole-v1", "sac": "Pendulum-v1", "dqn": "CartPole-v1", "td3": "Pendulum-v1"}


def main(names: list[str]) -> None:
    for name in names or list(ENTRIES):
        record = algorithms.get(name)
        config = record.Config(env_id=ENTRIES[name])
        for seeds in (1, 8):
            keys = jax.random.split(jax.random.key(0), seeds)
            text = jax.jit(jax.vmap(record.train, in_axes=(0, None))).lower(keys, config).as_text()
            print(f"{name:5s} seeds={seeds} {hashlib.sha256(text.encode()).hexdigest()[:16]} {len(text):>8d} chars")


if __name__ == "__main__":
    main(sys.argv[1:])
