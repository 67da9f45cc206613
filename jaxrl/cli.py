"""Command line: ``python -m jaxrl train ALGO --env ID [--seeds N] [--set field=value ...]``,
``python -m jaxrl sweep ALGO --grid lr=1e-4,3e-4 ...`` and ``python -m jaxrl plot RUN_DIR ...``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

USAGE_ERROR = 2


class UsageError(Exception):
    """A mistake in the command line: reported in one line, exit status 2."""


def _parse_value(text: str, default, field: str):
    """Parse ``text`` into the type of ``default``."""
    try:
        if isinstance(default, bool):
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(float(text)) if float(text).is_integer() else int(text)
        if isinstance(default, float):
            return float(text)
        if default is None:  # optional: SAC's target_entropy, REINFORCE's num_steps
            if text.strip().lower() in ("none", "auto"):
                return None
            return int(text) if text.strip().lstrip("+-").isdigit() else float(text)
        if isinstance(default, tuple):
            return tuple(int(part) for part in text.replace(" ", "").split(",") if part)
        return text
    except ValueError:
        kind = "a number or 'none'" if default is None else type(default).__name__
        raise UsageError(f"cannot parse {field}={text!r} as {kind}") from None


def _fields(config_cls):
    return [f for f in dataclasses.fields(config_cls) if f.name not in ("env_id", "env_kwargs")]


def _describe_fields(config_cls) -> str:
    from jaxrl.config import static_fields

    static = set(static_fields(config_cls))
    lines = ["config fields (set with --set field=value; [static] fields change the compiled program):"]
    for f in _fields(config_cls):
        kind = "static" if f.name in static else "traced"
        default = f.default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        lines.append(f"  {f.name:<24} {str(shown):<12} [{kind}]")
    return "\n".join(lines)


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected field=value, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


# Short names the command line accepts for config fields.
ALIASES = {"lr": "learning_rate"}


def _add_config_arguments(sub, module) -> None:
    """The options that build a Config (shared by ``train`` and ``sweep``)."""
    sub.add_argument("--env", default=module.Config.env_id, help="env id, e.g. CartPole-v1 (default: %(default)s)")
    sub.add_argument("--seeds", type=int, default=1, help="seeds trained together with vmap (default: 1)")
    sub.add_argument("--seed", type=int, default=0, help="base random seed (default: 0)")
    sub.add_argument("--total-timesteps", type=int, default=None, help="env steps per seed")
    sub.add_argument(
        "--set",
        type=_key_value,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field (repeatable)",
    )
    sub.add_argument(
        "--env-param",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override an env parameter, e.g. max_steps_in_episode=200 (repeatable)",
    )
    sub.add_argument("--no-preset", action="store_true", help="ignore the tuned settings for this env")
    variants = getattr(module, "VARIANTS", {})
    if variants:
        sub.add_argument(
            "--variant",
            choices=sorted(variants),
            default=None,
            help="start from a named variant's settings (e.g. rainbow)",
        )
    sub.add_argument("--no-cache", action="store_true", help="disable the persistent compilation cache")


def build_parser() -> argparse.ArgumentParser:
    from jaxrl import algorithms

    parser = argparse.ArgumentParser(prog="python -m jaxrl", description="Train jaxrl agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train an algorithm on an env, several seeds at once")
    algos = train.add_subparsers(
        dest="algorithm", required=True, metavar="ALGORITHM", help=f"one of: {', '.join(algorithms.ALGORITHMS)}"
    )
    for name in algorithms.ALGORITHMS:
        module = algorithms.get(name)
        sub = algos.add_parser(
            name,
            help=(module.__doc__ or "").strip().splitlines()[0],
            epilog=_describe_fields(module.Config),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_config_arguments(sub, module)
        sub.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        sub.add_argument("--json", metavar="PATH", help="also write the summary as JSON")
        sub.add_argument("--logdir", help="write run.json, metrics and checkpoints into this directory")
        sub.add_argument(
            "--loggers",
            default="csv",
            help="comma-separated: csv, jsonl, tensorboard, console (files go to --logdir; default: %(default)s)",
        )
        sub.add_argument(
            "--chunks",
            type=int,
            default=20,
            help="compiled chunks the run is split into; logs and checkpoints happen between "
            "chunks (default: %(default)s)",
        )
        sub.add_argument(
            "--checkpoint-every",
            type=int,
            default=None,
            metavar="CHUNKS",
            help="save a checkpoint every this many chunks and at the end (needs --logdir)",
        )
        sub.add_argument(
            "--resume", action="store_true", help="continue the run in --logdir from its latest checkpoint"
        )
        sub.add_argument(
            "--target-return",
            type=float,
            default=None,
            help="stop once every seed's latest evaluation return reaches this",
        )
        sub.add_argument(
            "--target-episodes",
            type=int,
            default=None,
            metavar="N",
            help="check --target-return on the mean return of the last N finished training "
            "episodes instead (the classic 'solved' rule: 100)",
        )
        sub.add_argument("--plot", action="store_true", help="write learning curves as PNG (needs matplotlib)")
    sweep = commands.add_parser("sweep", help="seeds x a grid of traced hyper-parameters in one compiled program")
    sweep_algos = sweep.add_subparsers(
        dest="algorithm", required=True, metavar="ALGORITHM", help=f"one of: {', '.join(algorithms.ALGORITHMS)}"
    )
    for name in algorithms.ALGORITHMS:
        module = algorithms.get(name)
        sub = sweep_algos.add_parser(
            name,
            help=f"sweep {name}",
            epilog=_describe_fields(module.Config),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_config_arguments(sub, module)
        sub.add_argument(
            "--grid",
            type=_key_value,
            action="append",
            default=[],
            metavar="FIELD=V1,V2,...",
            help=f"values of a traced field (repeatable: the grid is their product); "
            f"aliases: {', '.join(f'{a}={f}' for a, f in ALIASES.items())}",
        )
        sub.add_argument("--metric", default="eval_return", help="final metric to summarise (default: %(default)s)")
        sub.add_argument("--out", metavar="PATH", help="write the summary as CSV (.csv) or JSON (.json)")
    plot = commands.add_parser("plot", help="compare runs' learning curves (mean and 95%% CI over seeds) in a PNG")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="directories written with --logdir")
    plot.add_argument("--metric", default="eval_return", help="metric to plot (default: %(default)s)")
    plot.add_argument("--x", default="timesteps", help="x axis: timesteps, updates or iteration (default: %(default)s)")
    plot.add_argument("--out", default="curves.png", help="PNG to write (default: %(default)s)")
    return parser


def parse_overrides(config_cls, pairs, algorithm: str) -> dict:
    """``[(field, text), ...]`` (``--set field=value``) -> Config overrides, each value
    parsed as its field's default's type (tuples as ``64,64``). Raises UsageError for an
    unknown field or a value that does not parse."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    overrides = {}
    for name, text in pairs:
        if name not in fields or name in ("env_id", "env_kwargs"):
            choices = sorted(set(fields) - {"env_id", "env_kwargs"})
            raise UsageError(f"unknown config field {name!r} for {algorithm}; fields: {', '.join(choices)}")
        overrides[name] = _parse_value(text, fields[name].default, name)
    return overrides


