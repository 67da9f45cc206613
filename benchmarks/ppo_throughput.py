"""PPO throughput on CartPole-v1 at PureJaxRL's configuration, jaxrl vs rejax.

    python benchmarks/ppo_throughput.py                      # 500k steps, 1 and 8 seeds
    python benchmarks/ppo_throughput.py --total-timesteps 51200 --seeds 1 2
    python benchmarks/ppo_throughput.py --no-peers --markdown out.md --plot out.png

For each library and number of seeds (``jax.vmap`` of the whole training run over PRNG
keys) it measures, each in a fresh subprocess with JAX's persistent compilation cache
off:

* compile time: ``jax.jit(f).lower(...)`` plus ``.compile()`` (tracing included);
* run time of the compiled function until ``block_until_ready``, run twice (``--runs``);
  the table reports the fastest run (on a shared machine the fastest is the better estimate;
  all are shown), and steps/s = seeds * env steps actually trained per seed / run time;
* final return: mean over seeds of the last evaluation's mean return, and mean over
  seeds of the last finished training episodes' return.

Both sides evaluate periodically during training, as jaxrl does by default: 10 times
per run (``--evals``), 10 episodes each (``--eval-episodes``), and those evaluations are
part of the timed run. ``--evals 0`` turns evaluation off on both sides.

rejax 0.1.3 (if installed and not ``--no-peers``) runs through
``gymnax.wrappers.LegacyStepAPIWrapper`` (it expects gymnax's pre-1.0 five-value step).
Its PPO has a constant learning rate, element-wise gradient clipping and Adam eps 1e-8,
so by default its optimiser is replaced by PureJaxRL's (global-norm clip, Adam eps
1e-5, learning rate annealed linearly to 0 per minibatch update, as jaxrl does);
``--rejax-stock-optimizer`` keeps rejax's own. See ``NOTES`` for what else differs.

The ``env + networks`` rows (``--no-floor`` skips them) time the work every PPO at these
settings does and nothing else (``run_floor``): per iteration the 128 steps of the 4
envs, each after the policy and value forwards on the observations it acts on, the
bootstrap values of the 512 next observations, and the 16 minibatch forward and
backward passes of both networks, each with an SGD step. No sampling, loss arithmetic,
GAE, shuffling, Adam, episode statistics or evaluation. Unless XLA compiles these
passes faster, no PPO at these settings runs faster than this row: its ratio to rejax
is how far ahead of rejax that leaves room for.

A measurement that fails, times out (``--timeout``) or hangs (its process uses no CPU for
``--stall-timeout`` seconds; it is then killed) is reported in the table, with the phase
it was in, instead of stopping the benchmark.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time

from _harness import (add_common_arguments, add_peer_arguments, derive_timing, fmt, last_finite, machine_lines,
                      markdown_table, measure_and_emit, measure_in_child, nanmean, parse_arguments, peer_missing,
                      peer_ratios, rejax_env, rejax_returns, text_table, time_compiled, tiny_sgd, write_markdown)

ENV_ID = "CartPole-v1"

# PureJaxRL's CartPole PPO (purejaxrl/ppo.py), in jaxrl's field names.
PUREJAXRL = dict(
    num_envs=4, num_steps=128, total_timesteps=500_000, num_epochs=4, num_minibatches=4,
    hidden_sizes=(64, 64), activation="tanh", anneal_lr=True, learning_rate=2.5e-4,
    gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
)

NOTES = [
    "Both: CartPole-v1, 4 envs x 128 steps, 4 epochs x 4 minibatches, separate 64x64 tanh "
    "actor and critic MLPs, Adam lr 2.5e-4 annealed linearly to 0, gamma .99, GAE lambda .95, "
    "clip .2 (policy and value), ent .01, vf .5, grad-norm clip .5, advantages normalised per minibatch.",
    "Steps trained: total_timesteps // 512 iterations of 512 steps (500k -> 976 iterations = "
    "499,712 steps for jaxrl, as in PureJaxRL). rejax evaluates every eval_freq steps in equal "
    "blocks, so it runs evals * ceil(iterations / evals) iterations (500k, 10 evals -> 980 = "
    "501,760 steps); steps/s uses each side's own count.",
    "jaxrl: ppo.Config with num_reports=0 (no host callbacks); evaluation = deterministic "
    "policy (mode), `evals` times spread over the run incl. the last iteration, no initial eval.",
    "rejax: eval_callback replaced by rejax.evaluate.evaluate with `eval-episodes` episodes "
    "(rejax's default is 128) using rejax's own act, which SAMPLES the policy; "
    "skip_initial_evaluation=True; one eval after each block, the last at the end.",
    "rejax: env = LegacyStepAPIWrapper(LogWrapper(gymnax CartPole-v1)); LogWrapper only to read "
    "the last finished training-episode returns (jaxrl tracks them with its own EpisodeStatistics).",
    "rejax differs by design: flax-default (lecun) init instead of orthogonal; actor and critic "
    "have separate optimisers, so the .5 global-norm clip is applied to each network's gradient "
    "separately (jaxrl: jointly); truncation is treated as termination (jaxrl bootstraps "
    "truncated episodes); two forward/backward passes per minibatch (actor, critic).",
]


# ============================================================================ child


def run_jaxrl(jax, args, seeds):
    import dataclasses

    import numpy as np

    from jaxrl.algorithms import ppo

    fields = dict(PUREJAXRL, total_timesteps=args.total_timesteps)
    config = ppo.Config(env_id=ENV_ID, num_reports=0, num_evals=args.evals,
                        eval_episodes=args.eval_episodes, **fields)
    defaults = ppo.Config()
    mismatched = {k: (getattr(defaults, k), v) for k, v in PUREJAXRL.items() if getattr(defaults, k) != v}

    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(ppo.train, in_axes=(0, None))
    lower_s, compile_s, run_times, out, _ = time_compiled(jax, train, (keys, config), args.runs)
    metrics = jax.device_get(out.metrics)
    steps_per_seed = int(metrics["timesteps"][0, -1])
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, steps_per_seed=steps_per_seed,
        iterations=config.num_iterations,
        final_eval_return=nanmean(last_finite(metrics["eval_return"])) if args.evals else float("nan"),
        final_train_return=nanmean(last_finite(metrics["episode_return"])),
        evals_done=int(np.isfinite(metrics["eval_return"][0]).sum()),
        evaluation=f"{args.evals} x {args.eval_episodes} episodes, deterministic" if args.evals else "off",
        settings={k: repr(v) for k, v in settings.items()},
        defaults_match_purejaxrl=not mismatched,
        defaults_mismatch={k: repr(v) for k, v in mismatched.items()},
    )


def run_floor(jax, args, seeds):
    """The ``floor`` row: the env steps and network passes of the run, nothing else.

    Each iteration steps the ``num_envs`` envs ``num_steps`` times, each time acting on
    the argmax of the actor's logits (the critic's value added at 1e-3, so that its
    forward cannot be dropped), then runs the critic on ``num_envs * num_steps`` next
    observations, and ``num_epochs * num_minibatches`` forward and backward passes of
    both networks on minibatches of fixed random observations, each followed by an SGD
    step (so nothing can be hoisted out of the loop)."""
    import jax.numpy as jnp

    from jaxrl import envs, rollout
    from jaxrl.algorithms import ppo
    from jaxrl.networks import ActorCritic

    fields = dict(PUREJAXRL, total_timesteps=args.total_timesteps)
    config = ppo.Config(env_id=ENV_ID, num_reports=0, num_evals=0, **fields)
    network = ppo.make_network(config)
    batch_size = config.num_envs * config.num_steps
    num_updates = config.num_epochs * config.num_minibatches
    obs_dim = envs.config_spec(config).obs_shape[0]
    env, env_params = envs.make(ENV_ID)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def one_seed(key):
        params = ppo.init(key, config).params["network"]
        env_key, batch_key, key = jax.random.split(jax.random.fold_in(key, 1), 3)
        batch = jax.random.normal(batch_key, (num_updates, batch_size // config.num_minibatches, obs_dim))

        def loss(params, obs):
            logits, value = network.apply(params, obs)
            return jnp.mean(jnp.square(logits)) + jnp.mean(jnp.square(value))

        def minibatch(params, obs):
            grads = jax.grad(loss)(params, obs)
            return tiny_sgd(jax, params, grads), None

        def iteration(carry, key):
            params, env_state, obs = carry

            def act(carry, step_keys):
                env_state, obs = carry
                logits, value = network.apply(params, obs)
                action = jnp.argmax(logits + 1e-3 * value[:, None], axis=-1)
                obs, env_state, *_ = step(step_keys, env_state, action, env_params)
                return (env_state, obs), None

            keys = jax.random.split(key, (config.num_steps, config.num_envs))
            env_state, obs = jax.lax.scan(act, (env_state, obs), keys)[0]
            next_obs = batch[: config.num_minibatches].reshape(batch_size, obs_dim) + jnp.mean(obs)
            bootstrap = network.apply(params, next_obs, method=ActorCritic.value)
            params = jax.tree.map(lambda p: p + 1e-9 * jnp.mean(bootstrap), params)
            return (jax.lax.scan(minibatch, params, batch)[0], env_state, obs), None

        obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
        keys = jax.random.split(key, config.num_iterations)
        return jax.lax.scan(iteration, (params, env_state, obs), keys)[0][0]

    keys = jax.random.split(jax.random.key(args.seed), seeds)
    lower_s, compile_s, run_times, _, _ = time_compiled(jax, jax.vmap(one_seed), (keys,), args.runs)
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times,
        steps_per_seed=config.num_iterations * batch_size, iterations=config.num_iterations,
        final_eval_return=float("nan"), final_train_return=float("nan"), evals_done=0, evaluation="none",
        settings={"iterations": repr(config.num_iterations),
                  "rollout": f"{config.num_steps} steps x {config.num_envs} envs, obs [{config.num_envs}, {obs_dim}]",
                  "minibatch passes": f"{num_updates} x [{batch_size // config.num_minibatches}, {obs_dim}]",
                  "hidden_sizes": repr(config.hidden_sizes), "activation": repr(config.activation)},
    )


def _rejax_ppo_class(stock_optimizer):
    import optax
    import rejax
    from flax import struct
    from flax.training.train_state import TrainState
    from jax import numpy as jnp
    from rejax.algos.algorithm import register_init

    if stock_optimizer:
        return rejax.PPO

    class PureJaxRLOptimizerPPO(rejax.PPO):
        """rejax PPO with PureJaxRL's optimiser: global-norm clip, Adam eps 1e-5, LR annealing."""

        num_updates: int = struct.field(pytree_node=False, default=1)

        @register_init
        def initialize_network_params(self, rng):  # overrides rejax's (same name, same state)
            import jax

            rng, rng_actor, rng_critic = jax.random.split(rng, 3)
            obs_ph = jnp.empty([1, *self.env.observation_space(self.env_params).shape])
            actor_params = self.actor.init(rng_actor, obs_ph, rng_actor)
            critic_params = self.critic.init(rng_critic, obs_ph)
            learning_rate, num_updates = self.learning_rate, self.num_updates

            def schedule(count):  # the same linear annealing as jaxrl's make_optimizer
                return learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

            tx = optax.chain(optax.clip_by_global_norm(self.max_grad_norm), optax.adam(schedule, eps=1e-5))
            return {
                "actor_ts": TrainState.create(apply_fn=(), params=actor_params, tx=tx),
                "critic_ts": TrainState.create(apply_fn=(), params=critic_params, tx=tx),
            }

    return PureJaxRLOptimizerPPO


