"""DQN throughput on CartPole-v1 at rejax's CartPole configuration, jaxrl vs rejax.

    python benchmarks/dqn_throughput.py                       # 100k steps, 1 and 8 seeds
    python benchmarks/dqn_throughput.py --quick               # smoke test (20k steps, 1 run each)
    python benchmarks/dqn_throughput.py --seeds 1 --breakdown # + per-iteration cost breakdown
    python benchmarks/dqn_throughput.py --markdown out.md --plot out.png

Rows, each measured in a fresh subprocess with JAX's persistent compilation cache off:

* ``jaxrl``: jaxrl's DQN with rejax's CartPole DQN settings translated into a
  ``dqn.Config`` (``REJAX_CARTPOLE_DQN`` and ``MAPPING`` below; the mapping is printed);
* ``rejax``: rejax's DQN at those settings (if rejax is installed and not ``--no-peers``),
  and the ratio jaxrl / rejax of steady-state steps per second and of compile time;
* ``jaxrl default``: jaxrl's own ``dqn.Config()`` (different settings: for information);
* ``jaxrl rainbow``: ``dqn.rainbow()`` (for information; ``--rainbow-seeds``, default 1).

For each: compile time (``jax.jit(f).lower(...)`` plus ``.compile()``, tracing included);
the run time of the compiled function until ``block_until_ready``, run ``--runs`` times
(the table reports the fastest; all are shown); steps/s = seeds * env steps per seed /
run time; the final evaluation return (mean over seeds of the last evaluation's mean
return) and the last finished training episodes' return. Seeds are ``jax.vmap``-ed over
the whole training run.

Both sides evaluate 10 times per run (``--evals``), 10 episodes each (``--eval-episodes``),
inside the timed run, as jaxrl does by default. rejax's own CartPole default evaluates every
2,500 steps with 128 episodes: ``--evals 40 --eval-episodes 128`` reproduces that load on
both sides; ``--evals 0`` turns evaluation off on both sides.

rejax 0.1.3 runs through ``gymnax.wrappers.LegacyStepAPIWrapper`` (it expects gymnax's
pre-1.0 five-value step). A measurement that fails, times out (``--timeout``) or hangs
(no CPU use for ``--stall-timeout`` seconds; it is then killed) is reported in the table,
with the phase it was in, instead of stopping the benchmark.

``--breakdown`` adds a per-iteration cost breakdown (1 seed, no vmap, fresh subprocesses):
each part of an iteration (acting + env step + buffer write; one replay sample; one sample
+ gradient update; a whole iteration; one evaluation) compiled as a ``lax.scan`` of many
repetitions from a state with a filled buffer, so what dominates the run time is visible.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time

from _harness import (add_common_arguments, add_peer_arguments, derive_timing, measure_and_emit, measure_in_child,
                      other_cpu_warning, parse_arguments, peer_missing, peer_ratios, phase, rejax_env,
                      rejax_returns, settings_lines, timing_status, write_markdown)
from _harness import (cpu_snapshot as _cpu_snapshot, fmt as _fmt, last_finite as _last_finite,
                      machine_lines as _machine_lines, markdown_table as _markdown_table, nanmean as _nanmean,
                      other_cpu as _other_cpu, seed_list as _seed_list, text_table as _text_table,
                      time_compiled as _time_compiled)

ENV_ID = "CartPole-v1"
RUNS = ("jaxrl", "rejax", "jaxrl-default", "jaxrl-rainbow")
LABELS = {"jaxrl": "jaxrl (rejax cfg)", "rejax": "rejax", "jaxrl-default": "jaxrl dqn.Config()",
          "jaxrl-rainbow": "jaxrl dqn.rainbow()"}

# rejax's CartPole DQN: the "dqn" section of rejax's configs/gymnax/cartpole.yaml (the
# config file of the rejax repository; it is not shipped in the 0.1.3 wheel), plus the
# rejax 0.1.3 code defaults it does not set (marked "code default").
REJAX_CARTPOLE_DQN = dict(
    agent="DuelingQNetwork",
    activation="swish",
    hidden_layer_sizes=(64, 64),   # code default (DQN.create_agent)
    num_envs=10,
    buffer_size=50_000,
    fill_buffer=5_000,
    batch_size=100,
    max_grad_norm=10.0,            # optax.clip: element-wise
    learning_rate=0.001,
    num_epochs=5,                  # gradient updates per iteration (one env step per env)
    total_timesteps=100_000,
    eval_freq=2_500,
    target_update_freq=1,          # code default (the yaml's "target_update_freq: 200" is commented out)
    polyak=0.98,
    eps_start=1.0,
    eps_end=0.05,
    exploration_fraction=0.5,
    gamma=0.99,
    ddqn=True,
    normalize_observations=False,
    normalize_rewards=False,       # code default
)


def jaxrl_fields(r=REJAX_CARTPOLE_DQN, total_timesteps=None):
    """rejax's DQN settings ``r`` as jaxrl ``dqn.Config`` fields, and per field the rejax
    setting(s) it comes from and how (``MAPPING``)."""
    num_envs = r["num_envs"]
    # rejax: one vmapped env step per iteration, so global_step moves by num_envs; the
    # target moves when global_step crosses a multiple of target_update_freq.
    if r["target_update_freq"] <= num_envs:
        target_iterations = 1
    else:
        target_iterations = r["target_update_freq"] // num_envs
    fields = dict(
        num_envs=num_envs,
        num_steps=1,
        num_updates=r["num_epochs"],
        batch_size=r["batch_size"],
        buffer_size=r["buffer_size"],
        # rejax trains in an iteration iff global_step > fill_buffer *before* it collects,
        # i.e. after fill_buffer // num_envs + 1 random-action iterations.
        learning_starts=(r["fill_buffer"] // num_envs + 1) * num_envs,
        total_timesteps=r["total_timesteps"] if total_timesteps is None else total_timesteps,
        network="mlp",
        hidden_sizes=tuple(r["hidden_layer_sizes"]),
        activation={"swish": "silu"}.get(r["activation"], r["activation"]),
        double=bool(r["ddqn"]),
        dueling=r["agent"] == "DuelingQNetwork",
        n_step=1, prioritized=False, distributional=False, noisy=False,
        target_update_period=r["num_epochs"] * target_iterations,
        tau=round(1.0 - r["polyak"], 12),
        loss="mse",
        learning_rate=r["learning_rate"],
        anneal_lr=False,
        max_grad_norm=r["max_grad_norm"],
        gamma=r["gamma"],
        epsilon_start=r["eps_start"],
        epsilon_end=r["eps_end"],
        exploration_fraction=r["exploration_fraction"],
    )
    return fields


# (rejax settings, jaxrl dqn.Config fields, exactly the same?, how). Values are read from
# REJAX_CARTPOLE_DQN and jaxrl_fields(); a name in neither is printed as it is.
MAPPING = [
    (("num_envs",), ("num_envs",), True, ""),
    (("(1 env step per env per iteration)",), ("num_steps",), True, ""),
    (("num_epochs",), ("num_updates",), True, "gradient updates per iteration, each on a fresh batch"),
    (("batch_size",), ("batch_size",), True, ""),
    (("buffer_size",), ("buffer_size",), True, "transitions, FIFO on both sides"),
    (("fill_buffer",), ("learning_starts",), True,
     "rejax updates once global_step > fill_buffer, tested before collecting: "
     "(fill_buffer // num_envs + 1) * num_envs random-action steps"),
    (("total_timesteps",), ("total_timesteps",), True, "iterations of num_envs steps, the same count"),
    (("agent",), ("dueling",), True, "value + advantage - mean(advantage)"),
    (("hidden_layer_sizes",), ("hidden_sizes",), True, ""),
    (("activation",), ("activation",), True, "swish == silu"),
    (("ddqn",), ("double",), True, ""),
    (("target_update_freq", "polyak"), ("target_update_period", "tau"), True,
     "target <- polyak * target + (1 - polyak) * online after every iteration = every num_epochs updates"),
    (("(optax.l2_loss)",), ("loss",), True, "0.5 * td^2, mean over the batch"),
    (("learning_rate",), ("learning_rate", "anneal_lr"), True, "Adam (eps 1e-8 on both sides), constant"),
    (("max_grad_norm",), ("max_grad_norm",), False,
     "rejax: optax.clip, each gradient ELEMENT to [-10, 10]; jaxrl: global norm to 10"),
    (("gamma",), ("gamma",), True, ""),
    (("eps_start", "eps_end", "exploration_fraction"),
     ("epsilon_start", "epsilon_end", "exploration_fraction"), True,
     "linear over exploration_fraction * total_timesteps env steps, from step 0"),
    (("normalize_observations", "normalize_rewards"), ("(no normalisation)",), True, ""),
]

DIFFERENCES = [
    "Not settable in jaxrl (differ by design): gradient clipping (rejax element-wise optax.clip(10), "
    "jaxrl clip_by_global_norm(10)).",
    "Replay sampling: rejax draws each batch WITHOUT replacement (jax.random.choice over the whole "
    "50,000-slot buffer with probabilities, i.e. Gumbel top-k over 50,000 per update); jaxrl draws "
    "uniformly WITH replacement from the filled part.",
    "Time limit: rejax stores done = terminated or truncated and does not bootstrap at CartPole's "
    "500-step limit; jaxrl bootstraps truncated episodes from the pre-reset observation.",
    "Initialisation: rejax flax defaults (lecun-normal kernels); jaxrl orthogonal (sqrt 2 torso, 1.0 heads).",
    "Evaluation: same count and episodes on both sides; jaxrl acts greedily, rejax with its own act "
    "(epsilon 0.005). rejax's eval_freq is set so it runs the same 10,000 iterations in `evals` "
    "equal blocks; skip_initial_evaluation=True.",
    "rejax: env = LegacyStepAPIWrapper(LogWrapper(gymnax CartPole-v1)); LogWrapper only to read the "
    "last finished training-episode returns (jaxrl tracks them with its own EpisodeStatistics).",
    "jaxrl rows: num_reports=0 (no host callbacks); evaluation = greedy policy, `evals` times spread "
    "over the run incl. the last iteration. The `jaxrl dqn.Config()` and `dqn.rainbow()` rows use "
    "their own settings (not rejax's): for information, no ratio.",
]


# ============================================================================ child


def _jaxrl_config(kind, args):
    from jaxrl.algorithms import dqn

    common = dict(env_id=ENV_ID, num_reports=0, num_evals=args.evals, eval_episodes=args.eval_episodes,
                  total_timesteps=args.total_timesteps)
    if kind == "jaxrl":
        return dqn.Config(**{**jaxrl_fields(total_timesteps=args.total_timesteps), **common})
    if kind == "jaxrl-default":
        return dqn.Config(**common)
    if kind == "jaxrl-rainbow":
        return dqn.rainbow(**common)
    raise ValueError(kind)


def run_jaxrl(jax, args, seeds, kind):
    import dataclasses

    import numpy as np

    from jaxrl.algorithms import dqn

    config = _jaxrl_config(kind, args)
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(dqn.train, in_axes=(0, None))
    lower_s, compile_s, run_times, out, other_cpu = _time_compiled(jax, train, (keys, config), args.runs)
    metrics = jax.device_get(out.metrics)
    steps_per_seed = int(np.asarray(out.state.timesteps).reshape(-1)[0])
    updates_per_seed = int(np.asarray(out.state.updates).reshape(-1)[0])
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=steps_per_seed,
        updates_per_seed=updates_per_seed, iterations=config.num_iterations,
        final_eval_return=_nanmean(_last_finite(metrics["eval_return"])) if args.evals else float("nan"),
        final_train_return=_nanmean(_last_finite(metrics["episode_return"])),
        evals_done=int(np.isfinite(metrics["eval_return"][0]).sum()),
        evaluation=f"{args.evals} x {args.eval_episodes} ep., greedy" if args.evals else "off",
        settings={k: repr(v) for k, v in settings.items()},
    )


def _rejax_algo(args, evals=None):
    """rejax.DQN at REJAX_CARTPOLE_DQN, with `evals` equal blocks of iterations each ending
    in an evaluation of `eval_episodes` episodes. Returns (algo, iterations, settings)."""
    import jax.numpy as jnp
    import rejax
    import rejax.evaluate

    r = REJAX_CARTPOLE_DQN
    evals = args.evals if evals is None else evals
    iterations = args.total_timesteps // r["num_envs"]  # what jaxrl runs
    if evals:
        per_block, num_blocks = math.ceil(iterations / evals), evals
    else:
        per_block, num_blocks = iterations, 1
    eval_freq = per_block * r["num_envs"]  # rejax runs ceil(eval_freq / num_envs) iterations per block
    total_timesteps = num_blocks * eval_freq  # rejax runs ceil(total / eval_freq) blocks
    env, env_params = rejax_env(ENV_ID)
    algo = rejax.DQN.create(
        env=env, env_params=env_params, agent=r["agent"], agent_kwargs={"activation": r["activation"]},
        num_envs=r["num_envs"], buffer_size=r["buffer_size"], fill_buffer=r["fill_buffer"],
        batch_size=r["batch_size"], max_grad_norm=r["max_grad_norm"], learning_rate=r["learning_rate"],
        num_epochs=r["num_epochs"], total_timesteps=total_timesteps, eval_freq=eval_freq,
        skip_initial_evaluation=True, target_update_freq=r["target_update_freq"], polyak=r["polyak"],
        eps_start=r["eps_start"], eps_end=r["eps_end"], exploration_fraction=r["exploration_fraction"],
        gamma=r["gamma"], ddqn=r["ddqn"], normalize_observations=r["normalize_observations"],
        normalize_rewards=r["normalize_rewards"],
    )
    eval_episodes = args.eval_episodes
    if evals:
        def eval_callback(algo, ts, rng):
            act = algo.make_act(ts)
            return rejax.evaluate.evaluate(act, rng, env, env_params, eval_episodes,
                                           env_params.max_steps_in_episode)
    else:
        def eval_callback(algo, ts, rng):
            return jnp.zeros((0,), jnp.int32), jnp.zeros((0,))
    algo = algo.replace(eval_callback=eval_callback)
    agent = algo.agent
    settings = {
        "agent": type(agent).__mro__[1].__name__, "hidden_layer_sizes": agent.hidden_layer_sizes,
        "activation": getattr(agent.activation, "__name__", agent.activation),
        "num_envs": algo.num_envs, "buffer_size": algo.buffer_size, "fill_buffer": algo.fill_buffer,
        "batch_size": algo.batch_size, "num_epochs": algo.num_epochs, "max_grad_norm": algo.max_grad_norm,
        "learning_rate": algo.learning_rate, "total_timesteps": algo.total_timesteps,
        "eval_freq": algo.eval_freq, "skip_initial_evaluation": algo.skip_initial_evaluation,
        "target_update_freq": algo.target_update_freq, "polyak": algo.polyak, "eps_start": algo.eps_start,
        "eps_end": algo.eps_end, "exploration_fraction": algo.exploration_fraction, "gamma": algo.gamma,
        "ddqn": algo.ddqn, "normalize_observations": algo.normalize_observations,
        "normalize_rewards": algo.normalize_rewards,
    }
    return algo, num_blocks * per_block, settings


def run_rejax(jax, args, seeds, kind):
    import numpy as np

    algo, iterations, settings = _rejax_algo(args)
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(algo.train)
    lower_s, compile_s, run_times, out, other_cpu = _time_compiled(jax, train, (keys,), args.runs)
    ts, (lengths, returns) = jax.device_get(out)
    steps_per_seed = int(np.asarray(ts.global_step).reshape(-1)[0])
    updates_per_seed = int(np.asarray(ts.q_ts.step).reshape(-1)[0])
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=steps_per_seed,
        updates_per_seed=updates_per_seed, iterations=iterations,
        **rejax_returns(ts, returns, args.evals),
        evaluation=f"{args.evals} x {args.eval_episodes} ep., eps .005" if args.evals else "off",
        settings={k: repr(v) for k, v in settings.items()},
    )


# ---------------------------------------------------------------------------- breakdown


def _time_scan(jax, body, carry, reps):
    """Seconds per repetition of ``body(carry) -> carry`` as a compiled lax.scan of ``reps``
    repetitions (best of 3 runs), and the compile seconds."""
    def many(carry):
        return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=reps)[0]

    t0 = time.perf_counter()
    compiled = jax.jit(many).lower(carry).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(carry))
    best, other = float("inf"), None
    for _ in range(3):
        before = _cpu_snapshot()
        start = time.perf_counter()
        jax.block_until_ready(compiled(carry))
        seconds = time.perf_counter() - start
        if seconds < best:
            best, other = seconds, _other_cpu(before, _cpu_snapshot())
    return best / reps, compile_s, other


def breakdown_jaxrl(jax, args):
    import functools

    import jax.numpy as jnp

    from jaxrl.algorithms import dqn

    config = _jaxrl_config("jaxrl", args)
    reps = args.breakdown_reps
    key = jax.random.key(args.seed)
    phase("breakdown: filling the buffer")
    state = dqn.init(key, config)
    warmup = jax.jit(lambda s, k: jax.lax.scan(
        lambda s, k: (dqn.warmup_step(s, k, config)[0], None), s, jax.random.split(k, config.warmup_iterations))[0])
    state = jax.block_until_ready(warmup(state, key))
    eps = dqn.epsilon(state.timesteps, config)
    parts = {}

    def collect(carry):
        s, k = carry
        k, sub = jax.random.split(k)
        s, _ = dqn._collect(s, sub, config, eps)
        return s.replace(timesteps=state.timesteps), k  # keep epsilon's schedule point

    def sample(carry):
        s, k, acc = carry
        k, sub = jax.random.split(k)
        batch = dqn.sample(s, sub, config)
        return s, k, acc + jnp.sum(batch["obs"]) + jnp.sum(batch["reward"])

    def one_update(carry):
        s, k = carry
        k, sample_key, loss_key = jax.random.split(k, 3)
        s, _ = dqn.update(s, dqn.sample(s, sample_key, config), loss_key, config)
        return s, k

    def loss_and_grad(carry):
        s, k, batch = carry
        k, sub = jax.random.split(k)
        grads, _ = jax.grad(dqn.loss_fn, has_aux=True)(s.params["network"], s.target_params, batch, sub, config)
        p = jax.tree.map(lambda p, g: p - 1e-9 * g, s.params["network"], grads)
        return s.replace(params={"network": p}), k, batch

    def whole_step(carry):
        s, k = carry
        k, sub = jax.random.split(k)
        s, _ = dqn.step(s, sub, config)
        return s.replace(timesteps=state.timesteps), k

    batch = dqn.sample(state, key, config)
    for name, body, carry, per in (
            ("act + env step + buffer write (all envs)", collect, (state, key), 1),
            ("replay sample (one batch)", sample, (state, key, jnp.zeros(())), config.num_updates),
            ("loss + gradient only (one batch)", loss_and_grad, (state, key, batch), config.num_updates),
            ("sample + gradient update (one)", one_update, (state, key), config.num_updates),
            ("whole iteration (dqn.step)", whole_step, (state, key), 1)):
        phase(f"breakdown: {name}")
        seconds, compile_s, other = _time_scan(jax, body, carry, reps)
        parts[name] = dict(us=seconds * 1e6, per_iteration=per, compile_s=compile_s, other_cpu=other)
    if args.evals:
        phase("breakdown: evaluation")
        evaluate = jax.jit(functools.partial(dqn.evaluate, config=config))
        jax.block_until_ready(evaluate(state.params, key))
        start = time.perf_counter()
        jax.block_until_ready(evaluate(state.params, key))
        parts[f"one evaluation ({args.eval_episodes} episodes)"] = dict(
            us=(time.perf_counter() - start) * 1e6, per_iteration=args.evals / config.num_iterations, compile_s=0.0)
    return dict(parts=parts, iterations=config.num_iterations, warmup_iterations=config.warmup_iterations)


def breakdown_rejax(jax, args):
    import jax.numpy as jnp

    algo, iterations, _ = _rejax_algo(args)
    reps = args.breakdown_reps
    key = jax.random.key(args.seed)
    fill_iterations = algo.fill_buffer // algo.num_envs + 1
    phase("breakdown: filling the buffer")
    ts = algo.init_state(key)
    fill = jax.jit(lambda ts: jax.lax.fori_loop(0, fill_iterations, lambda _, t: algo.train_iteration(t), ts))
    ts = jax.block_until_ready(fill(ts))
    eps = algo.epsilon_schedule(ts.global_step)
    step0 = ts.global_step

    def collect(t):
        t, batch = algo.collect_transitions(t, eps)
        t = t.replace(replay_buffer=t.replay_buffer.extend(batch))
        return t.replace(global_step=step0)

    def sample(carry):
        t, acc = carry
        rng, sub = jax.random.split(t.rng)
        mb = t.replay_buffer.sample(algo.batch_size, sub)
        return t.replace(rng=rng), acc + jnp.sum(mb.obs) + jnp.sum(mb.reward)

    def one_update(t):
        rng, sub = jax.random.split(t.rng)
        t = t.replace(rng=rng)
        return algo.update(t, t.replay_buffer.sample(algo.batch_size, sub))

    mb = ts.replay_buffer.sample(algo.batch_size, key)

    def update_only(carry):
        t, mb = carry
        return algo.update(t, mb), mb

    def whole_iteration(t):
        return algo.train_iteration(t).replace(global_step=step0)

    parts = {}
    for name, body, carry, per in (
            ("act + env step + buffer write (all envs)", collect, ts, 1),
            ("replay sample (one batch)", sample, (ts, jnp.zeros(())), algo.num_epochs),
            ("loss + gradient + Adam only (one batch)", update_only, (ts, mb), algo.num_epochs),
            ("sample + gradient update (one)", one_update, ts, algo.num_epochs),
            ("whole iteration (train_iteration)", whole_iteration, ts, 1)):
        phase(f"breakdown: {name}")
        seconds, compile_s, other = _time_scan(jax, body, carry, reps)
        parts[name] = dict(us=seconds * 1e6, per_iteration=per, compile_s=compile_s, other_cpu=other)
    if args.evals:
        phase("breakdown: evaluation")
        evaluate = jax.jit(lambda t, k: algo.eval_callback(algo, t, k))
        jax.block_until_ready(evaluate(ts, key))
        start = time.perf_counter()
        jax.block_until_ready(evaluate(ts, key))
        parts[f"one evaluation ({args.eval_episodes} episodes)"] = dict(
            us=(time.perf_counter() - start) * 1e6, per_iteration=args.evals / iterations, compile_s=0.0)
    return dict(parts=parts, iterations=iterations, warmup_iterations=fill_iterations)


def child_main(args):
    kind, seeds = args.one[0], int(args.one[1])

    def measure(jax):
        if kind == "jaxrl-breakdown":
            return breakdown_jaxrl(jax, args)
        if kind == "rejax-breakdown":
            return breakdown_rejax(jax, args)
        if kind == "rejax":
            return run_rejax(jax, args, seeds, kind)
        return run_jaxrl(jax, args, seeds, kind)

    # jaxrl applies its XLA settings on import (jaxrl/_xla.py); a peer runs as its own users
    # run it unless asked to run under the same process settings.
    measure_and_emit({"library": kind, "seeds": seeds}, measure,
                     jaxrl_settings=not kind.startswith("rejax") or args.peer_with_jaxrl_settings,
                     packages=("gymnax", "rejax") if kind.startswith("rejax") else ("gymnax",))


# ============================================================================ parent


def _measure(args, kind, seeds):
    return measure_in_child(__file__, {"library": kind, "seeds": seeds}, args,
                            ("total_timesteps", "evals", "eval_episodes", "seed", "runs", "breakdown_reps",
                             "peer_with_jaxrl_settings"))


HEADERS = ["run", "seeds", "steps/seed", "updates/seed", "compile s", "run s (fastest)", "all runs s",
           "other CPU load", "steps/s", "final eval return", "last train ep. return", "evaluation",
           "jaxrl/rejax steps/s", "jaxrl/rejax compile"]
LEFT = (0, 11)


def _label(r):
    return LABELS.get(r["library"], r["library"])


def _rows(results):
    rows = []
    for r in results:
        label = _label(r)
        if "error" in r:
            row = [label, str(r["seeds"])] + ["-"] * (len(HEADERS) - 2)
            row[11] = "FAILED (see below)"
            rows.append(row)
            continue
        rows.append([
            label, str(r["seeds"]), f"{r['steps_per_seed']:,}", f"{r['updates_per_seed']:,}",
            _fmt(r["total_compile_s"], ".1f"), _fmt(r["run_s"], ".2f"),
            ", ".join(f"{t:.2f}" for t in r["run_times"]),
            ", ".join(_fmt(c, ".2f") for c in r.get("other_cpu", [])) or "-", f"{r['steps_per_s']:,.0f}",
            _fmt(r["final_eval_return"], ".1f"), _fmt(r["final_train_return"], ".1f"), r["evaluation"],
            _fmt(r.get("ratio_steps"), ".2f") + ("x" if "ratio_steps" in r else ""),
            _fmt(r.get("ratio_compile"), ".2f") + ("x" if "ratio_compile" in r else ""),
        ])
    return rows


MAPPING_HEADERS = ["rejax setting", "rejax value", "jaxrl dqn.Config field", "jaxrl value", "same?", "note"]


def _mapping_rows(total_timesteps):
    sources = (REJAX_CARTPOLE_DQN, jaxrl_fields(total_timesteps=total_timesteps))
    rows = []
    for rejax_names, jaxrl_names, exact, note in MAPPING:
        cells = []
        for names, source in zip((rejax_names, jaxrl_names), sources):
            cells += [", ".join(names),
                      ", ".join(repr(source[n]) if n in source else "-" for n in names)]
        rows.append(cells + ["yes" if exact else "NO", note])
    return rows


def _mapping_table(total_timesteps, markdown=False):
    rows = _mapping_rows(total_timesteps)
    return _markdown_table(MAPPING_HEADERS, rows) if markdown else _text_table(MAPPING_HEADERS, rows, left=range(6))


BREAKDOWN_HEADERS = ["library", "part", "us each", "per iteration", "us / iteration", "share of iteration",
                     "x iterations = s", "other CPU load"]


def _breakdown_rows(results):
    rows = []
    for r in results:
        library = r["library"].split("-")[0]
        if "error" in r:
            rows.append([library, "FAILED: " + r["error"][:120], "-", "-", "-", "-", "-", "-"])
            continue
        parts = r["parts"]
        whole = next(v["us"] for k, v in parts.items() if k.startswith("whole iteration"))
        trained = r["iterations"] - r["warmup_iterations"]
        for name, p in parts.items():
            per_iter = p["us"] * p["per_iteration"]
            if name.startswith("one evaluation"):
                total = p["us"] * 1e-6 * p["per_iteration"] * r["iterations"]
                share = "(separate)"
            else:
                total = per_iter * 1e-6 * trained
                share = f"{per_iter / whole:.0%}"
            per = (f"{p['per_iteration']:g}" if p["per_iteration"] >= 1 else
                   f"1 / {1 / p['per_iteration']:,.0f}")
            rows.append([library, name, f"{p['us']:,.1f}", per, f"{per_iter:,.1f}", share, f"{total:.2f}",
                         _fmt(p.get("other_cpu"), ".2f")])
    return rows


def _errors(results):
    return [f"{_label(r)} x{r['seeds']}: {r['error']}" for r in results if "error" in r]


def _plot(results, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "error" not in r]
    kinds = [k for k in RUNS if any(r["library"] == k for r in ok)]
    seeds = sorted({r["seeds"] for r in ok})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(len(kinds), 1)
    for ax, key, subtitle in ((axes[0], "steps_per_s", "env steps / s (steady state)"),
                              (axes[1], "total_compile_s", "compile time (s)")):
        for i, kind in enumerate(kinds):
            values = [next((r[key] for r in ok if r["library"] == kind and r["seeds"] == s), None) for s in seeds]
            xs = [j + (i - (len(kinds) - 1) / 2) * width for j in range(len(seeds))]
            bars = ax.bar(xs, [v or 0 for v in values], width, label=LABELS[kind], color=f"C{i}")
            labels = ["" if v is None else f"{v / 1000:,.1f}k" if key == "steps_per_s" else f"{v:.1f}"
                      for v in values]
            ax.bar_label(bars, labels=labels, fontsize=7)
        ax.set_xticks(range(len(seeds)), [f"{s} seed{'s' * (s > 1)}" for s in seeds])
        ax.set_title(subtitle)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parent_main(args):
    command = shlex.join(["python"] + sys.argv)
    peer_note = peer_missing("rejax", args.no_peers)
    with_rejax = peer_note is None

    plan = []
    for seeds in args.seeds:
        plan += [("jaxrl", seeds)] + ([("rejax", seeds)] if with_rejax else [])
    if not args.no_default:
        plan += [("jaxrl-default", seeds) for seeds in args.seeds]
    plan += [("jaxrl-rainbow", seeds) for seeds in args.rainbow_seeds]
    if args.breakdown:
        plan += [("jaxrl-breakdown", 1)] + ([("rejax-breakdown", 1)] if with_rejax else [])

    results = []
    for n, (kind, seeds) in enumerate(plan, 1):
        print(f"[{n}/{len(plan)}] {LABELS.get(kind, kind)} x{seeds} seeds ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = _measure(args, kind, seeds)
        results.append(result)
        if "error" in result:
            status = result["error"]
        elif "parts" in result:
            status = "; ".join(f"{k}: {v['us']:.1f} us" for k, v in result["parts"].items())
        else:
            status = timing_status(result)
        print(f"    {status} (wall {time.perf_counter() - start:.0f}s, load {os.getloadavg()[0]:.2f})",
              file=sys.stderr, flush=True)
    main_results = [r for r in results if not r["library"].endswith("breakdown")]
    breakdowns = [r for r in results if r["library"].endswith("breakdown")]
    derive_timing(main_results)
    peer_ratios(main_results)
    rows = _rows(main_results)

    title = (f"DQN on {ENV_ID} at rejax's CartPole configuration, {args.total_timesteps:,} total timesteps, "
             f"seeds vmapped: {', '.join(map(str, args.seeds))}")
    machine = _machine_lines(main_results or results, command)
    errors = _errors(main_results)
    extra = ([peer_note] if peer_note else []) + other_cpu_warning(main_results)

    print()
    print(title)
    print()
    print(_text_table(HEADERS, rows, left=LEFT))
    print()
    for line in errors:
        print("error: " + line)
    for line in machine + extra:
        print(line)
    print()
    print("settings: rejax's CartPole DQN (configs/gymnax/cartpole.yaml + rejax 0.1.3 code defaults) "
          "and the jaxrl dqn.Config it maps to (the `jaxrl (rejax cfg)` row):")
    print(_mapping_table(args.total_timesteps))
    print()
    print("differences that cannot be matched or are by design:")
    for note in DIFFERENCES:
        print(" - " + note)
    for line in settings_lines(main_results, _label):
        print(" - " + line)
    if breakdowns:
        print()
        warmup = breakdowns[0].get("warmup_iterations", "?")
        print(f"per-iteration breakdown (1 seed, no vmap, rejax settings, after the {warmup} random-action iterations;"
              f" each part a compiled scan of {args.breakdown_reps} repetitions, best of 3; "
              "'x iterations' = its cost over the trained iterations of one run):")
        print(_text_table(BREAKDOWN_HEADERS, _breakdown_rows(breakdowns), left=(0, 1)))

    if args.markdown:
        md = [f"## {title}", "", _markdown_table(HEADERS, rows), ""]
        md += [f"- error: {line}" for line in errors]
        md += [f"- {line}" for line in machine + extra]
        md += ["", "Settings (rejax's CartPole DQN and the jaxrl dqn.Config it maps to):", "",
               _mapping_table(args.total_timesteps, markdown=True), ""]
        md += [f"- {note}" for note in DIFFERENCES]
        md += [f"- {line}" for line in settings_lines(main_results, _label)]
        if breakdowns:
            md += ["", "Per-iteration breakdown (1 seed, no vmap):", "",
                   _markdown_table(BREAKDOWN_HEADERS, _breakdown_rows(breakdowns))]
        write_markdown(args.markdown, md, results)
    if args.plot:
        if any("error" not in r for r in main_results):
            _plot(main_results, args.plot, title)
            print(f"wrote {args.plot}")
        else:
            print("no successful measurement: plot not written")
    return 0 if any(r["library"] == "jaxrl" and "error" not in r for r in main_results) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=None,
                        help=f"env steps per seed (default: {REJAX_CARTPOLE_DQN['total_timesteps']:,}, rejax's; "
                             "--quick: 20,000)")
    parser.add_argument("--seeds", type=_seed_list, default=[1, 8],
                        help='numbers of vmapped seeds to measure, e.g. "1,8" (default)')
    parser.add_argument("--rainbow-seeds", type=lambda t: [] if t.strip() in ("", "0") else _seed_list(t),
                        default=[1], help='seeds for the dqn.rainbow() row, "0" = skip (default: 1)')
    parser.add_argument("--no-default", action="store_true", help="skip the jaxrl dqn.Config() rows")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 20,000 steps (5,010 of them random), 1 run per measurement, "
                             "fewer breakdown repetitions")
    parser.add_argument("--evals", type=int, default=10,
                        help="periodic evaluations per run on both sides, 0 = off (default: %(default)s, "
                             "jaxrl's dqn.Config default)")
    parser.add_argument("--eval-episodes", type=int, default=10,
                        help="episodes per evaluation on both sides (default: %(default)s)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the parts of one iteration (act/env step, replay sample, update, "
                             "evaluation) for jaxrl and rejax at rejax's settings")
    parser.add_argument("--breakdown-reps", type=int, default=None,
                        help="repetitions per timed part in --breakdown (default: 2000, --quick: 200)")
    add_peer_arguments(parser, "rejax")
    parser.add_argument("--plot", metavar="PNG", help="write a bar chart of steps/s and compile time (matplotlib)")
    add_common_arguments(parser, ("RUN", "SEEDS"))
    args = parse_arguments(parser, argv)
    if args.total_timesteps is None:
        args.total_timesteps = 20_000 if args.quick else REJAX_CARTPOLE_DQN["total_timesteps"]
    if args.breakdown_reps is None:
        args.breakdown_reps = 200 if args.quick else 2000
    fields = jaxrl_fields(total_timesteps=args.total_timesteps)
    minimum = fields["learning_starts"] + fields["num_envs"] * fields["num_steps"]
    if args.total_timesteps < max(minimum, 2_000 + 64):
        parser.error(f"--total-timesteps must be at least {max(minimum, 2_064):,} (rejax's fill_buffer "
                     "plus one iteration, and jaxrl's default learning_starts plus one iteration)")
    if args.evals < 0 or args.eval_episodes < 1 or args.breakdown_reps < 1:
        parser.error("--evals must be >= 0, --eval-episodes >= 1, --breakdown-reps >= 1")
    if args.one:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
