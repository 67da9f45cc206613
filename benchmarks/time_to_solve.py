"""Time to solve: Tianshou's platform comparison (wall-clock seconds until solved, 5
seeds) for jaxrl on this machine, beside the thesis's best time per cell.

    python benchmarks/time_to_solve.py                     # all 8 cells, cache cold then warm
    python benchmarks/time_to_solve.py --cells cartpole-ppo pendulum-sac --cache none
    python benchmarks/time_to_solve.py --markdown tts.md --plot tts.png
    python benchmarks/time_to_solve.py --cells cartpole-dqn --cache none --seed 2   # other seeds

The cells: CartPole with 200-step episodes (``CartPole-v1`` with
``max_steps_in_episode=200``, the classic v0 task), solved at 195, for PG (REINFORCE),
DQN, A2C and PPO; Pendulum-v1, solved at -250, for PPO, DDPG, TD3 and SAC. "Solved" is
the thesis's rule: the mean return of the last 100 finished *training* episodes reaches
the threshold (``jaxrl.workflow.metrics.recent_episode_return``). The 5 seeds train together, as
one vmapped program run in chunks by ``jaxrl.workflow.runner.run``, which checks the rule between
chunks (``jaxrl.workflow.metrics.Target``) and stops once every seed is solved.

Each measurement is a fresh Python process. Time = from the process's start (interpreter
and JAX start-up included) until every seed is solved; compile s (tracing, lowering and
compiling, or loading from the cache) is part of it and shown separately, as are the env
steps each seed took. ``--cache``: ``none`` compiles everything (JAX's persistent cache
off); ``cold`` / ``warm`` run with the persistent compilation cache in an empty directory
(filling it) and then again with JAX's persistent compilation cache filled, which is what
a user's second run gets (``python -m jaxrl train`` uses the cache by default). The
settings per cell are printed with the table: ``Config`` defaults plus the overrides in
``CELLS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import add_common_arguments, fmt, measure_and_emit, report, run_child  # noqa: E402

SEEDS = 5
WINDOW = 100  # finished training episodes in the solved rule
CARTPOLE_200 = {"max_steps_in_episode": 200}
# Many envs and few updates per env step: the solved rule needs 100 finished training
# episodes (20k env steps on Pendulum) after the policy is good, and those cost 16x fewer
# gradient updates at 64 envs x 4 updates than at the defaults' one update per env step.
OFFPOLICY_PENDULUM = dict(num_envs=64, batch_size=128, total_timesteps=200_000)
# Tianshou's DQN example for CartPole uses gamma 0.9 and batches of 64; here with 4
# updates per 64 env steps (theirs: 0.1 per step) and a 64x64 network (theirs: 3 x 128).
TIANSHOU_DQN = dict(gamma=0.9, batch_size=64, num_updates=4, hidden_sizes=(64, 64))


@dataclasses.dataclass(frozen=True)
class Cell:
    task: str
    label: str  # the thesis's column name
    algorithm: str  # jaxrl.algorithms module
    env_id: str
    threshold: float
    thesis_seconds: float  # Tianshou's best time for the cell in the thesis
    settings: dict  # Config overrides (besides env, budget, evals and reports)
    chunk_iterations: int  # iterations between two checks of the solved rule
    env_kwargs: dict = dataclasses.field(default_factory=dict)

    def config(self, overrides: dict | None = None):
        """The cell's Config: the algorithm's preset for the env where it has presets
        (what the command line gives), else its Config defaults, plus ``settings``. The
        budget (``total_timesteps``, which also sets schedules such as learning-rate
        annealing and DQN's epsilon) is the default unless ``settings`` has one. No
        evaluations or progress reports."""
        module = importlib.import_module(f"jaxrl.algorithms.{self.algorithm}")
        make = getattr(module, "preset", None) or (lambda env_id, **kw: module.Config(env_id=env_id, **kw))
        return make(
            self.env_id,
            env_kwargs=self.env_kwargs,
            num_evals=0,
            num_reports=0,
            **{**self.settings, **(overrides or {})},
        )


CELLS = {
    "cartpole-pg": Cell(
        "CartPole", "PG", "reinforce", "CartPole-v1", 195.0, 6.09, dict(learning_rate=1e-2), 10, CARTPOLE_200
    ),
    "cartpole-dqn": Cell("CartPole", "DQN", "dqn", "CartPole-v1", 195.0, 6.09, TIANSHOU_DQN, 50, CARTPOLE_200),
    "cartpole-a2c": Cell(
        "CartPole", "A2C", "a2c", "CartPole-v1", 195.0, 10.59, dict(learning_rate=3e-3), 100, CARTPOLE_200
    ),
    "cartpole-ppo": Cell(
        "CartPole",
        "PPO",
        "ppo",
        "CartPole-v1",
        195.0,
        23.99,
        dict(num_envs=16, num_steps=32, learning_rate=1e-3),
        10,
        CARTPOLE_200,
    ),
    "pendulum-ppo": Cell("Pendulum", "PPO", "ppo", "Pendulum-v1", -250.0, 16.18, {}, 10),
    "pendulum-ddpg": Cell("Pendulum", "DDPG", "ddpg", "Pendulum-v1", -250.0, 37.26, OFFPOLICY_PENDULUM, 100),
    "pendulum-td3": Cell("Pendulum", "TD3", "td3", "Pendulum-v1", -250.0, 44.04, OFFPOLICY_PENDULUM, 100),
    "pendulum-sac": Cell("Pendulum", "SAC", "sac", "Pendulum-v1", -250.0, 36.02, OFFPOLICY_PENDULUM, 100),
}


def process_seconds() -> float | None:
    """Seconds since this process started (Linux /proc), or None where unknown."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return time.time() - (boot + start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# ============================================================================ child


def measure_cell(name: str, cache_dir: str, items: list[str], seed: int):
    """Child side: train the cell's 5 seeds (from base seed ``seed``) until solved; the
    numbers for the table. ``items``: ``--set field=value`` overrides, parsed as the
    command line does."""
    cell = CELLS[name]

    def measure(jax):
        import numpy as np

        if cache_dir != "-":
            jax.config.update("jax_enable_compilation_cache", True)
            jax.config.update("jax_compilation_cache_dir", cache_dir)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        from jaxrl.workflow import cli, metrics, runner

        module = importlib.import_module(f"jaxrl.algorithms.{cell.algorithm}")
        overrides = cli.parse_overrides(module.Config, [item.split("=", 1) for item in items], cell.algorithm)
        config = cell.config(overrides)
        result = runner.run(
            cell.algorithm,
            config,
            seeds=SEEDS,
            seed=seed,
            chunk_iterations=cell.chunk_iterations,
            target=metrics.Target(cell.threshold, episodes=WINDOW),
        )
        seconds = process_seconds()
        recent = metrics.recent_episode_return(result.metrics["episode_return"], result.metrics["episodes"], WINDOW)
        solved = recent >= cell.threshold
        timesteps = result.metrics["timesteps"]
        steps = [int(timesteps[s, np.argmax(solved[s])]) if solved[s].any() else None for s in range(SEEDS)]
        return dict(
            seconds=seconds,
            compile_seconds=result.compile_seconds,
            run_seconds=result.run_seconds,
            solved=bool(result.stopped_early),
            steps=steps,
            env_steps=int(timesteps[:, -1].max()),
            final_recent=[float(v) for v in recent[:, -1]],
            settings={
                k: v
                for k, v in dataclasses.asdict(config).items()
                if k in cell.settings or k in overrides or k == "env_kwargs"
            },
        )

    measure_and_emit({"cell": name, "cache": cache_dir != "-"}, measure, packages=("gymnax",))


# ============================================================================ parent


def run_cell(script: str, args, name: str, cache_dir: str | None) -> dict:
    """One measurement in a fresh process; ``seconds`` falls back to the parent's clock."""
    env = {} if cache_dir is None else {"JAX_ENABLE_COMPILATION_CACHE": "true"}
    start = time.monotonic()
    command = [sys.executable, script, "--one", name, cache_dir or "-", f"--seed={args.seed}"]
    command += [f"--set={item}" for item in args.set]
    result = run_child(command, args.timeout, args.stall_timeout, args.verbose, env_overrides=env)
    result.setdefault("cell", name)
    if result.get("seconds") is None and "error" not in result:
        result["seconds"] = time.monotonic() - start
    return result


HEADERS = [
    "task",
    "algorithm",
    "thesis s",
    "cache",
    "jaxrl s",
    "compile s",
    "train s",
    "ratio",
    "env steps per seed to solve",
    "solved",
]


def table_rows(results) -> list[list[str]]:
    rows = []
    for r in results:
        cell = CELLS[r["cell"]]
        mode = r.get("mode", "-")
        if "error" in r:
            rows.append(
                [
                    cell.task,
                    cell.label,
                    f"{cell.thesis_seconds:.2f}",
                    mode,
                    "error",
                    "-",
                    "-",
                    "-",
                    r["error"][:60],
                    "-",
                ]
            )
            continue
        steps = ", ".join(fmt(s, ",") if s is not None else "-" for s in r["steps"])
        solved = "yes" if r["solved"] else f"no ({sum(s is not None for s in r['steps'])}/{SEEDS})"
        ratio = cell.thesis_seconds / r["seconds"] if r["solved"] else float("nan")
        rows.append(
            [
                cell.task,
                cell.label,
                f"{cell.thesis_seconds:.2f}",
                mode,
                f"{r['seconds']:.1f}",
                f"{r['compile_seconds']:.1f}",
                f"{r['run_seconds']:.1f}",
                fmt(ratio, ".2f") + "x",
                steps,
                solved,
            ]
        )
    return rows


def plot(results, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [n for n in CELLS if any(r["cell"] == n for r in results)]
    modes = sorted({r["mode"] for r in results}, key=["none", "cold", "warm"].index)
    figure, axes = plt.subplots(figsize=(1.3 * len(names) + 2, 4))
    width = 0.8 / (len(modes) + 1)
    x = np.arange(len(names))
    axes.bar(x, [CELLS[n].thesis_seconds for n in names], width, label="Tianshou (thesis, best)", color="0.6")
    for i, mode in enumerate(modes, start=1):
        by_cell = {r["cell"]: r for r in results if r["mode"] == mode}
        heights = [by_cell[n]["seconds"] if n in by_cell and by_cell[n].get("solved") else np.nan for n in names]
        axes.bar(x + i * width, heights, width, label=f"jaxrl, compilation cache {mode}")
    axes.set_xticks(x + width * len(modes) / 2, [f"{CELLS[n].task}\n{CELLS[n].label}" for n in names])
    axes.set_ylabel("seconds to solve, 5 seeds (lower is better)")
    axes.set_title("Wall-clock time to solve (unsolved cells left blank)")
    axes.legend()
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cells",
        nargs="+",
        choices=list(CELLS),
        default=list(CELLS),
        metavar="CELL",
        help=f"cells to run (default: all): {', '.join(CELLS)}",
    )
    parser.add_argument(
        "--cache",
        choices=("none", "cold-warm", "warm"),
        default="cold-warm",
        help="none: no persistent compilation cache; cold-warm: a run filling an empty cache, "
        "then one using it; warm: only the second (default: %(default)s)",
    )
    parser.add_argument("--plot", metavar="PNG", help="write a bar chart beside the thesis's times (matplotlib)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a Config field in every cell run (repeatable), as the command line's --set: "
        "e.g. --set num_envs=16 --set hidden_sizes=64,64",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="base seed: the cell's seeds are split from it (default: %(default)s)"
    )
    add_common_arguments(parser, one=("CELL", "CACHE_DIR"), runs=False, timeout=900)
    args = parser.parse_args(argv)
    if args.one:
        measure_cell(*args.one, args.set, args.seed)
        return 0

    script = os.path.abspath(__file__)
    results = []
    for name in args.cells:
        modes = {"none": ["none"], "cold-warm": ["cold", "warm"], "warm": ["fill", "warm"]}[args.cache]
        cache_dir = None if args.cache == "none" else tempfile.mkdtemp(prefix="jaxrl-tts-cache-")
        try:
            for mode in modes:
                print(f"{name}: {'compilation cache ' + mode if cache_dir else 'no compilation cache'}...", flush=True)
                result = run_cell(script, args, name, cache_dir)
                result["mode"] = mode
                print(
                    "  "
                    + (
                        "error: " + result["error"]
                        if "error" in result
                        else f"{result['seconds']:.1f} s (compile {result['compile_seconds']:.1f} s), "
                        f"solved: {result['solved']}, steps {result['steps']}"
                    ),
                    flush=True,
                )
                if mode != "fill":
                    results.append(result)
        finally:
            if cache_dir:
                shutil.rmtree(cache_dir, ignore_errors=True)

    overrides = dict(item.split("=", 1) for item in args.set)
    notes = [
        f"{SEEDS} seeds (split from base seed {args.seed}) in one vmapped program; solved = mean return of the "
        f"last {WINDOW} finished training episodes >= threshold, every seed (checked between chunks); ratio = "
        "thesis s / jaxrl s (> 1: faster than the thesis's best); time from process start, compile included."
    ]
    for name in args.cells:
        cell = CELLS[name]
        settings = ", ".join(f"{k}={v}" for k, v in {**cell.settings, **overrides}.items())
        constructor = "preset" if cell.algorithm in ("ppo", "dqn") else "Config"
        notes.append(f"{name} settings (Config defaults plus): {cell.algorithm}.{constructor}({settings})")
    report(
        "Time to solve (Tianshou thesis cells)",
        HEADERS,
        table_rows(results),
        notes,
        results,
        args.markdown,
        left=(0, 1, 3, 8),
    )
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
