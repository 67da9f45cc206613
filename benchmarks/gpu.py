"""Training throughput on a GPU: PPO, DQN and SAC at GPU-sized settings beside rejax,
with floor rows and compile times, in one unattended command.

On a bare machine with an NVIDIA GPU, from a clone of this repository (the one line this
script needs; it installs nothing itself)::

    pip install -e ".[peers]" && pip install "jax[cuda13]==$(python -c 'import jax; print(jax.__version__)')"
    python benchmarks/gpu.py                    # sized for at most 8 minutes on an H100-class GPU

(``jax[cuda12]`` for CUDA 12 drivers; the pinned version keeps jax and its CUDA plugin in
step with the jax that jaxrl's install brought.) It writes ``benchmarks/results/gpu.md``
(``--markdown`` to choose) with the device's name. ``python benchmarks/gpu.py --quick``
runs the same code on the CPU at tiny budgets, in one process, in under a minute: the
test suite runs it. The budgets are estimates from CPU timings: as of 2026-12-05 the
command has not yet run on a GPU (RESULTS.md says when it has).

The entries (``ENTRIES``) are ``throughput.py``'s, scaled to a GPU: PPO on CartPole-v1
with 2,048 envs, PPO on Breakout-MinAtar with the MinAtar CNN and 1,024 envs, DQN on
CartPole-v1 with 128 envs and batches of 1,024, SAC on Pendulum-v1 with 64 envs and
batches of 1,024. Rows and columns as in ``throughput.py``: ``jaxrl``, ``rejax`` (where
rejax has the algorithm and is installed; it has no CNN agent for MinAtar) and ``floor``
(the env steps and network passes alone), one seed each; compile s is tracing, lowering
and compiling, run s the fastest of ``--runs`` runs of the compiled program.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from _harness import (
    add_common_arguments,
    derive_timing,
    machine_info,
    measure_in_child,
    measure_plan,
    peer_missing,
    report,
)
from throughput import ENTRIES as CPU_ENTRIES
from throughput import FLOORS, HEADERS, emit_one, ratios, row, run_floor, run_jaxrl, run_peer

DEFAULT_MARKDOWN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gpu.md")


def scaled(name: str, title: str, budget: int, quick: int, config: dict, peer_config: dict | None = None, **fields):
    """``throughput.py``'s entry ``name`` with ``config`` (and ``peer_config``) fields
    replaced: the same algorithm, its settings at a GPU's scale."""
    entry = CPU_ENTRIES[name]
    return dataclasses.replace(
        entry,
        title=title,
        budget=budget,
        quick=quick,
        config={**entry.config, **config},
        peer_config={**entry.peer_config, **(peer_config or {})},
        **fields,
    )


ENTRIES = {
    # PureJaxRL's CartPole PPO at 2,048 envs x 16 steps, minibatches of 4,096.
    "ppo-2048-envs": scaled(
        "ppo",
        "PPO on CartPole-v1 at PureJaxRL's settings with 2,048 envs x 16 steps, 8 minibatches",
        budget=2048 * 16 * 300,
        quick=2048 * 16 * 2,
        config=dict(num_envs=2048, num_steps=16, num_minibatches=8),
        peer_config=dict(num_envs=2048, num_steps=16, num_minibatches=8),
    ),
    "ppo-minatar": scaled(
        "ppo",
        "PPO on Breakout-MinAtar with the MinAtar CNN, 1,024 envs x 64 steps, 8 minibatches",
        budget=1024 * 64 * 60,
        quick=1024 * 64 * 2,
        config=dict(
            network="cnn", hidden_sizes=(256,), activation="relu", num_envs=1024, num_steps=64, num_minibatches=8
        ),
        env_id="Breakout-MinAtar",
        peer=None,
        notes=("no rejax row: rejax 0.1.3 has no convolutional agent.",),
    ),
    "dqn-128-envs": scaled(
        "dqn",
        "DQN on CartPole-v1 at rejax's CartPole settings with 128 envs, 4 updates of 1,024 per iteration",
        budget=2_000_000,
        quick=10_112 + 2 * 128,
        # learning_starts: rejax's (fill_buffer // num_envs + 1) * num_envs random steps.
        config=dict(
            num_envs=128,
            num_updates=4,
            batch_size=1024,
            buffer_size=500_000,
            learning_starts=10_112,
            target_update_period=4,
        ),
        peer_config=dict(num_envs=128, num_epochs=4, batch_size=1024, buffer_size=500_000, fill_buffer=10_000),
    ),
    "sac-64-envs": scaled(
        "sac",
        "SAC on Pendulum-v1 at rejax's Pendulum settings with 64 envs, batches of 1,024",
        budget=1_000_000,
        quick=1_024 + 2 * 64,
        config=dict(num_envs=64, batch_size=1024, buffer_size=500_000, learning_starts=1_024),
        peer_config=dict(num_envs=64, batch_size=1024, buffer_size=500_000, fill_buffer=1_024),
    ),
}


