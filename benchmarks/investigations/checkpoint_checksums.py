"""What checksumming a checkpoint costs: save and restore times of a state of a given
size with jaxrl's Checkpoints, beside the SHA-256 of its files alone.

    python benchmarks/investigations/checkpoint_checksums.py --megabytes 64 256 1024
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import jax.numpy as jnp
import numpy as np

from jaxrl.workflow import checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| state | save (s) | of which checksums (s) | restore (s) | of which verify (s) |")
    print("| --- | --- | --- | --- | --- |")
    for megabytes in args.megabytes:
        state = {"buffer": jnp.asarray(np.random.default_rng(0).random(megabytes << 18, dtype=np.float32))}
        saves, sums, restores, verifies = [], [], [], []
        for _ in range(args.repeats):
            directory = tempfile.mkdtemp()
            with checkpoint.Checkpoints(os.path.join(directory, "c")) as checkpoints:
                start = time.perf_counter()
                checkpoints.save(1, state, meta={})
                saves.append(time.perf_counter() - start)
                start = time.perf_counter()
                checkpoints._write_checksums(1)  # again, alone
                sums.append(time.perf_counter() - start)
                start = time.perf_counter()
                checkpoints.restore(state)
                restores.append(time.perf_counter() - start)
                start = time.perf_counter()
                checkpoints.verify(1)
                verifies.append(time.perf_counter() - start)
            shutil.rmtree(directory)
        best = lambda times: f"{min(times):.2f}"  # noqa: E731
        print(f"| {megabytes} MB | {best(saves)} | {best(sums)} | {best(restores)} | {best(verifies)} |")


if __name__ == "__main__":
    main()