def make_config(module, args):
    """The Config the command line asks for (raises UsageError on bad input)."""
    fields = {f.name: f for f in dataclasses.fields(module.Config)}
    overrides = parse_overrides(module.Config, args.set, args.algorithm)
    if args.total_timesteps is not None:
        if "total_timesteps" not in fields:
            raise UsageError(
                f"--total-timesteps does not apply to {args.algorithm} (it takes no env steps); "
                f"set num_updates with --set num_updates=N"
            )
        overrides["total_timesteps"] = args.total_timesteps
    env_kwargs = {}
    for name, text in args.env_param:
        try:
            env_kwargs[name] = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(f"cannot parse env parameter {name}={text!r}") from None
    if env_kwargs:
        overrides["env_kwargs"] = env_kwargs
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    try:
        if getattr(args, "variant", None):
            overrides = {**module.VARIANTS[args.variant], **overrides}
        if hasattr(module, "preset") and not args.no_preset:
            return module.preset(args.env, **overrides)
        return module.Config(env_id=args.env, **overrides)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None


def _last_finite(values):
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if finite.size else math.nan


def train_command(args) -> int:
    import numpy as np

    from jaxrl import algorithms, metrics, runner

    module = algorithms.get(args.algorithm)
    config = make_config(module, args)
    _use_compilation_cache(args)
    if args.chunks < 1:
        raise UsageError(f"--chunks must be >= 1, got {args.chunks}")
    program = module.program(config)
    num_iterations, total, counter = program.num_iterations, program.budget, program.counter
    unit = "env step" if counter == "timesteps" else "update"
    print(f"{args.algorithm} on {config.env_id}: {args.seeds} seed(s) x {total:,} {unit}s (compiling...)", flush=True)
    try:
        result = runner.run(
            module,
            config,
            seeds=args.seeds,
            seed=args.seed,
            chunk_iterations=runner.default_chunk_iterations(num_iterations, min(args.chunks, num_iterations)),
            logdir=args.logdir,
            loggers=args.loggers.split(",") if args.loggers else (),
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            progress=not args.no_progress,
            target=None
            if args.target_return is None
            else metrics.Target(args.target_return, episodes=args.target_episodes),
        )
    except (ValueError, OSError) as error:
        # Raised before training: a config, a logdir or an input (e.g. a dataset file)
        # the run rejected, not a crash.
        raise UsageError(str(error)) from None
    print(f"compiled in {result.compile_seconds:.1f} s", flush=True)

    rows = result.metrics
    columns = {"eval return": metrics.latest_finite(rows["eval_return"])}
    if "episode_return" in rows:  # learning from a dataset plays no training episodes
        columns["train return"] = metrics.latest_finite(rows["episode_return"])
    done = int(np.max(rows[counter][:, -1])) if counter in rows and rows[counter].size else 0
    steps_per_second = args.seeds * done / result.run_seconds if result.run_seconds else math.nan
    print()
    print(f"{'seed':>6}" + "".join(f"  {name:>12}" for name in columns))
    for seed in range(args.seeds):
        print(f"{seed:>6}" + "".join(f"  {values[seed]:>12.1f}" for values in columns.values()))
    print(f"{'mean':>6}" + "".join(f"  {np.nanmean(values):>12.1f}" for values in columns.values()))
    print()
    if result.stopped_early:
        measure = (
            f"mean return of its last {args.target_episodes} training episodes"
            if args.target_episodes
            else "evaluation return"
        )
        print(f"every seed reached the target return {args.target_return:g} ({measure}) after {done:,} {unit}s")
    print(
        f"wall time {result.compile_seconds + result.run_seconds:.1f} s (compile {result.compile_seconds:.1f} s, "
        f"run {result.run_seconds:.1f} s), {steps_per_second:,.0f} {unit}s/s"
    )
    if args.plot:
        from jaxrl import plots

        path = os.path.join(args.logdir, "curves.png") if args.logdir else f"{args.algorithm}-{config.env_id}.png"
        plots.plot_metrics({args.algorithm: rows}, path, title=f"{args.algorithm} on {config.env_id}")
        print(f"learning curves: {path}")
    if args.json:
        summary = {
            "algorithm": args.algorithm,
            "env_id": config.env_id,
            "seeds": args.seeds,
            f"total_{counter}": total,
            **{name.replace(" ", "_"): [float(v) for v in values] for name, values in columns.items()},
            "compile_seconds": result.compile_seconds,
            "run_seconds": result.run_seconds,
            "steps_per_second" if counter == "timesteps" else f"{counter}_per_second": steps_per_second,
            "stopped_early": result.stopped_early,
            f"{counter}_done": done,
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


def sweep_command(args) -> int:
    from jaxrl import algorithms, sweep

    module = algorithms.get(args.algorithm)
    config = make_config(module, args)
    _use_compilation_cache(args)
    if not args.grid:
        raise UsageError("give at least one --grid field=v1,v2,...")
    values = {}
    for name, text in args.grid:
        name = ALIASES.get(name, name)
        try:
            values[name] = [float(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise UsageError(f"cannot parse --grid {name}={text!r}: expected comma-separated numbers") from None
    try:
        settings = sweep.grid(**values)
        lanes = len(next(iter(settings.values())))
        print(
            f"{args.algorithm} on {config.env_id}: {lanes} setting(s) x {args.seeds} seed(s) in one program "
            f"(compiling...)",
            flush=True,
        )
        result = sweep.run(module, config, settings, seeds=args.seeds, seed=args.seed)
        rows = sweep.summarize(result, metric=args.metric)
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(f"compiled in {result.compile_seconds:.1f} s, ran in {result.run_seconds:.1f} s\n")
    print(f"final {args.metric} over {args.seeds} seed(s) per setting (95% bootstrap CI of the mean):")
    print(sweep.format_table(rows))
    if args.out:
        _write_rows(rows, args.out)
        print(f"\nwrote {args.out}")
    return 0


def _write_rows(rows: list[dict], path: str) -> None:
    if path.endswith(".json"):
        with open(path, "w") as f:
            json.dump(rows, f, indent=2)
        return
    if not path.endswith(".csv"):
        raise UsageError(f"--out must end in .csv or .json, got {path!r}")
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _use_compilation_cache(args) -> None:
    if not args.no_cache:
        import jax

        cache_dir = os.environ.get("JAXRL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "jaxrl", "xla"))
        jax.config.update("jax_compilation_cache_dir", cache_dir)


def plot_command(args) -> int:
    from jaxrl import plots

    try:
        plots.plot_runs(args.run_dirs, args.out, metric=args.metric, x=args.x)
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None
    print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Unknown algorithms get our one-line message rather than argparse's choice dump.
    if len(argv) >= 2 and argv[0] in ("train", "sweep") and not argv[1].startswith("-"):
        from jaxrl import algorithms

        try:
            algorithms.get(argv[1])
        except ValueError as error:
            print(f"jaxrl: error: {error}", file=sys.stderr)
            return USAGE_ERROR
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return train_command(args)
        if args.command == "plot":
            return plot_command(args)
        if args.command == "sweep":
            return sweep_command(args)
    except UsageError as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    return USAGE_ERROR