def run_rejax(jax, args, seeds):
    import rejax.evaluate

    p = PUREJAXRL
    batch = p["num_envs"] * p["num_steps"]
    iterations = args.total_timesteps // batch  # what jaxrl runs
    if args.evals:
        per_block = math.ceil(iterations / args.evals)
        num_blocks = args.evals
    else:
        per_block, num_blocks = iterations, 1
    eval_freq = per_block * batch
    total_timesteps = num_blocks * eval_freq  # rejax runs ceil(total / eval_freq) blocks

    env, env_params = rejax_env(ENV_ID)
    cls = _rejax_ppo_class(args.rejax_stock_optimizer)
    extra = {} if args.rejax_stock_optimizer else {
        "num_updates": num_blocks * per_block * p["num_epochs"] * p["num_minibatches"]}
    algo = cls.create(
        env=env, env_params=env_params,
        num_envs=p["num_envs"], num_steps=p["num_steps"], num_epochs=p["num_epochs"],
        num_minibatches=p["num_minibatches"], total_timesteps=total_timesteps, eval_freq=eval_freq,
        skip_initial_evaluation=True,
        learning_rate=p["learning_rate"], gamma=p["gamma"], gae_lambda=p["gae_lambda"],
        clip_eps=p["clip_eps"], ent_coef=p["ent_coef"], vf_coef=p["vf_coef"],
        max_grad_norm=p["max_grad_norm"],
        agent_kwargs={"activation": p["activation"], "hidden_layer_sizes": p["hidden_sizes"]},
        **extra,
    )
    eval_episodes = args.eval_episodes

    if args.evals:
        def eval_callback(algo, ts, rng):
            act = algo.make_act(ts)
            return rejax.evaluate.evaluate(act, rng, env, env_params, eval_episodes,
                                           env_params.max_steps_in_episode)
    else:
        def eval_callback(algo, ts, rng):
            import jax.numpy as jnp

            return jnp.zeros((0,), jnp.int32), jnp.zeros((0,))
    algo = algo.replace(eval_callback=eval_callback)

    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(algo.train)
    lower_s, compile_s, run_times, out, _ = time_compiled(jax, train, (keys,), args.runs)
    ts, (lengths, returns) = jax.device_get(out)
    import numpy as np

    steps_per_seed = int(np.asarray(ts.global_step).reshape(-1)[0])
    settings = {
        "num_envs": algo.num_envs, "num_steps": algo.num_steps, "num_epochs": algo.num_epochs,
        "num_minibatches": algo.num_minibatches, "total_timesteps": algo.total_timesteps,
        "eval_freq": algo.eval_freq, "skip_initial_evaluation": algo.skip_initial_evaluation,
        "learning_rate": algo.learning_rate, "gamma": algo.gamma, "gae_lambda": algo.gae_lambda,
        "clip_eps": algo.clip_eps, "ent_coef": algo.ent_coef, "vf_coef": algo.vf_coef,
        "max_grad_norm": algo.max_grad_norm,
        "hidden_layer_sizes": algo.actor.hidden_layer_sizes,
        "activation": getattr(algo.actor.activation, "__name__", algo.actor.activation),
        "normalize_observations": algo.normalize_observations, "normalize_rewards": algo.normalize_rewards,
        "optimizer": ("rejax stock: optax.clip (element-wise) + adam(constant lr, eps 1e-8)"
                      if args.rejax_stock_optimizer else
                      f"clip_by_global_norm + adam(eps 1e-5, lr annealed to 0 over {extra['num_updates']} updates)"),
    }
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, steps_per_seed=steps_per_seed,
        iterations=num_blocks * per_block,
        **rejax_returns(ts, returns, args.evals),
        evaluation=f"{args.evals} x {eval_episodes} episodes, stochastic" if args.evals else "off",
        settings={k: repr(v) for k, v in settings.items()},
    )


