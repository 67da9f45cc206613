"""Command line: ``python -m jaxrl train ALGO --env ID [--seeds N] [--set field=value ...]``,
``python -m jaxrl sweep ALGO --grid lr=1e-4,3e-4 ...``,
``python -m jaxrl pbt ALGO --bounds lr=1e-4:3e-3 ...``, ``python -m jaxrl plot RUN_DIR ...``,
and, for a run saved with ``--logdir`` and ``--checkpoint-every``,
``python -m jaxrl evaluate RUN_DIR [--episodes N] [--sampled] [--video DIR]`` (its policies'
returns; with no options, its own last evaluation again) and
``python -m jaxrl record RUN_DIR --steps N --out data.npz`` (a dataset for ``train bc``; a
mixture with ``--part RUN_DIR:0.7 --part random:0.3``).

``train``, ``sweep`` and ``pbt`` share the run options (:class:`jaxrl.workflow.options.RunOptions`):
``--logdir``, ``--loggers``, ``--chunks``, ``--checkpoint-every``, ``--resume`` and
``--devices N``, which splits the lanes (seeds, settings x seeds, members) over the first
``N`` devices.

Exit statuses: 0 the command finished; 1 it failed while running (a checkpoint a full
disk cut short: the earlier checkpoints are intact); 2 bad input, said in one line;
75 a SIGTERM or SIGINT stopped the run after its chunk in flight and a checkpoint of it
(``--resume`` continues exactly); 128 + N signal N stopped a run that keeps no
checkpoints, or a second signal ended the process at once
(:mod:`jaxrl.workflow.stopping`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import math
import os
import sys
import time

from jaxrl.workflow import stopping

USAGE_ERROR = 2
RUN_ERROR = 1  # the run failed while running (a checkpoint a full disk cut short)


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
        if dataclasses.is_dataclass(default):  # a part: a switch, or a shorthand the Config reads ("none" too)
            return {"true": True, "false": False}.get(text.strip().lower(), text.strip())
        return text
    except ValueError:
        kind = "a number or 'none'" if default is None else type(default).__name__
        raise UsageError(f"cannot parse {field}={text!r} as {kind}") from None


def _settable(config_cls) -> dict:
    """``{path: (default, static)}`` of the fields ``--set`` takes (a part's fields by
    their dotted path; not the env, which has its own options)."""
    from jaxrl.config import field_paths

    return {path: entry for path, entry in field_paths(config_cls).items() if path not in ("env_id", "env_kwargs")}


def _describe_fields(config_cls) -> str:
    lines = ["config fields (set with --set field=value; [static] fields change the compiled program):"]
    for path, (default, static) in _settable(config_cls).items():
        if dataclasses.is_dataclass(default):
            shown, kind = type(default).__name__, "part"
        else:
            shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
            kind = "static" if static else "traced"
        lines.append(f"  {path:<24} {str(shown):<12} [{kind}]")
    return "\n".join(lines)


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected field=value, got {text!r}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


# Short names the command line accepts for config fields.
ALIASES = {"lr": "learning_rate"}


def _add_config_arguments(sub, record) -> None:
    """The options that build a Config (shared by ``train`` and ``sweep``)."""
    sub.add_argument("--env", default=record.Config.env_id, help="env id, e.g. CartPole-v1 (default: %(default)s)")
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
    if "network" in {field.name for field in dataclasses.fields(record.Config)}:
        sub.add_argument(
            "--network",
            metavar="NAME",
            help="the torso: mlp, cnn, nature_cnn, impala_cnn or package.module:name, a flax module or a "
            "factory called with the env's spec (imported; the current directory is on the path)",
        )
    sub.add_argument("--no-preset", action="store_true", help="ignore the tuned settings for this env")
    variants = record.variants
    if variants:
        sub.add_argument(
            "--variant",
            choices=sorted(variants),
            default=None,
            help="start from a named variant's settings (e.g. rainbow)",
        )
    sub.add_argument("--no-cache", action="store_true", help="disable the persistent compilation cache")


def _add_actor_arguments(sub) -> None:
    """The options of a run with actors apart from the learner (:class:`jaxrl.workflow.actor_learner.ActorOptions`)."""
    sub.add_argument(
        "--actors",
        type=int,
        default=None,
        metavar="N",
        help="run N actor threads apart from the learner, for envs stepped on the host "
        "(jaxrl.workflow.actor_learner; default: one compiled program, actors in lock-step)",
    )
    sub.add_argument(
        "--queue-size", type=int, default=2, metavar="BLOCKS", help="with --actors: blocks the queue holds"
    )
    sub.add_argument(
        "--learner-devices",
        type=int,
        default=1,
        metavar="N",
        help="with --actors: the first N devices run the learner, the actors the rest (default: %(default)s)",
    )
    sub.add_argument(
        "--actor-platform",
        default=None,
        metavar="PLATFORM",
        help="with --actors: run the actors on this platform's devices (cpu: beside a GPU learner)",
    )
    sub.add_argument(
        "--central-inference",
        action="store_true",
        help="with --actors: actors only step their envs; one batched policy call on the learner's device "
        "answers them all (SEED RL; host envs such as gymnasium:...)",
    )


def build_parser() -> argparse.ArgumentParser:
    from jaxrl import algorithms

    parser = argparse.ArgumentParser(prog="python -m jaxrl", description="Train jaxrl agents.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train an algorithm on an env, several seeds at once")
    for sub in _algorithm_parsers(train, lambda name, record: record.summary or f"train {name}"):
        sub.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        sub.add_argument("--json", metavar="PATH", help="also write the summary as JSON")
        _add_run_arguments(sub, "run")
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
        if algorithms.get(sub.prog.split()[-1]).actor_learner is not None:
            _add_actor_arguments(sub)
    sweep = commands.add_parser("sweep", help="seeds x a grid of traced hyper-parameters in one compiled program")
    for sub in _algorithm_parsers(sweep, lambda name, record: f"sweep {name}"):
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
        _add_run_arguments(sub, "sweep")
    pbt = commands.add_parser(
        "pbt", help="population-based training: members exploit and explore traced hyper-parameters"
    )
    for sub in _algorithm_parsers(pbt, lambda name, record: f"population-based training of {name}"):
        sub.add_argument(
            "--bounds",
            type=_key_value,
            action="append",
            default=[],
            metavar="FIELD=LOW:HIGH",
            help="a traced field PBT tunes and its range (repeatable); starting values are drawn log-uniformly "
            "for positive bounds",
        )
        sub.add_argument("--population", type=int, default=8, help="members, vmapped (default: %(default)s)")
        sub.add_argument(
            "--interval",
            type=int,
            default=10,
            help="iterations per round; exploit/explore after each (default: %(default)s)",
        )
        sub.add_argument(
            "--fraction", type=float, default=0.25, help="share of members replaced each round (default: %(default)s)"
        )
        sub.add_argument(
            "--score-metric",
            default="episode_return",
            help="metric whose mean over a round ranks the members (default: %(default)s)",
        )
        sub.add_argument("--out", metavar="PATH", help="write the members' summary as CSV (.csv) or JSON (.json)")
        _add_run_arguments(sub, "population")
    plot = commands.add_parser("plot", help="compare runs' learning curves (mean and 95%% CI over seeds) in a PNG")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="directories written with --logdir")
    plot.add_argument("--metric", default="eval_return", help="metric to plot (default: %(default)s)")
    plot.add_argument("--x", default="timesteps", help="x axis: timesteps, updates or iteration (default: %(default)s)")
    plot.add_argument("--out", default="curves.png", help="PNG to write (default: %(default)s)")
    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a saved run's policies (by default, repeat the run's evaluation at the checkpoint)",
        description="Evaluate each seed's policy from a checkpoint of a run saved with --logdir and "
        "--checkpoint-every. With no options this repeats the run's evaluation at the checkpoint (its episodes "
        "and keys), so at the final checkpoint it prints the run's final eval return; --episodes, --seed and "
        "--sampled evaluate afresh.",
    )
    _add_saved_run_arguments(evaluate)
    evaluate.add_argument(
        "--episodes", type=int, default=None, help="episodes per seed (default: the run's eval_episodes)"
    )
    evaluate.add_argument(
        "--seed",
        type=int,
        default=None,
        help="draw episodes from this seed (default: the keys of the run's evaluation at the checkpoint)",
    )
    evaluate.add_argument("--sampled", action="store_true", help="sample actions from the policy (default: its mode)")
    evaluate.add_argument(
        "--video",
        metavar="DIR",
        help="also save one rendered episode per seed in DIR (.gif and .npz; Gymnasium envs only)",
    )
    evaluate.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    record = commands.add_parser(
        "record",
        help="record a dataset for offline learning: a saved policy's transitions, or a mixture of policies",
        description="Roll out one seed's policy from a checkpoint of a saved run (RUN_DIR), or a mixture of parts "
        "(--part, repeatable: saved runs' checkpoints and uniformly random actions, each with its share of the "
        "transitions), and write the transitions as a .npz dataset (jaxrl.data.save_dataset) that says what it "
        "holds: each part's policy, transitions and episode returns. `train bc --set dataset_path=...` learns "
        "from it.",
    )
    _add_saved_run_arguments(record, optional=True)
    record.add_argument(
        "--part",
        action="append",
        default=[],
        metavar="SOURCE[:SHARE]",
        help="a part of a mixture (repeatable, instead of RUN_DIR): RUN_DIR, RUN_DIR@CHECKPOINT (latest, best or "
        "a step) or random, with its share of the transitions, e.g. --part runs/ppo:0.7 --part random:0.3 (the "
        "shares sum to 1; each is rounded to a multiple of --envs)",
    )
    record.add_argument(
        "--env", default=None, help="the env, needed when every part is random (else the runs' env, which it must be)"
    )
    record.add_argument(
        "--env-param",
        type=_key_value,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override an env parameter where every part is random (repeatable; saved runs bring their own)",
    )
    record.add_argument("--steps", type=int, required=True, help="transitions to record (env steps over all envs)")
    record.add_argument("--out", required=True, metavar="PATH", help="the .npz dataset to write")
    record.add_argument("--envs", type=int, default=1, help="parallel envs; must divide --steps (default: 1)")
    record.add_argument("--policy-seed", type=int, default=0, help="which of the run's seeds acts (default: 0)")
    record.add_argument("--seed", type=int, default=0, help="random seed of the envs and sampling (default: 0)")
    record.add_argument("--sampled", action="store_true", help="sample actions from the policy (default: its mode)")
    return parser


def _algorithm_parsers(command, describe):
    """One sub-parser of ``command`` per algorithm (``describe(name, record)`` its help),
    each with the options that build its Config; yields them for the command's own options."""
    from jaxrl import algorithms

    algos = command.add_subparsers(
        dest="algorithm", required=True, metavar="ALGORITHM", help=f"one of: {', '.join(algorithms.names())}"
    )
    for name in algorithms.names():
        record = algorithms.get(name)
        sub = algos.add_parser(
            name,
            help=describe(name, record),
            epilog=_describe_fields(record.Config),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_config_arguments(sub, record)
        yield sub


def _add_run_arguments(sub, what: str) -> None:
    """The run options (:class:`jaxrl.workflow.options.RunOptions`): ``--logdir``,
    ``--loggers``, ``--chunks``, ``--checkpoint-every``, ``--resume`` and ``--devices``."""
    sub.add_argument("--logdir", help="write run.json, metrics and checkpoints into this directory")
    sub.add_argument(
        "--loggers",
        default="csv",
        help="comma-separated: csv, jsonl, tensorboard, wandb, console (files go to --logdir; default: %(default)s)",
    )
    sub.add_argument(
        "--chunks",
        type=int,
        default=20,
        help=f"compiled chunks the {what} is split into; logs and checkpoints happen between chunks "
        "(default: %(default)s)",
    )
    sub.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="CHUNKS",
        help="save a checkpoint every this many chunks and at the end (needs --logdir)",
    )
    sub.add_argument(
        "--resume", action="store_true", help=f"continue the {what} in --logdir from its latest checkpoint"
    )
    sub.add_argument(
        "--devices",
        type=int,
        default=None,
        metavar="N",
        help=f"split the {what}'s lanes (seeds, settings x seeds, members) over the first N devices; "
        "they must divide over them (default: one device)",
    )


