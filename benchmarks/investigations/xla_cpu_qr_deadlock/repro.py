"""XLA:CPU deadlock on batched QR factorisations (pure JAX, no jaxrl).

    python repro.py [CALLS] [SEEDS]
    INIT=gram_schmidt python repro.py       # the same weights without a LAPACK call

Orthogonal initialisation of an actor and a critic MLP (six weight matrices), vmapped
over SEEDS seeds and jitted, called CALLS times. Under ``vmap`` each initialisation is
a batched ``jnp.linalg.qr`` (LAPACK ``sgeqrf`` through XLA's FFI). Each call is watched
by a thread: if it has not finished after 30 s, the script prints ``DEADLOCK`` with the
process id, waits ``HOLD`` seconds (default 0; attach ``gdb -p PID -batch -ex "thread
apply all bt"`` meanwhile to see the stacks) and exits with status 3. Exit 0 means every
call finished.
"""

import os
import sys
import threading
import time

import jax
import jax.numpy as jnp

LAYERS = [(4, 64), (64, 64), (64, 2), (4, 64), (64, 64), (64, 1)]  # actor, then critic


def gram_schmidt_orthogonal(scale):
    """Haar-orthogonal rows or columns from matrix-vector products only."""

    def init(key, shape, dtype=jnp.float32):
        rows, columns = shape
        matrix = jax.random.normal(key, (max(shape), min(shape)), dtype)

        def orthonormalize(k, q):
            column = matrix[:, k]
            column = column - q @ (q.T @ column)
            column = column - q @ (q.T @ column)
            return q.at[:, k].set(column / jnp.linalg.norm(column))

        q = jax.lax.fori_loop(0, matrix.shape[1], orthonormalize, jnp.zeros_like(matrix))
        return scale * (q if rows >= columns else q.T)

    return init


def initial_weights(key):
    if os.environ.get("INIT") == "gram_schmidt":
        init = gram_schmidt_orthogonal(jnp.sqrt(2.0))
    else:
        init = jax.nn.initializers.orthogonal(jnp.sqrt(2.0))
    return [init(k, shape) for k, shape in zip(jax.random.split(key, len(LAYERS)), LAYERS)]


def main(calls: int, seeds: int) -> int:
    batched = jax.jit(jax.vmap(initial_weights))
    print(f"jax {jax.__version__}, {os.cpu_count()} cpus, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", flush=True)
    for call in range(calls):
        finished = threading.Event()

        def run(call=call):
            jax.block_until_ready(batched(jax.random.split(jax.random.key(call), seeds)))
            finished.set()

        threading.Thread(target=run, daemon=True).start()
        if not finished.wait(30):
            print(f"DEADLOCK in call {call + 1} (pid {os.getpid()})", flush=True)
            time.sleep(float(os.environ.get("HOLD", 0)))
            os._exit(3)  # the stuck call's thread cannot be joined
    print(f"{calls} calls finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300, int(sys.argv[2]) if len(sys.argv) > 2 else 4))