# --quick on a CPU: the MinAtar CNN at 1,024 envs would take minutes there (XLA:CPU's
# convolutions), so its quick run uses 16 envs; the program is the same.
QUICK_CONFIG = {"ppo-minatar": dict(num_envs=16, num_steps=16, num_minibatches=2)}
QUICK_BUDGET = {"ppo-minatar": 16 * 16 * 2}


def quick_entries() -> dict:
    """``ENTRIES`` as ``--quick`` runs them."""
    return {
        name: dataclasses.replace(
            entry, config={**entry.config, **QUICK_CONFIG.get(name, {})}, quick=QUICK_BUDGET.get(name, entry.quick)
        )
        for name, entry in ENTRIES.items()
    }


def measure_here(item, args) -> dict:
    """One measurement in this process (``--quick``: no process start per row)."""
    import jax

    name, run, seeds = item
    measure = {"jaxrl": run_jaxrl, "rejax": run_peer, "floor": run_floor}[run]
    result = {"entry": name, "run": run, "seeds": seeds, "machine": machine_info(jax, ("gymnax",))}
    try:
        result["loadavg_before"] = os.getloadavg()[0]
        result.update(measure(jax, ENTRIES[name], seeds, args))
    except Exception as error:  # a failed row is reported in the table, as a child's is
        result["error"] = f"{type(error).__name__}: {error}".strip()[:500]
    return result


def device_name() -> str:
    import jax

    device = jax.devices()[0]
    return f"{device.device_kind} ({device.platform}, {jax.device_count()} device{'s' * (jax.device_count() > 1)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("entries", nargs="*", metavar="ENTRY", help=f"entries (default: all): {', '.join(ENTRIES)}")
    parser.add_argument("--quick", action="store_true", help="tiny budgets, one run, in this process: a smoke test")
    parser.add_argument("--no-peers", action="store_true", help="measure no rejax rows, even if rejax is installed")
    add_common_arguments(parser, ("ENTRY", "RUN", "SEEDS"), timeout=300)
    args = parser.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 2)
    if args.quick:
        ENTRIES.update(quick_entries())
    if args.one:
        emit_one(args, ENTRIES)
        return 0

    names = args.entries or list(ENTRIES)
    unknown = [name for name in names if name not in ENTRIES]
    if unknown:
        parser.error(f"unknown entry {', '.join(map(repr, unknown))}; choose from {', '.join(ENTRIES)}")
    device = device_name()
    print(f"device: {device}", flush=True)
    peer_note = peer_missing("rejax", args.no_peers)
    plan = []
    for name in names:
        entry = ENTRIES[name]
        runs = ["jaxrl"] + ["rejax"] * bool(entry.peer and not peer_note) + ["floor"] * (entry.algorithm in FLOORS)
        plan += [(name, run, 1) for run in runs]
    started = time.perf_counter()
    if args.quick:
        measure = lambda item: measure_here(item, args)  # noqa: E731
    else:
        measure = lambda item: measure_in_child(  # noqa: E731
            __file__, dict(zip(("entry", "run", "seeds"), item, strict=True)), args, ("runs", "seed")
        )
    results = measure_plan(plan, measure, label=lambda item: f"{item[0]}: {item[1]}")
    derive_timing([r for r in results if "run_times" in r])
    ratios([r for r in results if "steps_per_s" in r or "error" in r])
    notes = [f"device: {device}; {time.strftime('%Y-%m-%d')}; all rows {time.perf_counter() - started:.0f} s"]
    notes += [f"error: {r['entry']} {r['run']}: {r['error']}" for r in results if "error" in r]
    for name in names:
        entry = ENTRIES[name]
        notes.append(f"{name}: {entry.title}, {entry.quick if args.quick else entry.budget:,} env steps per seed")
        notes += [f"{name}: {note}" for note in entry.notes]
    notes += [peer_note] if peer_note else []
    title = f"Training throughput on {device}" + (" (--quick budgets)" if args.quick else "")
    markdown = args.markdown or DEFAULT_MARKDOWN
    os.makedirs(os.path.dirname(os.path.abspath(markdown)), exist_ok=True)
    report(title, HEADERS, [row(r) for r in results], notes, results, markdown, left=(0, 1))
    return 0 if all("error" not in r for r in results if r["run"] == "jaxrl") else 1


if __name__ == "__main__":
    sys.exit(main())
