"""A2C, REINFORCE, IMPALA and behaviour-cloning throughput on CartPole-v1 at jaxrl's defaults, PPO for reference.

    python benchmarks/onpolicy_throughput.py                    # each Config's own total_timesteps, 1 and 8 seeds
    python benchmarks/onpolicy_throughput.py --quick            # smoke test (40k steps, 1,000 BC updates, 1 run)
    python benchmarks/onpolicy_throughput.py --algos a2c bc --seeds 1
    python benchmarks/onpolicy_throughput.py --markdown out.md

Rows, per algorithm and number of ``jax.vmap``-ed seeds, each measured in a fresh
subprocess with JAX's persistent compilation cache off:

* ``a2c.Config()``, ``reinforce.Config()``, ``impala.Config()`` (policy_lag 1) and
  ``impala.Config(policy_lag=4)``: the one implementation in ``jaxrl/algorithms/a2c.py``
  with ``advantage`` = gae / monte_carlo / vtrace (``reinforce.py`` and ``impala.py`` are
  Config presets), each at its own defaults on CartPole-v1;
* ``ppo.Config()``: PPO at its defaults, as the reference row (its comparison with rejax
  is ``benchmarks/ppo_throughput.py``);
* ``bc.Config()``: behaviour cloning at its defaults, trained from a CartPole dataset.
  It takes no env steps, so it is measured in gradient updates per second. The dataset
  is recorded once, before the BC measurements, in a subprocess of its own (so its
  compile does not warm anything up for the measured one) with
  ``jaxrl.data.collect_dataset``: ``--bc-dataset-size`` transitions (default 10,000, from
  10 envs) of a UNIFORMLY RANDOM policy, saved to a temporary ``.npz`` and loaded by each
  BC child (``--bc-dataset PATH`` uses a file written by ``jaxrl.data.save_dataset``
  instead, e.g. an expert's). Only the cost of an update depends on the data, not its
  quality: the BC return is that of a clone of a random policy (~20) and says nothing
  about BC's quality (``tests/test_bc.py`` checks that, from a PPO expert).

For each: compile time (``jax.jit(f).lower(...)`` plus ``.compile()``, tracing
included; reported separately from the run time); the run time of the compiled function
until ``block_until_ready``, run ``--runs`` times (the table reports the fastest; all are
shown, with the CPU load other processes put on the machine during each); steps/s =
seeds * env steps per seed / run time, where env steps per seed is ``state.timesteps``
after the run (column ``total_timesteps trained``: the Config's ``total_timesteps``
rounded down to whole iterations, e.g. 199,936 of A2C's 200,000; for REINFORCE it counts
every simulated step, also those after each env's first episode); updates/s = seeds *
gradient updates per seed / run time (A2C family: one per iteration; PPO:
num_epochs * num_minibatches per iteration; BC: ``num_updates``); the final evaluation
return (mean over seeds of the last evaluation's mean return; deterministic policy) and,
for the RL rows, the last finished training episodes' return. Seeds are ``jax.vmap``-ed
over the whole training run (BC: the dataset is shared, not copied per seed).

Every Config is the default but for ``num_reports=0`` (no host callbacks, as in the
other benchmarks), and ``--total-timesteps`` / ``--bc-updates`` if given (``--quick``:
40,000 steps, 1,000 updates). Evaluation is left at the Configs' default: 10
evaluations of 10 episodes per run (``--evals``, ``--eval-episodes``; ``--evals 0``
turns it off), inside the timed run. Evaluation episodes are not counted in steps/s;
they cost more the better the policy is (CartPole episodes last up to 500 steps).

A measurement that fails, times out (``--timeout``) or hangs (no CPU use for
``--stall-timeout`` seconds; it is then killed) is reported in the table, with the phase
it was in, instead of stopping the benchmark.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time

from _harness import (add_common_arguments, derive_timing, fmt, last_finite, machine_lines, markdown_table,
                      measure_and_emit, measure_in_child, nanmean, other_cpu_warning, parse_arguments, phase,
                      seed_list, settings_lines, text_table, time_compiled, timing_status, write_markdown)

ENV_ID = "CartPole-v1"
ALGOS = ("a2c", "reinforce", "impala", "impala-lag4", "ppo", "bc")
LABELS = {"a2c": "a2c.Config()", "reinforce": "reinforce.Config()", "impala": "impala.Config()",
          "impala-lag4": "impala.Config(policy_lag=4)", "ppo": "ppo.Config() (reference)", "bc": "bc.Config()"}
QUICK_TIMESTEPS = 40_000
QUICK_BC_UPDATES = 1_000


# ============================================================================ child


def _config(algo, args):
    """The algorithm's module and its default Config (with the benchmark's overrides)."""
    from jaxrl.algorithms import a2c, bc, impala, ppo, reinforce

    common = dict(env_id=ENV_ID, num_reports=0, num_evals=args.evals, eval_episodes=args.eval_episodes)
    if algo == "bc":
        return bc, bc.Config(**common, **({"num_updates": args.bc_updates} if args.bc_updates else {}))
    if args.total_timesteps:
        common["total_timesteps"] = args.total_timesteps
    module, extra = {"a2c": (a2c, {}), "reinforce": (reinforce, {}), "impala": (impala, {}),
                     "impala-lag4": (impala, {"policy_lag": 4}), "ppo": (ppo, {})}[algo]
    return module, module.Config(**common, **extra)


def _settings(config):
    import dataclasses

    return {f.name: repr(getattr(config, f.name)) for f in dataclasses.fields(config)}


def run_onpolicy(jax, args, algo, seeds):
    import numpy as np

    module, config = _config(algo, args)
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(module.train, in_axes=(0, None))
    lower_s, compile_s, run_times, out, other_cpu = time_compiled(jax, train, (keys, config), args.runs)
    metrics = jax.device_get(out.metrics)
    updates_per_iteration = config.num_epochs * config.num_minibatches if algo == "ppo" else 1
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=int(np.asarray(out.state.timesteps).reshape(-1)[0]),
        updates_per_seed=config.num_iterations * updates_per_iteration, iterations=config.num_iterations,
        final_eval_return=nanmean(last_finite(metrics["eval_return"])) if args.evals else float("nan"),
        final_train_return=nanmean(last_finite(metrics["episode_return"])) if "episode_return" in metrics
        else float("nan"),
        settings=_settings(config),
    )


def run_bc(jax, args, seeds):
    import numpy as np

    from jaxrl import data

    module, config = _config("bc", args)
    phase("loading the dataset")
    dataset = data.load_dataset(args.dataset_file, env_id=ENV_ID)
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(module.train, in_axes=(0, None, None))
    lower_s, compile_s, run_times, out, other_cpu = time_compiled(jax, train, (keys, config, dataset), args.runs)
    metrics = jax.device_get(out.metrics)
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=0, updates_per_seed=int(np.asarray(out.state.updates).reshape(-1)[0]),
        iterations=config.num_updates,
        final_eval_return=nanmean(last_finite(metrics["eval_return"])) if args.evals else float("nan"),
        final_train_return=float("nan"), dataset_size=int(dataset.size), settings=_settings(config),
    )


def record_dataset(jax, args):
    """A uniformly random CartPole policy's transitions, saved to ``args.dataset_file``."""
    import numpy as np

    from jaxrl import data, envs

    spec = envs.spec(*envs.make(ENV_ID))

    def random_policy(params, obs, key):
        return jax.random.randint(key, (obs.shape[0],), 0, spec.num_actions)

    phase("recording the dataset")
    start = time.perf_counter()
    dataset = jax.block_until_ready(data.collect_dataset(random_policy, (), ENV_ID, jax.random.key(args.seed + 1),
                                                         args.bc_dataset_size, num_envs=10))
    seconds = time.perf_counter() - start
    data.save_dataset(args.dataset_file, dataset)
    episodes = {k: float(np.asarray(v)) for k, v in data.episode_metrics(dataset).items()}
    return dict(record_s=seconds, dataset_size=int(dataset.size), **episodes)