def _run_options(args, progress: bool):
    """The :class:`jaxrl.workflow.options.RunOptions` of the command line's run options."""
    from jaxrl.workflow.options import RunOptions

    try:
        return RunOptions(
            logdir=args.logdir,
            loggers=tuple(args.loggers.split(",")) if args.loggers else (),
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            progress=progress,
            mesh=_mesh(args.devices),
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def _mesh(devices: int | None):
    """A mesh of the first ``devices`` devices (of every process), or None."""
    if devices is None:
        return None
    import jax

    from jaxrl.workflow import distributed

    if not 1 <= devices <= jax.device_count():
        raise UsageError(
            f"--devices {devices}: there are {jax.device_count()} device(s) (on CPU, more are made with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count=N)"
        )
    return distributed.make_mesh(jax.devices()[:devices])


def _chunking(args, num_iterations: int, unit: int = 1) -> int:
    """Iterations per chunk for ``--chunks`` (a multiple of ``unit``, a PBT round)."""
    if args.chunks < 1:
        raise UsageError(f"--chunks must be >= 1, got {args.chunks}")
    from jaxrl.workflow import runner

    units = num_iterations // unit
    return unit * runner.default_chunk_iterations(units, min(args.chunks, units))


def _add_saved_run_arguments(sub, optional: bool = False) -> None:
    sub.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        nargs="?" if optional else None,
        help="a directory written by train --logdir --checkpoint-every",
    )
    sub.add_argument(
        "--checkpoint",
        default="latest",
        help="latest, best (highest evaluation return) or a step (iterations done) (default: %(default)s)"
        + ("; for each saved run without @CHECKPOINT" if optional else ""),
    )
    sub.add_argument("--no-cache", action="store_true", help="disable the persistent compilation cache")