def child_main(args):
    library, seeds = args.one[0], int(args.one[1])

    def measure(jax):
        return {"jaxrl": run_jaxrl, "rejax": run_rejax, "floor": run_floor}[library](jax, args, seeds)

    # jaxrl applies its XLA settings on import (jaxrl/_xla.py); a peer runs as its own users
    # run it unless asked to run under the same process settings.
    measure_and_emit({"library": library, "seeds": seeds}, measure,
                     jaxrl_settings=library != "rejax" or args.peer_with_jaxrl_settings,
                     packages=("gymnax", "rejax") if library == "rejax" else ("gymnax",))


# ============================================================================ parent


def _measure(args, library, seeds):
    return measure_in_child(__file__, {"library": library, "seeds": seeds}, args,
                            ("total_timesteps", "evals", "eval_episodes", "seed", "runs",
                             "rejax_stock_optimizer", "peer_with_jaxrl_settings"))


HEADERS = ["run", "seeds", "steps/seed", "compile s", "run s (fastest)", "all runs s", "steps/s",
           "final eval return", "last train ep. return", "evaluation", "/ rejax steps/s", "/ rejax compile"]
LABELS = {"jaxrl": "jaxrl", "rejax": "rejax", "floor": "env + networks"}


def _rows(results):
    rows = []
    for r in results:
        if "error" in r:
            rows.append([LABELS[r["library"]], str(r["seeds"]), "-", "-", "-", "-", "-", "-", "-", "-",
                         "-", "-", ])
            continue
        rows.append([
            LABELS[r["library"]], str(r["seeds"]), f"{r['steps_per_seed']:,}", fmt(r["total_compile_s"], ".1f"),
            fmt(r["run_s"], ".2f"), ", ".join(f"{t:.2f}" for t in r["run_times"]), f"{r['steps_per_s']:,.0f}",
            fmt(r["final_eval_return"], ".1f"), fmt(r["final_train_return"], ".1f"), r["evaluation"],
            fmt(r.get("ratio_steps"), ".2f") + ("x" if "ratio_steps" in r else ""),
            fmt(r.get("ratio_compile"), ".2f") + ("x" if "ratio_compile" in r else ""),
        ])
    return rows