def child_main(args):
    algo, seeds = args.one[0], int(args.one[1])

    def measure(jax):
        if algo == "dataset":
            return record_dataset(jax, args)
        if algo == "bc":
            return run_bc(jax, args, seeds)
        return run_onpolicy(jax, args, algo, seeds)

    measure_and_emit({"algo": algo, "seeds": seeds}, measure, jaxrl_settings=True, packages=("gymnax",))


# ============================================================================ parent


def _measure(args, algo, seeds):
    return measure_in_child(__file__, {"algo": algo, "seeds": seeds}, args,
                            ("evals", "eval_episodes", "seed", "runs", "bc_dataset_size", "dataset_file",
                             "total_timesteps", "bc_updates"))


def _derive(results):
    derive_timing(results)
    for r in results:
        if "error" not in r:
            r["updates_per_s"] = r["seeds"] * r["updates_per_seed"] / r["run_s"]


HEADERS = ["algorithm", "seeds", "total_timesteps trained", "updates/seed", "compile s", "run s (fastest)",
           "all runs s", "other CPU load", "env steps/s", "updates/s", "final eval return", "last train ep. return"]
LEFT = (0,)


def _rows(results):
    rows = []
    for r in results:
        if "error" in r:
            rows.append([LABELS[r["algo"]], str(r["seeds"]), "FAILED (see below)"] + ["-"] * (len(HEADERS) - 3))
            continue
        rows.append([
            LABELS[r["algo"]], str(r["seeds"]), f"{r['steps_per_seed']:,}" if r["steps_per_seed"] else "-",
            f"{r['updates_per_seed']:,}", fmt(r["total_compile_s"], ".1f"), fmt(r["run_s"], ".2f"),
            ", ".join(f"{t:.2f}" for t in r["run_times"]),
            ", ".join(fmt(c, ".2f") for c in r.get("other_cpu", [])) or "-",
            fmt(r["steps_per_s"], ",.0f"), fmt(r["updates_per_s"], ",.0f"),
            fmt(r["final_eval_return"], ".1f"), fmt(r["final_train_return"], ".1f"),
        ])
    return rows