def parse_overrides(config_cls, pairs, algorithm: str) -> dict:
    """``[(field, text), ...]`` (``--set field=value``; a part's field by its dotted path,
    ``exploration.end=0.01``) -> Config overrides, each value parsed as its field's
    default's type (tuples as ``64,64``). Raises UsageError for an unknown field or a value
    that does not parse."""
    from jaxrl.config import optional_part

    fields = _settable(config_cls)
    overrides = {}
    for name, text in pairs:
        if name not in fields and name.partition(".")[0] in fields:  # a field of a part another --set may choose
            overrides[name] = _PartField(text)
            continue
        if name not in fields:
            raise UsageError(f"unknown config field {name!r} for {algorithm}; fields: {', '.join(sorted(fields))}")
        default = fields[name][0]
        if default is None and optional_part(config_cls, name) is not None:  # SAC's sde: parsed as a part's switch
            default = optional_part(config_cls, name)()
        overrides[name] = _parse_value(text, default, name)
    return overrides


class _PartField(str):
    """The text of ``--set part.field=value`` for a part that is not the field's default
    (``exploration=ou`` then ``exploration.sigma=1``): parsed once the Config holds it."""


def _parse_part_fields(config, values: dict, algorithm: str, prefix: str = "") -> dict:
    """``values`` with each :class:`_PartField` parsed as the type of that field of
    ``config`` (a Config, or the part at ``prefix``, as ``"exploration."``)."""
    from jaxrl.config import field_paths

    fields = field_paths(config)
    parsed = {}
    for name, value in values.items():
        if isinstance(value, _PartField):
            if name not in fields:
                known = ", ".join(prefix + field for field in sorted(fields))
                raise UsageError(f"unknown config field {prefix + name!r} for {algorithm}; fields: {known}")
            value = _parse_value(str(value), fields[name][0], prefix + name)
        parsed[name] = value
    return parsed


