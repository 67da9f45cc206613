"""Replay-buffer throughput: jaxrl's uniform and prioritized buffers, and flashbax's.

    python benchmarks/buffers.py                          # capacities 10k, 100k, 1M
    python benchmarks/buffers.py --quick                  # 10k and 100k, shorter timing
    python benchmarks/buffers.py --capacities 10000 100000 --markdown out.md

Measures items/s of ``add`` (``N = 8`` env transitions per call), ``sample`` (batch of
256) and, for prioritized buffers, the priority update (256 TD errors per call), at each
capacity, for two observation kinds:

* ``image``: 84x84 uint8 observations. Transitions carry no ``next_obs`` here (it would
  double the memory: 1M transitions of 84x84 bytes are already 7 GB);
* ``vector``: 4 float32 observations, with a ``next_obs`` of 4 float32.

Every transition also has ``action`` (int32), ``reward`` (float32), ``terminated`` and
``truncated`` (bool).

jaxrl: ``replay.add`` + ``replay.sample``; ``prioritized.add``, ``prioritized.sample``
(indices and normalised importance weights) and ``prioritized.update_priorities``.

flashbax (if installed; ``--no-peers`` to skip), device ``"cpu"``/``"gpu"`` as JAX's
default backend:

* ``fbx-item``: ``make_item_buffer(add_batches=True)``: the 8 transitions of a call are
  stored one after another, a sample is one transition, as jaxrl's;
* ``fbx-flat``: ``make_flat_buffer(add_batch_size=8)``: one time axis per env, a sample
  is a pair of consecutive transitions (``first``, ``second``), so it reads two
  transitions per sample (and gives ``next_obs`` for free);
* ``fbx-per-item`` / ``fbx-per-flat``: ``make_prioritised_item_buffer`` /
  ``make_prioritised_flat_buffer`` likewise (priority exponent 0.6); the priority update
  is ``set_priorities(state, indices, |td| + 1e-6)``, and the sample also computes the
  normalised importance weights from the returned probabilities (as jaxrl's does).

``bare-copy`` is no buffer: the same arrays, flat over all slots; its ``sample`` draws
256 uniform indices and gathers those rows of every leaf, its ``add`` writes 8 rows at a
rotating position. With image observations it is a ceiling: any buffer that returns
copies of the sampled transitions moves at least these bytes, and 84x84-byte rows from
a buffer far larger than the caches make that copy memory-bound. With 4-float
observations it is no ceiling (the cost there is in the ops, not the bytes, and jaxrl's
uniform buffer, which gathers from ``[rows, envs]`` arrays, can be faster).

The jaxrl/flashbax ratio (throughput of jaxrl over throughput of that flashbax buffer;
above 1 means jaxrl is faster) compares ``fbx-item`` and ``fbx-flat`` with jaxrl's uniform
buffer and the prioritized ones with jaxrl's prioritized buffer; on the ``bare-copy`` row
it is jaxrl's prioritized buffer's fraction of the bare copy.

Method: each (buffer, observation kind, capacity) runs in a fresh subprocess (so memory
is returned between cases, and a 1M image buffer is the only big one alive), with JAX's
persistent compilation cache off. The buffer is created (``init s``, until the arrays
are ready) and then marked full (every slot counts as written; prioritized buffers get
random priorities), so sampling always sees the full capacity. Each operation is a
``jax.jit``-compiled ``lax.scan`` of ``--iterations`` calls (the buffer state is donated
to the add and update loops, so they update it in place; sampling carries the sampled
batch through the loop so it is not optimised away); its compile time (lower + compile)
is reported separately. The compiled loop is called once to warm up, then timed
``--runs`` times, each run repeating it until ``--min-time`` seconds have passed; the table
reports the fastest run. Indices and TD errors of the priority update are drawn before the
loop (``[iterations, 256]``, uniform over the slots) and fed to it as scan inputs.

A measurement that fails, times out (``--timeout``) or hangs is reported in the table
instead of stopping the benchmark.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from _harness import (
    add_common_arguments,
    measure_and_emit,
    measure_in_child,
    measure_plan,
    peer_missing,
    phase,
    report,
)

NUM_ENVS = 8
SAMPLE_BATCH = 256
ALPHA = 0.6
BETA = 0.4
EPS = 1e-6

JAXRL_IMPLS = ("jaxrl", "jaxrl-per")
BARE = "bare-copy"  # no buffer: the copying any sampler must do (see the module docstring)
FBX_IMPLS = ("fbx-item", "fbx-flat", "fbx-per-item", "fbx-per-flat")
PRIORITIZED = ("jaxrl-per", "fbx-per-item", "fbx-per-flat")
COUNTERPART = {
    "fbx-item": "jaxrl",
    "fbx-flat": "jaxrl",
    "fbx-per-item": "jaxrl-per",
    "fbx-per-flat": "jaxrl-per",
    BARE: "jaxrl-per",
}
OBS_KINDS = ("image", "vector")


# ============================================================================ child


def _example(obs_kind):
    import numpy as np

    if obs_kind == "image":
        obs = {"obs": np.zeros((84, 84), np.uint8)}
    else:
        obs = {"obs": np.zeros(4, np.float32), "next_obs": np.zeros(4, np.float32)}
    return dict(
        obs,
        action=np.zeros((), np.int32),
        reward=np.zeros((), np.float32),
        terminated=np.zeros((), bool),
        truncated=np.zeros((), bool),
    )


def _items(jax, example):
    """N random transitions, leaves [N, ...]."""
    import numpy as np

    rng = np.random.default_rng(0)

    def one(x):
        shape = (NUM_ENVS,) + x.shape
        if x.dtype == np.uint8:
            return rng.integers(0, 256, shape).astype(np.uint8)
        if x.dtype == bool:
            return rng.random(shape) < 0.01
        return rng.normal(size=shape).astype(x.dtype)

    return jax.device_put(jax.tree.map(one, example))


class Ops:
    """One buffer's functions with a common signature:

    * ``init() -> state`` (the library's own, empty; timed as ``init s``);
    * ``fill(state) -> state``: marked full, as if every slot had been written (not timed);
    * ``add(state, items) -> state``;
    * ``sample(state, key) -> batch`` (a pytree; prioritized: incl. indices and weights);
    * ``update(state, slots [B], td [B]) -> state`` (prioritized only); ``num_slots``.
    """


def _jaxrl_ops(jax, impl, example, capacity):
    import jax.numpy as jnp
    import numpy as np

    from jaxrl.buffers import prioritized, replay, sumtree

    ops = Ops()
    if impl == "jaxrl":
        ops.init = lambda: replay.init(example, capacity, NUM_ENVS)
        ops.fill = lambda state: state.replace(size=jnp.asarray(state.num_rows, jnp.int32))
        ops.add = replay.add
        ops.sample = lambda state, key: replay.sample(state, key, SAMPLE_BATCH)
        ops.num_slots = replay.num_rows_for(capacity, NUM_ENVS) * NUM_ENVS
        return ops

    num_slots = replay.num_rows_for(capacity, NUM_ENVS) * NUM_ENVS

    def fill(state):
        replay_state = state.replay.replace(size=jnp.asarray(state.replay.num_rows, jnp.int32))
        priorities = np.random.default_rng(1).uniform(0.1, 2.0, num_slots).astype(np.float32)
        tree = jax.jit(sumtree.update)(state.tree, jnp.arange(num_slots, dtype=jnp.int32), priorities)
        return state.replace(replay=replay_state, tree=tree, max_priority=jnp.float32(priorities.max()))

    def update(state, slots, td):
        index = replay.Index(slots // NUM_ENVS, slots % NUM_ENVS)
        return prioritized.update_priorities(state, index, td, ALPHA, EPS)

    ops.init = lambda: prioritized.init(example, capacity, NUM_ENVS)
    ops.fill = fill
    ops.add = prioritized.add
    ops.sample = lambda state, key: prioritized.sample(state, key, SAMPLE_BATCH, BETA)
    ops.update = update
    ops.num_slots = num_slots
    return ops


def _bare_ops(jax, example, capacity):
    import jax.numpy as jnp

    from jaxrl.buffers import replay

    num_slots = replay.num_rows_for(capacity, NUM_ENVS) * NUM_ENVS  # a multiple of NUM_ENVS
    ops = Ops()
    ops.init = lambda: (jax.tree.map(lambda x: jnp.zeros((num_slots,) + x.shape, x.dtype), example), jnp.int32(0))
    ops.fill = lambda state: state

    def add(state, items):
        arrays, position = state
        arrays = jax.tree.map(lambda a, x: jax.lax.dynamic_update_slice_in_dim(a, x, position, 0), arrays, items)
        return arrays, (position + NUM_ENVS) % num_slots

    def sample(state, key):
        index = jax.random.randint(key, (SAMPLE_BATCH,), 0, num_slots)
        return jax.tree.map(lambda a: a[index], state[0])

    ops.add, ops.sample, ops.num_slots = add, sample, num_slots
    return ops


def _fbx_ops(jax, impl, example, capacity):
    import flashbax as fbx
    import jax.numpy as jnp
    import numpy as np
    from flashbax.buffers import sum_tree

    device = jax.default_backend() if jax.default_backend() in ("cpu", "gpu", "tpu") else "cpu"
    common = dict(max_length=capacity, min_length=1, sample_batch_size=SAMPLE_BATCH)
    if impl == "fbx-item":
        buffer = fbx.make_item_buffer(**common, add_batches=True)
    elif impl == "fbx-flat":
        buffer = fbx.make_flat_buffer(**common, add_batch_size=NUM_ENVS)
    elif impl == "fbx-per-item":
        buffer = fbx.make_prioritised_item_buffer(**common, add_batches=True, priority_exponent=ALPHA, device=device)
    else:
        buffer = fbx.make_prioritised_flat_buffer(
            **common, add_batch_size=NUM_ENVS, priority_exponent=ALPHA, device=device
        )
    prioritised = impl in PRIORITIZED

    def fill(state):
        lanes, length = jax.tree.leaves(state.experience)[0].shape[:2]
        state = state.replace(is_full=jnp.ones_like(state.is_full), current_index=jnp.zeros_like(state.current_index))
        if prioritised:
            state = state.replace(running_index=jnp.full_like(state.running_index, length))
            num_items = state.sum_tree_state.capacity
            priorities = np.random.default_rng(1).uniform(0.1, 2.0, num_items).astype(np.float32)
            # One bulk write of every leaf (flashbax's own batched setter; not timed).
            tree = jax.jit(sum_tree.set_batch_bincount)(
                state.sum_tree_state, jnp.arange(num_items), jnp.asarray(priorities) ** ALPHA
            )
            state = state.replace(sum_tree_state=tree)
        return state

    ops = Ops()
    ops.init = lambda: buffer.init(example)
    ops.fill = fill
    ops.add = buffer.add
    probe = jax.eval_shape(ops.init)
    ops.num_slots = (
        probe.sum_tree_state.capacity if prioritised else math.prod(jax.tree.leaves(probe.experience)[0].shape[:2])
    )
    if not prioritised:
        ops.sample = lambda state, key: buffer.sample(state, key).experience
        return ops

    num_items = ops.num_slots

    def sample(state, key):
        out = buffer.sample(state, key)
        weights = (num_items * out.probabilities) ** -BETA
        return out.experience, out.indices, weights / jnp.max(weights)

    ops.sample = sample
    ops.update = lambda state, slots, td: buffer.set_priorities(state, slots, jnp.abs(td) + EPS)
    return ops


def _timed_loop(jax, name, fn, args, donate, iterations, args_):
    """Compile ``fn`` (a scan of ``iterations`` steps) and time it; returns a dict."""
    phase(f"{name}: lowering + compiling")
    t0 = time.perf_counter()
    lowered = jax.jit(fn, donate_argnums=(0,) if donate else ()).lower(*args)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0

    def call(args):
        out = jax.block_until_ready(compiled(*args))
        if donate:  # the state came back (first output); feed it to the next call
            args = (out[0],) + tuple(args[1:])
        return out, args

    phase(f"{name}: warm-up (compiled in {compile_s:.1f} s)")
    out, args = call(args)
    run_times, run_calls = [], []
    for run in range(args_.runs):
        phase(f"{name}: run {run + 1} of {args_.runs}")
        calls, start = 0, time.perf_counter()
        while True:
            out, args = call(args)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= args_.min_time:
                break
        run_times.append(elapsed / (calls * iterations))
        run_calls.append(calls)
    return dict(compile_s=compile_s, seconds_per_iter=run_times, calls=run_calls), args[0] if donate else None


def measure(jax, impl, obs_kind, capacity, args_):
    import jax.numpy as jnp
    import numpy as np

    example = _example(obs_kind)
    if impl == BARE:
        ops = _bare_ops(jax, example, capacity)
    else:
        ops = (_jaxrl_ops if impl.startswith("jaxrl") else _fbx_ops)(jax, impl, example, capacity)
    result = dict(num_slots=ops.num_slots)
    iterations = args_.iterations

    phase("init")
    start = time.perf_counter()
    state = jax.block_until_ready(ops.init())
    result["init_s"] = time.perf_counter() - start
    phase("marking the buffer full")
    state = jax.block_until_ready(ops.fill(state))
    result["state_bytes"] = sum(x.nbytes for x in jax.tree.leaves(state))

    items = _items(jax, example)
    batch_shape = jax.eval_shape(ops.sample, state, jax.random.key(0))

    def sample_loop(state, key):
        def body(carry, _):
            key, _ = carry
            key, sub = jax.random.split(key)
            return (key, ops.sample(state, sub)), None

        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), batch_shape)
        (key, batch), _ = jax.lax.scan(body, (key, zeros), None, length=iterations)
        return batch

    def add_loop(state, items):
        def body(state, _):
            return ops.add(state, items), None

        state, _ = jax.lax.scan(body, state, None, length=iterations)
        return (state,)

    # Sample first (the state is not changed), then add and update (state donated).
    result["sample"], _ = _timed_loop(jax, "sample", sample_loop, (state, jax.random.key(0)), False, iterations, args_)
    result["add"], state = _timed_loop(jax, "add", add_loop, (state, items), True, iterations, args_)
    if hasattr(ops, "update"):
        rng = np.random.default_rng(2)
        slots = jnp.asarray(rng.integers(0, ops.num_slots, (iterations, SAMPLE_BATCH)), jnp.int32)
        td = jnp.asarray(rng.standard_cauchy((iterations, SAMPLE_BATCH)), jnp.float32)

        def update_loop(state, slots, td):
            def body(state, xs):
                return ops.update(state, *xs), None

            state, _ = jax.lax.scan(body, state, (slots, td))
            return (state,)

        result["update"], state = _timed_loop(jax, "update", update_loop, (state, slots, td), True, iterations, args_)
    return result


def child_main(args):
    impl, obs_kind, capacity = args.one[0], args.one[1], int(args.one[2])
    measure_and_emit(
        {"impl": impl, "obs": obs_kind, "capacity": capacity},
        lambda jax: measure(jax, impl, obs_kind, capacity, args),
        packages=("flashbax",) if impl.startswith("fbx") else (),
    )


# ============================================================================ parent


def _measure(args, impl, obs_kind, capacity):
    return measure_in_child(
        __file__, {"impl": impl, "obs": obs_kind, "capacity": capacity}, args, ("iterations", "runs", "min_time")
    )


def _derive(results):
    for r in results:
        if "error" in r:
            continue
        for op, per_call in (("add", NUM_ENVS), ("sample", SAMPLE_BATCH), ("update", SAMPLE_BATCH)):
            if op in r:
                r[op]["best_s"] = min(r[op]["seconds_per_iter"])
                r[op]["items_per_s"] = per_call / r[op]["best_s"]
    by_key = {(r["impl"], r["obs"], r["capacity"]): r for r in results}
    for r in results:
        peer = by_key.get((COUNTERPART.get(r["impl"]), r["obs"], r["capacity"]))
        if peer is None or "error" in peer or "error" in r:
            continue
        r["ratio"] = {
            op: peer[op]["items_per_s"] / r[op]["items_per_s"]
            for op in ("add", "sample", "update")
            if op in r and op in peer
        }


HEADERS = [
    "buffer",
    "obs",
    "capacity",
    "init s",
    "compile s (add/sample/update)",
    "add items/s",
    "sample items/s",
    "update items/s",
    "jaxrl/this add",
    "jaxrl/this sample",
    "jaxrl/this update",
]


def _si(x):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _rows(results):
    rows = []
    for r in results:
        cap = f"{r['capacity']:,}"
        if "error" in r:
            rows.append([r["impl"], r["obs"], cap, "-", "failed", "-", "-", "-", "-", "-", "-"])
            continue
        ops = [op for op in ("add", "sample", "update") if op in r]
        compile_s = "/".join(f"{r[op]['compile_s']:.2f}" for op in ops)
        ratio = r.get("ratio", {})
        rows.append(
            [
                r["impl"],
                r["obs"],
                cap,
                f"{r['init_s']:.2f}",
                compile_s,
                *(_si(r[op]["items_per_s"]) if op in r else "-" for op in ("add", "sample", "update")),
                *(f"{ratio[op]:.2f}x" if op in ratio else "-" for op in ("add", "sample", "update")),
            ]
        )
    return rows


def _notes(args, peer_note):
    return ([peer_note] if peer_note else []) + [
        f"add: {NUM_ENVS} transitions per call; sample: batch {SAMPLE_BATCH}; update: {SAMPLE_BATCH} TD errors per "
        f"call; items/s = items per call / seconds per call, the fastest of {args.runs} runs, each >= "
        f"{args.min_time} s of calls of a jitted lax.scan of {args.iterations} iterations",
        "image: obs 84x84 uint8, no next_obs (memory); vector: obs and next_obs 4 float32; "
        "plus action int32, reward float32, terminated/truncated bool",
        "fbx-flat / fbx-per-flat samples are pairs of consecutive transitions (2 transitions read per item)",
        "jaxrl/this: jaxrl's items/s over this buffer's (jaxrl uniform for fbx-item/flat, jaxrl-per for fbx-per-* "
        "and bare-copy); > 1: jaxrl faster",
        f"{BARE}: no buffer: sample = 256 uniform random indices + a gather of those rows of every leaf; add = 8 "
        "rows written at a rotating position; a ceiling for image observations (the copy is memory-bound), not for "
        "vector ones",
    ]


def parent_main(args):
    peer_note = peer_missing("flashbax", args.no_peers)
    impls = [*JAXRL_IMPLS, BARE] + ([] if peer_note else [i for i in FBX_IMPLS if i.split("-")[-1] in args.fbx_layouts])
    plan = [(impl, obs, cap) for cap in args.capacities for obs in args.obs for impl in impls]
    results = measure_plan(
        plan, lambda item: _measure(args, *item), label=lambda item: f"{item[0]} {item[1]} {item[2]:,}"
    )
    _derive(results)
    title = (
        f"Replay-buffer throughput, {NUM_ENVS} envs per add, sample batch {SAMPLE_BATCH}, "
        f"capacities {', '.join(f'{c:,}' for c in args.capacities)}"
    )
    errors = [f"error: {r['impl']} {r['obs']} {r['capacity']:,}: {r['error']}" for r in results if "error" in r]
    report(title, HEADERS, _rows(results), errors + _notes(args, peer_note), results, args.markdown, left=(0, 1))
    return 0 if any(r["impl"].startswith("jaxrl") and "error" not in r for r in results) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--capacities",
        type=int,
        nargs="+",
        default=None,
        help="buffer capacities (default: 10000 100000 1000000; --quick: 10000 100000)",
    )
    parser.add_argument(
        "--obs", nargs="+", choices=OBS_KINDS, default=list(OBS_KINDS), help="observation kinds (default: both)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="capacities 10k and 100k (unless --capacities), 1 run of >= 0.2 s per operation",
    )
    parser.add_argument("--no-peers", action="store_true", help="measure jaxrl only, even if flashbax is installed")
    parser.add_argument(
        "--fbx-layouts",
        nargs="+",
        choices=("item", "flat"),
        default=["item", "flat"],
        help="flashbax buffers to measure (default: item flat)",
    )
    parser.add_argument(
        "--iterations", type=int, default=None, help="operations per jitted lax.scan call (default: 500, --quick: 200)"
    )
    parser.add_argument("--runs", type=int, default=None, help="timed runs per operation (default: 3, --quick: 1)")
    parser.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="seconds each timed run lasts at least (default: 1.0, --quick: 0.2)",
    )
    add_common_arguments(parser, ("IMPL", "OBS", "CAPACITY"), runs=False, timeout=900, stall_timeout=120)
    args = parser.parse_args(argv)
    quick = args.quick
    if args.capacities is None:
        args.capacities = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000]
    args.iterations = args.iterations or (200 if quick else 500)
    args.runs = args.runs or (1 if quick else 3)
    args.min_time = args.min_time if args.min_time is not None else (0.2 if quick else 1.0)
    if min(args.capacities) < 2 * max(NUM_ENVS, SAMPLE_BATCH):
        parser.error(f"capacities must be at least {2 * max(NUM_ENVS, SAMPLE_BATCH)} (flashbax's limits)")
    if args.one:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