def _print_status(result, start):
    if "error" in result:
        status = result["error"]
    elif "record_s" in result:
        status = f"recorded {result['dataset_size']:,} transitions in {result['record_s']:.1f}s"
    else:
        status = timing_status(result)
    print(f"    {status} (wall {time.perf_counter() - start:.0f}s, load {os.getloadavg()[0]:.2f})",
          file=sys.stderr, flush=True)


def parent_main(args):
    command = shlex.join(["python"] + sys.argv)
    notes = []
    plan = [(algo, seeds) for algo in args.algos for seeds in args.seeds]
    results, tmpdir = [], None
    try:
        if "bc" in args.algos:
            if args.bc_dataset:
                args.dataset_file = os.path.abspath(args.bc_dataset)
                notes.append(f"BC dataset: {args.dataset_file} (--bc-dataset)")
            else:
                tmpdir = tempfile.mkdtemp(prefix="jaxrl-bench-")
                args.dataset_file = os.path.join(tmpdir, "cartpole-random.npz")
                print(f"[0/{len(plan)}] recording the BC dataset ...", file=sys.stderr, flush=True)
                start = time.perf_counter()
                recorded = _measure(args, "dataset", 1)
                _print_status(recorded, start)
                if "error" in recorded:
                    notes.append(f"BC dataset: recording failed: {recorded['error']}")
                    plan = [(a, s) for a, s in plan if a != "bc"]
                else:
                    notes.append(
                        f"BC dataset: {recorded['dataset_size']:,} transitions of a uniformly random policy "
                        f"(10 envs, jaxrl.data.collect_dataset, recorded in its own subprocess in "
                        f"{recorded['record_s']:.1f} s incl. compile); {recorded['episodes']:.0f} episodes ended "
                        f"in it, mean return {recorded['episode_return']:.1f}. BC's return is a clone of that "
                        "policy's: a throughput figure, not a quality one.")
        for n, (algo, seeds) in enumerate(plan, 1):
            print(f"[{n}/{len(plan)}] {LABELS[algo]} x{seeds} seeds ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            result = _measure(args, algo, seeds)
            results.append(result)
            _print_status(result, start)
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    _derive(results)
    rows = _rows(results)

    steps = f"{args.total_timesteps:,} env steps per seed" if args.total_timesteps else "each Config's total_timesteps"
    title = (f"On-policy algorithms and BC on {ENV_ID} at jaxrl's default Configs, {steps}, seeds vmapped: "
             f"{', '.join(map(str, args.seeds))}")
    machine = machine_lines(results, command)
    machine.append("updates/s = seeds * gradient updates per seed / run s (A2C family: 1 per iteration; PPO: "
                   "num_epochs * num_minibatches per iteration; BC: num_updates, it takes no env steps)")
    errors = [f"{LABELS[r['algo']]} x{r['seeds']}: {r['error']}" for r in results if "error" in r]
    notes += other_cpu_warning(results)
    evaluation = (f"evaluation: {args.evals} x {args.eval_episodes} episodes per run, deterministic policy, inside "
                  "the timed run (not counted in env steps/s)" if args.evals else "evaluation: off")
    config_note = ("Configs: defaults but num_reports=0 (no host callbacks)"
                   + (f", total_timesteps={args.total_timesteps:,}" if args.total_timesteps else "")
                   + (f", BC num_updates={args.bc_updates:,}" if args.bc_updates else "")
                   + "; total_timesteps trained = state.timesteps after the run, total_timesteps rounded down "
                   "to whole iterations (num_envs * num_steps); REINFORCE's counts every simulated step "
                   "(8 envs x 500 per iteration), "
                   "also those after each env's first episode, which it does not learn from")

    print()
    print(title)
    print()
    print(text_table(HEADERS, rows, left=LEFT))
    print()
    for line in errors:
        print("error: " + line)
    for line in machine + [evaluation, config_note] + notes:
        print(line)
    for line in settings_lines(results, lambda r: LABELS[r["algo"]]):
        print(" - " + line)

    if args.markdown:
        md = [f"## {title}", "", markdown_table(HEADERS, rows), ""]
        md += [f"- error: {line}" for line in errors]
        md += [f"- {line}" for line in machine + [evaluation, config_note] + notes]
        md += [f"- {line}" for line in settings_lines(results, lambda r: LABELS[r["algo"]])]
        write_markdown(args.markdown, md, results)
    return 0 if any("error" not in r for r in results) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS),
                        help="rows to measure (default: all; impala-lag4 = impala.Config(policy_lag=4))")
    parser.add_argument("--seeds", type=seed_list, default=[1, 8],
                        help='numbers of vmapped seeds to measure, e.g. "1,8" (default)')
    parser.add_argument("--total-timesteps", type=int, default=None,
                        help="env steps per seed for every RL row (default: each Config's own, 200,000 for the "
                             f"A2C family, 500,000 for PPO; --quick: {QUICK_TIMESTEPS:,})")
    parser.add_argument("--bc-updates", type=int, default=None,
                        help="BC gradient updates per seed (default: bc.Config's 5,000; "
                             f"--quick: {QUICK_BC_UPDATES:,})")
    parser.add_argument("--bc-dataset", metavar="NPZ",
                        help="train BC on this file (jaxrl.data.save_dataset, CartPole-v1) instead of recording "
                             "a random policy's transitions")
    parser.add_argument("--bc-dataset-size", type=int, default=10_000,
                        help="transitions of the random-policy BC dataset, a multiple of 10 (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: {QUICK_TIMESTEPS:,} steps, {QUICK_BC_UPDATES:,} BC updates, "
                             "1 run per measurement")
    parser.add_argument("--evals", type=int, default=10,
                        help="evaluations per run, 0 = off (default: %(default)s, the Configs' default)")
    parser.add_argument("--eval-episodes", type=int, default=10,
                        help="episodes per evaluation (default: %(default)s, the Configs' default)")
    add_common_arguments(parser, ("ALGO", "SEEDS"))
    parser.add_argument("--dataset-file", default=None, help=argparse.SUPPRESS)
    args = parse_arguments(parser, argv)
    args.algos = list(dict.fromkeys(args.algos))
    args.seeds = list(dict.fromkeys(args.seeds))
    if args.quick:
        args.total_timesteps = args.total_timesteps or QUICK_TIMESTEPS
        args.bc_updates = args.bc_updates or QUICK_BC_UPDATES
    if args.total_timesteps is not None and args.total_timesteps < 4_000:
        parser.error("--total-timesteps must be at least 4,000 (one REINFORCE iteration: 8 envs x 500 steps)")
    if args.bc_updates is not None and args.bc_updates < 1:
        parser.error("--bc-updates must be >= 1")
    if args.bc_dataset_size < 256 or args.bc_dataset_size % 10:
        parser.error("--bc-dataset-size must be a multiple of 10 and at least bc.Config's batch_size, 256")
    if args.evals < 0 or args.eval_episodes < 1:
        parser.error("--evals must be >= 0, --eval-episodes >= 1")
    if args.one:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