def make_config(record, args):
    """The Config the command line asks for (raises UsageError on bad input): the preset
    (or the defaults), the variant, the top-level fields and the parts' fields, built
    once, so that every check sees the parts as set. (A part chosen by a shorthand,
    ``exploration=ou``, is built by the Config; its fields are set after.)"""
    from jaxrl.config import field_paths, is_part, replace_paths

    fields = {f.name: f for f in dataclasses.fields(record.Config)}
    overrides = parse_overrides(record.Config, args.set, args.algorithm)
    in_parts = {path: overrides.pop(path) for path in list(overrides) if "." in path}
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
    if getattr(args, "network", None) is not None:
        overrides["network"] = args.network
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    try:
        if getattr(args, "variant", None):
            overrides = {**record.variants[args.variant], **overrides}
        settings = {**({} if args.no_preset else record.presets.get(args.env, {})), **overrides}
        for head in {path.partition(".")[0] for path in in_parts}:
            base = settings.get(head, field_paths(record.Config)[head][0])
            if is_part(base):  # a part already: set its fields before the Config checks it
                mine = {path: in_parts.pop(path) for path in list(in_parts) if path.partition(".")[0] == head}
                values = {path.partition(".")[2]: value for path, value in mine.items()}
                overrides[head] = replace_paths(base, _parse_part_fields(base, values, args.algorithm, head + "."))
        if args.no_preset:
            config = record.Config(env_id=args.env, **overrides)
        else:
            config = record.preset(args.env, **overrides)
        return replace_paths(config, _parse_part_fields(config, in_parts, args.algorithm))
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None


def train_command(args) -> int:
    import numpy as np

    from jaxrl import algorithms
    from jaxrl.workflow import metrics, runner

    record = algorithms.get(args.algorithm)
    config = make_config(record, args)
    _use_compilation_cache(args)
    if getattr(args, "actors", None) is not None:
        return _train_actor_learner(record, config, args)
    program = record.program(config)
    num_iterations, total, counter = program.num_iterations, program.budget, program.counter
    unit = "env step" if counter == "timesteps" else "update"
    print(f"{args.algorithm} on {config.env_id}: {args.seeds} seed(s) x {total:,} {unit}s (compiling...)", flush=True)
    options = _run_options(args, progress=not args.no_progress)
    try:
        result = runner.run(
            record,
            config,
            seeds=args.seeds,
            seed=args.seed,
            chunk_iterations=_chunking(args, num_iterations),
            target=None
            if args.target_return is None
            else metrics.Target(args.target_return, episodes=args.target_episodes),
            options=options,
        )
    except (ValueError, OSError) as error:
        if _failed_while_running(error):
            raise
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
        from jaxrl.workflow import plots

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