def _errors(results):
    return [f"{LABELS[r['library']]} x{r['seeds']}: {r['error']}" for r in results if "error" in r]


def _settings_lines(results):
    lines = []
    seen = set()
    for r in results:
        if "settings" in r and r["library"] not in seen:
            seen.add(r["library"])
            lines.append(f"{LABELS[r['library']]} settings: " + ", ".join(f"{k}={v}" for k, v in r["settings"].items()))
            if r["library"] == "jaxrl":
                lines.append("jaxrl ppo.Config() defaults equal PureJaxRL's CartPole settings: "
                             + ("yes" if r.get("defaults_match_purejaxrl") else
                                f"NO, (default, used): {r.get('defaults_mismatch')}"))
    return lines


def _plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "error" not in r]
    libraries = sorted({r["library"] for r in ok}, key=list(LABELS).index)
    seeds = sorted({r["seeds"] for r in ok})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / max(len(libraries), 1)
    for ax, key, title in ((axes[0], "steps_per_s", "env steps / s (steady state)"),
                           (axes[1], "total_compile_s", "compile time (s)")):
        for i, library in enumerate(libraries):
            values = [next((r[key] for r in ok if r["library"] == library and r["seeds"] == s), None) for s in seeds]
            xs = [j + (i - (len(libraries) - 1) / 2) * width for j in range(len(seeds))]
            bars = ax.bar(xs, [v or 0 for v in values], width, label=LABELS[library], color=f"C{i}")
            labels = ["failed" if v is None else f"{v / 1000:,.0f}k" if key == "steps_per_s" else f"{v:.1f}"
                      for v in values]
            ax.bar_label(bars, labels=labels, fontsize=8)
        ax.set_xticks(range(len(seeds)), [f"{s} seed{'s' * (s > 1)}" for s in seeds])
        ax.set_title(title)
        ax.legend()
    fig.suptitle(f"PPO {ENV_ID}, PureJaxRL config, {ok[0]['steps_per_seed']:,} steps/seed" if ok else "PPO")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parent_main(args):
    command = shlex.join(["python"] + sys.argv)
    peer_note = peer_missing("rejax", args.no_peers)
    libraries = ["jaxrl"] + ([] if peer_note else ["rejax"]) + ([] if args.no_floor else ["floor"])

    results = []
    plan = [(library, seeds) for seeds in args.seeds for library in libraries]
    for n, (library, seeds) in enumerate(plan, 1):
        print(f"[{n}/{len(plan)}] {LABELS[library]} x{seeds} seeds ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = _measure(args, library, seeds)
        results.append(result)
        status = result.get("error") or (
            f"compile {result['lower_s'] + result['compile_s']:.1f}s, runs "
            + ", ".join(f"{t:.2f}s" for t in result["run_times"]))
        print(f"    {status} (wall {time.perf_counter() - start:.0f}s)", file=sys.stderr, flush=True)
    derive_timing(results)
    peer_ratios(results, libraries=("jaxrl", "floor"))
    rows = _rows(results)

    title = (f"PPO on {ENV_ID} at PureJaxRL's configuration, {args.total_timesteps:,} total timesteps, "
             f"seeds vmapped: {', '.join(map(str, args.seeds))}")
    machine = machine_lines(results, command, other_cpu=False)
    errors = _errors(results)
    extra = ([peer_note] if peer_note else []) + (
        [] if args.rejax_stock_optimizer or "rejax" not in libraries else
        ["rejax optimiser patched to PureJaxRL's (global-norm clip .5, Adam eps 1e-5, linear LR "
         "annealing); --rejax-stock-optimizer for rejax's own (element-wise clip, constant LR)"])

    print()
    print(title)
    print()
    print(text_table(HEADERS, rows, left=(0, 9)))
    print()
    for line in errors:
        print("error: " + line)
    for line in machine + extra:
        print(line)
    print()
    print("notes:")
    for note in NOTES:
        print(" - " + note)
    for line in _settings_lines(results):
        print(" - " + line)

    if args.markdown:
        md = [f"## {title}", "", markdown_table(HEADERS, rows), ""]
        md += [f"- error: {line}" for line in errors]
        md += [f"- {line}" for line in machine + extra]
        md += [f"- {note}" for note in NOTES]
        md += [f"- {line}" for line in _settings_lines(results)]
        write_markdown(args.markdown, md, results)
    if args.plot:
        if any("error" not in r for r in results):
            _plot(results, args.plot)
            print(f"wrote {args.plot}")
        else:
            print("no successful measurement: plot not written")
    return 0 if any(r["library"] == "jaxrl" and "error" not in r for r in results) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-timesteps", type=int, default=PUREJAXRL["total_timesteps"],
                        help="env steps per seed (default: %(default)s, PureJaxRL's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8],
                        help="numbers of vmapped seeds to measure (default: 1 8)")
    parser.add_argument("--evals", type=int, default=10,
                        help="periodic evaluations per run on both sides, 0 = off (default: %(default)s, "
                             "jaxrl's ppo.Config default)")
    parser.add_argument("--eval-episodes", type=int, default=10,
                        help="episodes per evaluation on both sides (default: %(default)s)")
    parser.add_argument("--rejax-stock-optimizer", action="store_true",
                        help="keep rejax's own optimiser (constant LR, element-wise clip) instead of PureJaxRL's")
    parser.add_argument("--no-floor", action="store_true", help="skip the env + networks rows")
    add_peer_arguments(parser, "rejax")
    parser.add_argument("--plot", metavar="PNG", help="write a bar chart of steps/s and compile time")
    add_common_arguments(parser, ("LIBRARY", "SEEDS"), quick=False)
    args = parse_arguments(parser, argv)
    if args.total_timesteps < PUREJAXRL["num_envs"] * PUREJAXRL["num_steps"]:
        parser.error("--total-timesteps must be at least num_envs * num_steps = 512")
    if any(s < 1 for s in args.seeds) or args.evals < 0 or args.eval_episodes < 1:
        parser.error("--seeds must be >= 1, --evals >= 0, --eval-episodes >= 1")
    if args.one:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