def _train_actor_learner(record, config, args) -> int:
    """``train ALGORITHM --actors N``: :func:`jaxrl.workflow.actor_learner.run`, then a
    summary with the pipeline's rates and policy lags."""
    import numpy as np

    from jaxrl.workflow import actor_learner, metrics

    if args.seeds != 1:
        raise UsageError("--actors trains one seed (one learner); run seeds as separate commands")
    if args.devices is not None:
        raise UsageError("--actors places its devices with --learner-devices, not --devices")
    try:
        actors = actor_learner.ActorOptions(
            actors=args.actors,
            queue_size=args.queue_size,
            learner_devices=args.learner_devices,
            actor_platform=args.actor_platform,
            central_inference=args.central_inference,
        )
        parts = record.actor_learner
        prepared = parts.prepare(config)
        total = parts.num_iterations(prepared) * parts.block_steps(prepared)
        print(f"{args.algorithm} on {config.env_id}: {args.actors} actor(s) x {total:,} env steps (compiling...)")
        options = _run_options(args, progress=not args.no_progress)
        num_iterations = parts.num_iterations(prepared)
        result = actor_learner.run(
            record,
            config,
            actors=actors,
            seed=args.seed,
            chunk_iterations=_chunking(args, num_iterations),
            target=None
            if args.target_return is None
            else metrics.Target(args.target_return, episodes=args.target_episodes),
            options=options,
        )
    except ValueError as error:
        if _failed_while_running(error):
            raise
        raise UsageError(str(error)) from None
    rows = result.metrics
    eval_return = float(metrics.latest_finite(rows["eval_return"])[0])
    train_return = float(metrics.latest_finite(rows["episode_return"])[0])
    done = int(rows["timesteps"][0, -1]) if rows["timesteps"].size else 0
    lags = result.lags
    percentiles = np.percentile(lags, [50, 90, 100]) if lags.size else [np.nan] * 3
    print(f"compiled in {result.compile_seconds:.1f} s")
    print(f"eval return {eval_return:.1f}, train return {train_return:.1f} after {done:,} env steps")
    print(
        f"actors {sum(result.actor_steps) / result.run_seconds:,.0f} env steps/s, learner "
        f"{result.completed / result.run_seconds:,.1f} updates/s; policy lag p50 {percentiles[0]:.0f}, "
        f"p90 {percentiles[1]:.0f}, max {percentiles[2]:.0f}; actor idle "
        f"{float(np.nanmean(rows['actor_idle_fraction'])):.0%}; actor restarts {result.restarts}"
    )
    if result.stopped_early:
        print(f"reached the target return {args.target_return:g} after {done:,} env steps")
    print(
        f"wall time {result.compile_seconds + result.run_seconds:.1f} s, {done / result.run_seconds:,.0f} env steps/s"
    )
    if args.json:
        summary = {
            "algorithm": args.algorithm,
            "env_id": config.env_id,
            "actors": args.actors,
            "eval_return": [eval_return],
            "train_return": [train_return],
            "timesteps_done": done,
            "compile_seconds": result.compile_seconds,
            "run_seconds": result.run_seconds,
            "steps_per_second": done / result.run_seconds if result.run_seconds else math.nan,
            "policy_lag": {"p50": float(percentiles[0]), "p90": float(percentiles[1]), "max": float(percentiles[2])},
            "actor_restarts": result.restarts,
            "stopped_early": result.stopped_early,
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


def sweep_command(args) -> int:
    from jaxrl import algorithms
    from jaxrl.workflow import sweep

    record = algorithms.get(args.algorithm)
    config = make_config(record, args)
    _use_compilation_cache(args)
    if not args.grid:
        raise UsageError("give at least one --grid field=v1,v2,...")
    values = _numbers(args.grid, "--grid", ",", "comma-separated numbers")
    options = _run_options(args, progress=True)
    try:
        settings = sweep.grid(**values)
        lanes = len(next(iter(settings.values())))
        print(
            f"{args.algorithm} on {config.env_id}: {lanes} setting(s) x {args.seeds} seed(s) in one program "
            f"(compiling...)",
            flush=True,
        )
        chunk_iterations = _chunking(args, record.program(config).num_iterations)
        result = sweep.run(
            record, config, settings, args.seeds, args.seed, chunk_iterations=chunk_iterations, options=options
        )
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


def _numbers(pairs, option: str, separator: str, expected: str, count: int | None = None) -> dict:
    """``[(field, "v1<separator>v2..."), ...]`` -> ``{field: (v1, v2, ...)}``, aliases resolved;
    a UsageError naming ``option`` for text that is not ``count`` (any, if None) numbers."""
    values = {}
    for name, text in pairs:
        name = ALIASES.get(name, name)
        try:
            numbers = tuple(float(part) for part in text.split(separator) if part.strip())
            if count is not None and len(numbers) != count:
                raise ValueError
        except ValueError:
            raise UsageError(f"cannot parse {option} {name}={text!r}: expected {expected}") from None
        values[name] = numbers
    return values


def pbt_command(args) -> int:
    from jaxrl import algorithms
    from jaxrl.workflow import metrics, pbt, sweep

    record = algorithms.get(args.algorithm)
    config = make_config(record, args)
    _use_compilation_cache(args)
    if not args.bounds:
        raise UsageError("give at least one --bounds field=low:high")
    bounds = _numbers(args.bounds, "--bounds", ":", "low:high", count=2)
    options = _run_options(args, progress=False)
    try:
        num_iterations = record.program(config).num_iterations
        if args.interval < 1 or num_iterations % args.interval:
            raise ValueError(
                f"--interval must be an int >= 1 dividing the run's {num_iterations} iterations, got {args.interval}"
            )
        chunk_iterations = _chunking(args, num_iterations, unit=args.interval)
        print(
            f"{args.algorithm} on {config.env_id}: a population of {args.population}, exploit/explore every "
            f"{args.interval} iterations (compiling...)",
            flush=True,
        )
        result = pbt.train(
            record,
            config,
            bounds,
            population=args.population,
            interval=args.interval,
            seed=args.seed,
            fraction=args.fraction,
            score_metric=args.score_metric,
            rounds_per_chunk=chunk_iterations // args.interval if args.logdir else None,
            options=options,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    print(f"compiled in {result.compile_seconds:.1f} s, ran in {result.run_seconds:.1f} s\n")
    final_eval = metrics.latest_finite(result.metrics["eval_return"])
    rows = [
        {
            "member": member,
            **{name: float(values[-1, member]) for name, values in result.hyperparams.items()},
            "eval_return": float(final_eval[member]),
            "last_score": float(result.scores[-1, member]),
            "lineage": "-".join(str(m) for m in result.lineage(member)),
        }
        for member in range(args.population)
    ]
    print("final hyper-parameters and evaluation return per member (lineage: whose agent it held each round):")
    print(sweep.format_table(rows, by="eval_return"))
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


# JAX's persistent cache locks its directory only while it bounds its size; jobs sharing
# one directory then never read an entry another is writing.
CACHE_MAX_BYTES = 8 << 30


def _use_compilation_cache(args) -> None:
    if not args.no_cache:
        import jax

        cache_dir = os.environ.get("JAXRL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "jaxrl", "xla"))
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        if jax.config.jax_compilation_cache_max_size == -1:  # unbounded, unlocked: JAX's default
            jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
            _give_entries_access_times(cache_dir)


def _give_entries_access_times(cache_dir: str) -> None:
    """JAX's bounded cache reads an access-time file (``<key>-atime``) beside every entry
    (``<key>-cache``) each time it writes one; entries an unbounded cache wrote (jaxrl
    before it bounded the cache, or a process sharing the directory) have none, and every
    write would fail. They get one, dated now."""
    with contextlib.suppress(OSError), os.scandir(cache_dir) as entries:
        for entry in entries:
            atime = os.path.join(cache_dir, entry.name.removesuffix("-cache") + "-atime")
            if entry.name.endswith("-cache") and not os.path.exists(atime):
                with contextlib.suppress(OSError), open(atime, "xb") as f:
                    f.write(time.time_ns().to_bytes(8, "little"))


def plot_command(args) -> int:
    from jaxrl.workflow import plots

    try:
        plots.plot_runs(args.run_dirs, args.out, metric=args.metric, x=args.x)
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None
    print(f"wrote {args.out}")
    return 0


def _checkpoint_choice(text: str):
    """``--checkpoint``: ``latest``, ``best`` or a step number."""
    if text in ("latest", "best"):
        return text
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--checkpoint must be latest, best or a step number, got {text!r}") from None


def _load_run(args):
    """The saved run ``args`` name, or a UsageError saying why there is none."""
    from jaxrl.workflow import saved

    checkpoint = _checkpoint_choice(args.checkpoint)
    _use_compilation_cache(args)
    try:
        return saved.load(args.run_dir, checkpoint)
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None


def _describe_run(run) -> str:
    program = run.record.program(run.config)
    return (
        f"{run.algorithm} on {run.env_id} ({run.logdir}), checkpoint at iteration {run.step:,} "
        f"of {program.num_iterations:,}"
    )


def _lane_name(run) -> str:
    if run.meta.get("pbt"):
        return "member"
    return "lane" if run.meta.get("settings") else "seed"  # a sweep's lanes are (setting, seed) pairs


def evaluate_command(args) -> int:
    import jax
    import numpy as np

    from jaxrl.workflow import saved

    if args.episodes is not None and args.episodes < 1:
        raise UsageError(f"--episodes must be >= 1, got {args.episodes}")
    run = _load_run(args)
    if args.video and not saved.can_render(run.env_id, run.config.env_kwargs):
        raise UsageError(
            f"--video: env {run.env_id!r} cannot render; only rendering envs support --video: Gymnasium envs "
            f"('gymnasium:<id>') with an rgb_array render mode"
        )
    if args.seed is None:  # the evaluation the run ran (or would have run) at the checkpoint
        keys, reproduces = run.eval_keys(), run.evaluated_at_step()
        source = f"the keys of iteration {run.step:,}'s evaluation" + (
            "" if reproduces else " (the run made none there)"
        )
    else:
        keys, reproduces = jax.random.split(jax.random.key(args.seed), run.lanes), False
        source = f"seed {args.seed}"
    episodes = run.config.eval_episodes if args.episodes is None else args.episodes
    reproduces = reproduces and episodes == run.config.eval_episodes and not args.sampled
    mode = "sampled" if args.sampled else "deterministic"
    print(_describe_run(run), flush=True)
    print(f"{episodes} {mode} episode(s) per {_lane_name(run)}, from {source} (compiling...)", flush=True)
    result = saved.evaluate(run, keys, episodes=episodes, deterministic=not args.sampled)
    returns, lengths = np.asarray(result.returns, np.float64), np.asarray(result.lengths, np.float64)
    columns = {
        # float32, averaged as the run's evaluation averages its episodes
        "return": np.asarray(jax.numpy.mean(result.returns, axis=1), np.float64),
        "std": returns.std(axis=1),
        "min": returns.min(axis=1),
        "max": returns.max(axis=1),
        "length": lengths.mean(axis=1),
    }
    if reproduces:
        columns["run's eval"] = run.logged_eval_return()
    print()
    print(f"{_lane_name(run):>6}" + "".join(f"  {name:>10}" for name in columns))
    for lane in range(run.lanes):
        print(f"{lane:>6}" + "".join(f"  {values[lane]:>10.1f}" for values in columns.values()))
    print(f"{'mean':>6}" + "".join(f"  {np.mean(values):>10.1f}" for values in columns.values()))
    videos = []
    if args.video:
        os.makedirs(args.video, exist_ok=True)
        print()
        for lane in range(run.lanes):
            try:
                frames, episode_return, fps = saved.render_episode(
                    run, lane, seed=0 if args.seed is None else args.seed, deterministic=not args.sampled
                )
            except ValueError as error:  # the env could not draw a frame (e.g. pygame missing)
                raise UsageError(str(error)) from None
            files = saved.save_frames(frames, os.path.join(args.video, f"{_lane_name(run)}{lane}"), fps)
            videos.append({"files": files, "frames": len(frames), "return": episode_return})
            shown = f"{len(frames)} frames, return {episode_return:g}"
            print(f"video of {_lane_name(run)} {lane}: {', '.join(files)} ({shown})")
    if args.json:
        summary = {
            "run_dir": run.logdir,
            "algorithm": run.algorithm,
            "env_id": run.env_id,
            "checkpoint_step": run.step,
            "episodes": episodes,
            "deterministic": not args.sampled,
            "keys": "run" if args.seed is None else f"seed {args.seed}",
            "mean_return": [float(v) for v in columns["return"]],
            "mean_length": [float(v) for v in columns["length"]],
            "returns": returns.tolist(),
            **({"run_eval_return": [float(v) for v in columns["run's eval"]]} if reproduces else {}),
            **({"videos": videos} if videos else {}),
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


def record_command(args) -> int:
    import jax

    from jaxrl import data
    from jaxrl.workflow import saved

    if not args.out.endswith(".npz"):
        raise UsageError(f"--out must end in .npz (a dataset file), got {args.out!r}")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        raise UsageError(f"--out {args.out!r}: no such directory {os.path.dirname(os.path.abspath(args.out))!r}")
    for flag, value in (("--steps", args.steps), ("--envs", args.envs)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    if args.steps % args.envs:
        raise UsageError(f"--steps ({args.steps}) must be a multiple of --envs ({args.envs})")
    if args.run_dir and args.part:
        raise UsageError("give RUN_DIR or --part, not both (RUN_DIR is --part RUN_DIR:1)")
    if not args.run_dir and not args.part:
        raise UsageError("nothing to record: give RUN_DIR, or --part SOURCE:SHARE (repeatable)")
    sources = [_record_part(text) for text in args.part] if args.part else [(args.run_dir, args.run_dir, None, 1.0)]
    _checkpoint_choice(args.checkpoint)  # a bad default is an error even where every part names its own
    try:  # the shares, before any checkpoint is restored
        data.part_steps(
            [data.Part(label, None, None, (), share) for label, _, _, share in sources], args.steps, args.envs
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    _use_compilation_cache(args)
    runs = {}
    for label, source, checkpoint, _ in sources:
        if source != "random" and label not in runs:
            runs[label] = _load_run_at(source, checkpoint or args.checkpoint)
            if not 0 <= args.policy_seed < runs[label].lanes:
                raise UsageError(
                    f"--policy-seed must be in [0, {runs[label].lanes - 1}] (the seeds of {source}), "
                    f"got {args.policy_seed}"
                )
    env_id, env_kwargs = _record_env(args, runs)
    mode = "sampled" if args.sampled else "deterministic"
    try:
        parts = [
            data.random_part(env_id, share, env_kwargs, name=label)
            if source == "random"
            else saved.part(
                runs[label], share, args.envs, lane=args.policy_seed, deterministic=not args.sampled, name=label
            )
            for label, source, _, share in sources
        ]
    except ValueError as error:  # random actions on an unbounded Box
        raise UsageError(str(error)) from None
    steps = data.part_steps(parts, args.steps, args.envs)
    if not args.part:
        run = runs[args.run_dir]
        print(_describe_run(run), flush=True)
        print(
            f"recording {args.steps:,} transitions of {_lane_name(run)} {args.policy_seed}'s {mode} policy "
            f"from {args.envs} env(s) (compiling...)",
            flush=True,
        )
    else:
        print(f"recording {args.steps:,} transitions on {env_id} from {args.envs} env(s) (compiling...)", flush=True)
        for (label, source, _, share), count in zip(sources, steps, strict=True):
            if source == "random":
                what = "uniformly random actions"
            else:
                run = runs[label]
                what = f"{_lane_name(run)} {args.policy_seed}'s {mode} policy: {_describe_run(run)}"
            print(f"  {label}: {count:,} transitions ({share:g}) of {what}", flush=True)
    dataset = data.collect_mixture(parts, env_id, jax.random.key(args.seed), args.steps, args.envs, env_kwargs)
    data.save_dataset(args.out, dataset)
    _print_dataset(args.out, data.describe(dataset))
    env_params = "".join(f" --env-param {k}={json.dumps(v)}" for k, v in env_kwargs.items())
    print(f"clone it: python -m jaxrl train bc --env {env_id}{env_params} --set dataset_path={args.out}")
    return 0


def _record_part(text: str) -> tuple[str, str, str | None, float]:
    """``--part SOURCE[:SHARE]`` -> ``(label, source, checkpoint, share)``: ``source`` a run
    directory or ``random``, ``checkpoint`` from ``RUN_DIR@CHECKPOINT`` (None: --checkpoint)."""
    label, colon, share_text = text.rpartition(":")
    if not colon:
        label, share_text = text, ""
    share = 1.0
    if share_text:
        try:
            share = float(share_text)
        except ValueError:
            raise UsageError(f"--part {text!r}: its share {share_text!r} is not a number (SOURCE:SHARE)") from None
    if not label:
        raise UsageError(f"--part {text!r}: name a run directory or random before the share")
    source, checkpoint = label, None
    head, at, tail = label.rpartition("@")
    if at and head and (tail in ("latest", "best") or tail.isdigit()):
        source, checkpoint = head, tail
    return label, source, checkpoint, share


def _load_run_at(run_dir: str, checkpoint: str):
    """The saved run in ``run_dir`` at ``checkpoint`` (its text), or a UsageError saying why not."""
    from jaxrl.workflow import saved

    choice = _checkpoint_choice(checkpoint)
    try:
        return saved.load(run_dir, choice)
    except (ValueError, OSError) as error:
        raise UsageError(str(error)) from None


def _record_env(args, runs: dict) -> tuple[str, dict]:
    """``(env_id, env_kwargs)`` of a recording: the saved runs' (one env for all of them,
    which --env / --env-param, if given, must be), else --env and --env-param."""
    asked = {}
    for name, text in args.env_param:
        try:
            asked[name] = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(f"cannot parse env parameter {name}={text!r}") from None
    if not runs:
        if args.env is None:
            raise UsageError("--env is needed when every part is random (saved runs bring their env)")
        return args.env, asked
    (first_label, first), *others = runs.items()
    env_id, env_kwargs = first.env_id, dict(first.config.env_kwargs)
    for label, run in others:
        if (run.env_id, dict(run.config.env_kwargs)) != (env_id, env_kwargs):
            raise UsageError(
                f"{label} ran on {run.env_id} {dict(run.config.env_kwargs)}, {first_label} on {env_id} "
                f"{env_kwargs}: a dataset is recorded on one env"
            )
    if args.env is not None and args.env != env_id:
        raise UsageError(f"--env {args.env} is not the env of {first_label} ({env_id})")
    if args.env_param and asked != env_kwargs:
        raise UsageError(f"--env-param {asked} is not the env parameters of {first_label} ({env_kwargs})")
    return env_id, env_kwargs


def _print_dataset(path: str, described: dict) -> None:
    """The dataset's size, and its episode returns per part and over all (jaxrl.data.describe)."""
    finished = described["episodes"]
    mean = f", mean return {described['episode_return_mean']:.1f}" if finished else ""
    print(f"wrote {path}: {described['transitions']:,} transitions, {finished} finished episode(s){mean}")

    def returns(entry) -> str:
        if not entry["episodes"]:
            return "-"
        return f"{entry['episode_return_mean']:.1f} ± {entry['episode_return_std']:.1f}"

    rows = [(part["name"], part["transitions"], part["episodes"], returns(part)) for part in described["parts"]]
    rows.append(("all", described["transitions"], finished, returns(described)))
    width = max(len("part"), *(len(str(row[0])) for row in rows))
    print(f"  {'part':<{width}}  {'transitions':>11}  {'episodes':>8}  return (mean ± std)")
    for name, transitions, episodes, shown in rows:
        print(f"  {name:<{width}}  {transitions:>11,}  {episodes:>8,}  {shown}")
    if finished:
        print(
            f"  returns from {described['episode_return_min']:.1f} to {described['episode_return_max']:.1f}, "
            f"mean episode length {described['episode_length_mean']:.1f}"
        )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Unknown algorithms get our one-line message rather than argparse's choice dump.
    if len(argv) >= 2 and argv[0] in ("train", "sweep", "pbt") and not argv[1].startswith("-"):
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
        if args.command == "pbt":
            return pbt_command(args)
        if args.command == "evaluate":
            return evaluate_command(args)
        if args.command == "record":
            return record_command(args)
    except UsageError as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except stopping.Stopped as stopped:  # a signal stopped the run; it said so on stderr
        return stopped.exit_status
    except OSError as error:
        if not _failed_while_running(error):
            raise
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return RUN_ERROR
    return USAGE_ERROR


def _failed_while_running(error: BaseException) -> bool:
    """A failure of the run's own writing (a checkpoint or a log a full disk cut short),
    not of its input."""
    from jaxrl.workflow.checkpoint import CheckpointSaveError

    no_room = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
    return isinstance(error, CheckpointSaveError) or (isinstance(error, OSError) and error.errno in no_room)
