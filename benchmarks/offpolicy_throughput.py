"""SAC, TD3 and DDPG throughput on Pendulum-v1 at rejax's Pendulum configurations, jaxrl vs rejax.

    python benchmarks/offpolicy_throughput.py                     # 20k steps, 1 and 8 seeds, sac td3 ddpg
    python benchmarks/offpolicy_throughput.py --quick             # smoke test (5k steps, 1 run each)
    python benchmarks/offpolicy_throughput.py --algos sac --seeds 1
    python benchmarks/offpolicy_throughput.py --markdown out.md

Rows, per algorithm and number of vmapped seeds, each measured in a fresh subprocess with
JAX's persistent compilation cache off:

* ``jaxrl (rejax cfg)``: jaxrl's algorithm with rejax's Pendulum settings translated into
  its ``Config`` field by field (``REJAX_PENDULUM``, ``jaxrl_fields`` and ``MAPPING`` below;
  the mapping is printed);
* ``rejax``: rejax's SAC / TD3 at those settings, in the same benchmark (if rejax is
  installed and not ``--no-peers``), and the ratios jaxrl / rejax of steady-state steps per
  second and of compile time. rejax 0.1.3 has no DDPG (it was removed from rejax before
  0.1): the DDPG rows are jaxrl only, at the DDPG section of rejax's Pendulum config from
  when rejax had DDPG. rejax's TD3 cannot stand in for DDPG: with ``num_critics=1`` its
  critic update fails (it unpacks exactly two critics), and TD3 with ``policy_delay=1,
  target_noise=0`` still takes the minimum of two critics, which is not DDPG;
* ``jaxrl X.Config()``: jaxrl's own defaults (different settings: for information, no ratio);
* ``networks only``, SAC only: the forward and backward passes of SAC's networks for the
  same number of updates at the same settings, and nothing else (``run_floor``). Every SAC
  with these networks does this work, so unless XLA compiles these passes faster, no SAC
  at these settings runs faster than this row; its ratio to rejax is how far ahead of
  rejax that leaves room for.

For each: compile time (``jax.jit(f).lower(...)`` plus ``.compile()``, tracing included);
the run time of the compiled function until ``block_until_ready``, run ``--runs`` times
(the table reports the fastest; all are shown); steps/s = seeds * env steps per seed /
run time; the final evaluation return (mean over seeds of the last evaluation's mean
return; a deterministic policy on both sides) and the last finished training episodes'
return. Seeds are ``jax.vmap``-ed over the whole training run.

Both sides evaluate ``--evals`` times per run (default 10), ``--eval-episodes`` episodes
each (default 10), inside the timed run, with the deterministic policy: jaxrl's noise-free
actor / the tanh of SAC's mean; for rejax the same through ``rejax.evaluate.evaluate`` as
its ``eval_callback`` (rejax's own SAC ``act`` samples from the policy, so a deterministic
one is passed). rejax's Pendulum configs evaluate every 100 steps with 128 episodes, which
would dominate the run time; ``--evals 0`` turns evaluation off on both sides.

rejax 0.1.3 runs through ``gymnax.wrappers.LegacyStepAPIWrapper`` (it expects gymnax's
pre-1.0 five-value step). A measurement that fails, times out (``--timeout``) or hangs (no
CPU use for ``--stall-timeout`` seconds; it is then killed) is reported in the table, with
the phase it was in, instead of stopping the benchmark.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time

from _harness import (add_common_arguments, add_peer_arguments, derive_timing, fmt, last_finite, machine_lines,
                      markdown_table, measure_and_emit, measure_in_child, nanmean, other_cpu_warning, parse_arguments,
                      peer_missing, peer_ratios, rejax_env, rejax_returns, seed_list, settings_lines, text_table,
                      time_compiled, timing_status, tiny_sgd, write_markdown)

ENV_ID = "Pendulum-v1"
HALF_RANGE = 2.0  # Pendulum-v1 actions are in [-2, 2] (max_torque); checked in the child
ALGOS = ("sac", "td3", "ddpg")
PEERS = {"sac": "SAC", "td3": "TD3"}  # rejax 0.1.3 classes; no DDPG

# rejax's Pendulum settings: the "sac" / "td3" sections of rejax's configs/gymnax/pendulum.yaml
# (the config file of the rejax repository; not shipped in the 0.1.3 wheel) plus the rejax
# 0.1.3 code defaults they do not set (marked "code default"). "ddpg": the DDPG section of the
# same file from when rejax had DDPG (its repository history; rejax 0.1.3 has no DDPG).
REJAX_PENDULUM = {
    "sac": dict(
        activation="swish",
        hidden_layer_sizes=(64, 64),   # code default (SAC.create_agent)
        num_envs=1,
        buffer_size=10_000,
        fill_buffer=256,
        batch_size=256,
        learning_rate=0.01,            # actor, critics and temperature (one optax chain)
        num_epochs=1,                  # gradient updates per env step
        total_timesteps=10_000,        # the yaml's; this benchmark runs --total-timesteps on both sides
        eval_freq=100,
        gamma=0.99,
        polyak=0.98,
        target_update_freq=1,          # code default
        max_grad_norm=math.inf,        # code default: optax.clip(inf), no clipping
        num_critics=2,                 # code default
        initial_alpha=1.0,             # code default: log_alpha starts at 0
        target_entropy=-1.0,           # continuous: -action_dim (target_entropy_ratio is for discrete)
        normalize_observations=True,
        normalize_rewards=False,       # code default
    ),
    "td3": dict(
        activation="swish",            # actor_kwargs and critic_kwargs
        hidden_layer_sizes=(64, 64),   # hard-coded in TD3.create_agent
        num_envs=1,
        buffer_size=10_000,
        fill_buffer=1_000,
        batch_size=100,
        learning_rate=0.001,
        num_epochs=1,                  # critic updates per env step
        total_timesteps=10_000,
        eval_freq=100,
        gamma=0.99,
        polyak=0.95,
        target_update_freq=1,          # code default
        max_grad_norm=100.0,           # optax.clip: element-wise
        exploration_noise=0.3,         # std in env action units
        target_noise=0.2,              # env action units
        target_noise_clip=0.5,         # env action units
        policy_delay=2,
        num_critics=2,                 # code default
        normalize_observations=True,
        normalize_rewards=False,       # code default
    ),
    "ddpg": dict(
        activation="swish",
        hidden_layer_sizes=(64, 64),   # assumed, as rejax's TD3 and SAC
        num_envs=1,
        buffer_size=5_000,
        fill_buffer=1_000,
        batch_size=100,
        learning_rate=0.001,
        num_epochs=1,
        total_timesteps=10_000,
        eval_freq=100,
        gamma=0.98,
        polyak=0.995,
        max_grad_norm=10.0,
        exploration_noise=0.2,         # env action units
        normalize_observations=True,
    ),
}


def jaxrl_fields(algo, total_timesteps, r=None):
    """rejax's ``algo`` settings ``r`` as jaxrl ``Config`` fields (see ``MAPPING``)."""
    r = REJAX_PENDULUM[algo] if r is None else r
    n = r["num_envs"]
    common = dict(
        num_envs=n, batch_size=r["batch_size"], buffer_size=r["buffer_size"], total_timesteps=total_timesteps,
        n_step=1, network="mlp", hidden_sizes=tuple(r["hidden_layer_sizes"]),
        activation={"swish": "silu"}.get(r["activation"], r["activation"]),
        learning_rate=r["learning_rate"], gamma=r["gamma"], tau=round(1.0 - r["polyak"], 12),
    )
    if algo == "sac":
        # rejax SAC collects, then updates iff global_step > fill_buffer: the first
        # fill_buffer // num_envs iterations do not update.
        return dict(common, num_steps=1, num_updates=r["num_epochs"], learning_starts=(r["fill_buffer"] // n) * n,
                    autotune=True, alpha=r["initial_alpha"], target_entropy=r["target_entropy"])
    if algo == "td3":
        # rejax TD3 iteration: policy_delay x (collect num_envs steps, num_epochs critic
        # updates), then num_epochs actor updates and one target update. jaxrl: collect
        # policy_delay steps per env, then policy_delay * num_epochs critic updates with the
        # actor and targets on every policy_delay-th. rejax acts at random (and does not
        # update) while global_step <= fill_buffer before collecting: (fill // n + 1) * n
        # steps, rounded down to whole jaxrl iterations.
        d = r["policy_delay"]
        random_steps = (r["fill_buffer"] // n + 1) * n
        return dict(common, num_steps=d, num_updates=d * r["num_epochs"], policy_delay=d,
                    learning_starts=random_steps // (d * n) * (d * n), twin_critics=r["num_critics"] == 2,
                    exploration_noise=r["exploration_noise"] / HALF_RANGE, target_noise=r["target_noise"] / HALF_RANGE,
                    target_noise_clip=r["target_noise_clip"] / HALF_RANGE)
    if algo == "ddpg":
        return dict(common, num_steps=1, num_updates=r["num_epochs"], policy_delay=1, twin_critics=False,
                    target_noise=0.0, learning_starts=r["fill_buffer"],
                    exploration_noise=r["exploration_noise"] / HALF_RANGE)
    raise ValueError(algo)


# Per algorithm: (rejax settings, jaxrl Config fields, exactly the same?, how). Values are read
# from REJAX_PENDULUM[algo] and jaxrl_fields(algo); a name in neither is printed as it is.
_COMMON_HEAD = [
    (("num_envs",), ("num_envs",), True, ""),
    (("batch_size",), ("batch_size",), True, ""),
    (("buffer_size",), ("buffer_size",), True, "transitions, FIFO on both sides"),
]
_COMMON_NET = [
    (("hidden_layer_sizes",), ("hidden_sizes",), True, "actor and critics"),
    (("activation",), ("activation",), True, "swish == silu"),
    (("learning_rate",), ("learning_rate",), True, "Adam (eps 1e-8 on both sides), constant, every network"),
    (("gamma",), ("gamma",), True, ""),
]
_NORMALIZE = (("normalize_observations",), ("(none)",), True,
              "the yaml sets True; jaxrl's off-policy algorithms have no observation normalisation, so rejax runs "
              "with False (--rejax-normalize-obs: with the yaml's True)")
MAPPING = {
    "sac": _COMMON_HEAD + [
        (("num_epochs",), ("num_steps", "num_updates"), True, "one env step per env, then num_epochs updates"),
        (("fill_buffer",), ("learning_starts",), False,
         "rejax updates iff global_step > fill_buffer after collecting: fill_buffer // num_envs iterations without "
         "updates on both sides; but rejax acts with its policy from step 0, jaxrl uniformly at random until then"),
        (("total_timesteps",), ("total_timesteps",), True, "--total-timesteps on both sides (yaml: 10,000)"),
    ] + _COMMON_NET + [
        (("polyak", "target_update_freq"), ("tau",), True, "target <- polyak*target + (1-polyak)*online after every "
                                                          "update (num_epochs = 1)"),
        (("num_critics",), ("(twin critics)",), True, "min of two target critics"),
        (("initial_alpha",), ("alpha",), True, "rejax log_alpha starts at 0"),
        (("target_entropy",), ("target_entropy",), True, "-action_dim"),
        (("max_grad_norm",), ("(no clipping)",), True, "optax.clip(inf) is the identity"),
        _NORMALIZE,
    ],
    "td3": _COMMON_HEAD + [
        (("num_epochs", "policy_delay"), ("num_steps", "num_updates", "policy_delay"), False,
         "same counts (1 critic update per env step, 1 actor + target update per 2), order differs: rejax "
         "collect, update, collect, update + actor; jaxrl collect 2, update, update + actor"),
        (("fill_buffer",), ("learning_starts",), False,
         "rejax: uniform random actions while global_step <= fill_buffer before collecting (1,001 steps), jaxrl "
         "1,000: one critic update more in jaxrl, the same actor updates"),
        (("total_timesteps",), ("total_timesteps",), True, "--total-timesteps on both sides (yaml: 10,000)"),
    ] + _COMMON_NET + [
        (("polyak", "target_update_freq"), ("tau",), True,
         "actor and critic targets after every actor update (every train_iteration in rejax)"),
        (("num_critics",), ("twin_critics",), True, ""),
        (("exploration_noise",), ("exploration_noise",), True,
         "rejax in env units (Pendulum half range 2), jaxrl in half-range units; both clip to the bounds"),
        (("target_noise", "target_noise_clip"), ("target_noise", "target_noise_clip"), True, "likewise"),
        (("max_grad_norm",), ("(no clipping)",), False,
         "rejax element-wise optax.clip(100) (practically inactive); jaxrl DDPG/TD3 have no clipping"),
        _NORMALIZE,
    ],
    "ddpg": _COMMON_HEAD + [
        (("num_epochs",), ("num_steps", "num_updates"), True, ""),
        (("fill_buffer",), ("learning_starts",), True, "random steps before the first update"),
        (("total_timesteps",), ("total_timesteps",), True, "--total-timesteps (yaml: 10,000)"),
    ] + _COMMON_NET + [
        (("polyak",), ("tau",), True, ""),
        (("(one critic, no delay, no target noise)",), ("twin_critics", "policy_delay", "target_noise"), True, ""),
        (("exploration_noise",), ("exploration_noise",), True, "env units -> half-range units"),
        (("max_grad_norm",), ("(no clipping)",), False, "not settable in jaxrl DDPG"),
        (("normalize_observations",), ("(none)",), False, "not available in jaxrl's off-policy algorithms"),
    ],
}

DIFFERENCES = {
    "sac": [
        "Update order: rejax actor, then critics (the target's next action from the just-updated actor), then "
        "temperature; jaxrl critics, then actor (against the updated critics), then temperature.",
        "Temperature loss: rejax -alpha * (log pi + target), jaxrl log_alpha * (entropy - target): same sign, "
        "gradients differ by the factor alpha (Adam normalises most of it). Critic loss: rejax 0.5 * squared error "
        "(optax.l2_loss), jaxrl squared error (factor 2; Adam-invariant up to eps).",
        "Policy: rejax clips log_std to [-10, 2]; jaxrl squashes it smoothly into [-5, 2]. Before learning_starts "
        "rejax samples its (untrained) policy, jaxrl acts uniformly at random.",
    ],
    "td3": [
        "Actor loss: rejax -mean over BOTH critics of Q(s, actor(s)); jaxrl -mean Q_1 (as in the TD3 paper).",
        "Critic loss: rejax 0.5 * squared error per critic (optax.l2_loss), jaxrl squared error (factor 2).",
    ],
    "ddpg": [
        "rejax 0.1.3 has no DDPG: jaxrl only, at the DDPG section of rejax's configs/gymnax/pendulum.yaml from "
        "when rejax had DDPG; no ratio. rejax TD3 with num_critics=1 fails (its critic update unpacks two critics).",
    ],
    "all": [
        "Replay sampling: rejax draws each batch WITHOUT replacement (jax.random.choice over the whole buffer with "
        "probabilities, i.e. a Gumbel top-k over every slot per update); jaxrl uniformly WITH replacement from the "
        "filled part.",
        "Time limit: rejax stores done = terminated or truncated and does not bootstrap at Pendulum's 200-step "
        "limit (Pendulum never terminates, so every episode end); jaxrl bootstraps truncated episodes.",
        "Initialisation: rejax flax defaults (lecun-normal kernels); jaxrl orthogonal. The critics see env actions "
        "in rejax, actions scaled to [-1, 1] in jaxrl.",
        "Evaluation: same count and episodes on both sides, deterministic policy; rejax's eval_freq is set so it "
        "runs the same iterations in `evals` equal blocks; skip_initial_evaluation=True.",
        "rejax: env = LegacyStepAPIWrapper(LogWrapper(gymnax Pendulum-v1)); LogWrapper only to read the last "
        "finished training-episode returns (jaxrl tracks them with its own EpisodeStatistics).",
        "jaxrl rows: num_reports=0 (no host callbacks). The `jaxrl X.Config()` rows use jaxrl's own defaults "
        "(4 envs, 4 updates per iteration, batch 256, 1,000 random steps, ...): for information, no ratio.",
    ],
}


def _labels(algo):
    return {"jaxrl": "jaxrl (rejax cfg)" if algo != "ddpg" else "jaxrl (rejax's old DDPG cfg)",
            "rejax": f"rejax {PEERS.get(algo, algo.upper())}", "jaxrl-default": f"jaxrl {algo}.Config()",
            "floor": "networks only"}


# ============================================================================ child


def _module(algo):
    from jaxrl.algorithms import ddpg, sac, td3

    return {"sac": sac, "td3": td3, "ddpg": ddpg}[algo]


def _jaxrl_config(algo, kind, args):
    module = _module(algo)
    common = dict(env_id=ENV_ID, num_reports=0, num_evals=args.evals, eval_episodes=args.eval_episodes,
                  total_timesteps=args.total_timesteps)
    if kind == "jaxrl":
        return module.Config(**{**jaxrl_fields(algo, args.total_timesteps), **common})
    if kind == "jaxrl-default":
        return module.Config(**common)
    raise ValueError(kind)


def run_jaxrl(jax, args, algo, seeds, kind):
    import dataclasses

    import numpy as np

    from jaxrl import envs

    module = _module(algo)
    config = _jaxrl_config(algo, kind, args)
    spec = envs.config_spec(config)
    assert np.allclose(spec.action_high, HALF_RANGE) and np.allclose(spec.action_low, -HALF_RANGE), spec
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(module.train, in_axes=(0, None))
    lower_s, compile_s, run_times, out, other_cpu = time_compiled(jax, train, (keys, config), args.runs)
    metrics = jax.device_get(out.metrics)
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=int(np.asarray(out.state.timesteps).reshape(-1)[0]),
        updates_per_seed=int(np.asarray(out.state.updates).reshape(-1)[0]), iterations=config.num_iterations,
        final_eval_return=nanmean(last_finite(metrics["eval_return"])) if args.evals else float("nan"),
        final_train_return=nanmean(last_finite(metrics["episode_return"])),
        evals_done=int(np.isfinite(metrics["eval_return"][0]).sum()),
        evaluation=f"{args.evals} x {args.eval_episodes} ep., deterministic" if args.evals else "off",
        settings={k: repr(v) for k, v in settings.items()},
    )


def run_floor(jax, args, seeds):
    """The ``floor`` row (SAC only): the arithmetic of SAC's networks alone, the same number
    of updates as the ``jaxrl (rejax cfg)`` run, and nothing else. Each update runs the
    policy at s' and the target critics (the TD target), the critics' forward and
    backward pass at (s, a), and the policy and critics forward and backward to the
    policy's parameters, on a fixed batch of 256 random transitions, followed by an SGD
    step (so no update can be hoisted out of the loop). No env steps, replay, Adam,
    temperature or evaluation. Any SAC with these networks at these settings does at
    least this work per update, so, compiled by the same XLA, its steps/s is as fast as
    SAC gets: the ratio column is how far above rejax that lies."""
    import jax.numpy as jnp

    from jaxrl.algorithms import sac

    config = _jaxrl_config("sac", "jaxrl", args)
    critic = sac.make_critic(config)  # twin critics: (obs, unit action) -> [2, B]
    updates = (config.num_iterations - config.warmup_iterations) * config.num_updates

    def one_seed(key):
        state = sac.init(key, config)
        obs_key, next_key, action_key, key = jax.random.split(key, 4)
        shape = (config.batch_size,) + state.obs.shape[1:]
        obs, next_obs = jax.random.normal(obs_key, shape), jax.random.normal(next_key, shape)
        action_shape = (config.batch_size,) + sac.env_spec(config).action_shape  # unit actions, as the critics see
        action = jax.random.uniform(action_key, action_shape, minval=-1.0, maxval=1.0)

        def update(carry, key):
            actor, critics = carry
            target_key, actor_key = jax.random.split(key)
            dist = sac.policy_distribution(actor, next_obs, config)
            next_action, next_log_prob = dist.sample_and_log_prob(target_key)
            target = jnp.min(critic.apply(state.target_params["critic"], next_obs, next_action), axis=0) - next_log_prob
            critic_grad = jax.grad(
                lambda p: jnp.sum(jnp.mean(jnp.square(critic.apply(p, obs, action) - target), axis=-1)))(critics)

            def actor_objective(p):
                new_action, log_prob = sac.policy_distribution(p, obs, config).sample_and_log_prob(actor_key)
                return jnp.mean(log_prob - jnp.min(critic.apply(critics, obs, new_action), axis=0))

            actor_grad = jax.grad(actor_objective)(actor)
            return (tiny_sgd(jax, actor, actor_grad), tiny_sgd(jax, critics, critic_grad)), None

        carry = (state.params["actor"], state.critic_params)
        return jax.lax.scan(update, carry, jax.random.split(key, updates))[0]

    keys = jax.random.split(jax.random.key(args.seed), seeds)
    lower_s, compile_s, run_times, _, other_cpu = time_compiled(jax, jax.vmap(one_seed), (keys,), args.runs)
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=config.total_timesteps, updates_per_seed=updates, iterations=updates,
        final_eval_return=float("nan"), final_train_return=float("nan"), evals_done=0, evaluation="none",
        settings={"updates": repr(updates), "batch_size": repr(config.batch_size),
                  "hidden_sizes": repr(config.hidden_sizes), "activation": repr(config.activation)},
    )


def _rejax_algo(args, algo):
    """rejax's SAC / TD3 at REJAX_PENDULUM[algo], running --total-timesteps in `evals` equal
    blocks of iterations, each ending in a deterministic evaluation of `eval_episodes`
    episodes. Returns (algo object, iterations, settings)."""
    import jax.numpy as jnp
    import rejax
    import rejax.evaluate

    r = REJAX_PENDULUM[algo]
    iteration_steps = r["num_envs"] * (r["policy_delay"] if algo == "td3" else 1)
    iterations = args.total_timesteps // iteration_steps  # what jaxrl runs
    if args.evals:
        per_block, num_blocks = math.ceil(iterations / args.evals), args.evals
    else:
        per_block, num_blocks = iterations, 1
    eval_freq = per_block * iteration_steps  # rejax runs ceil(eval_freq / iteration_steps) iterations per block
    env, env_params = rejax_env(ENV_ID)
    common = dict(
        env=env, env_params=env_params, num_envs=r["num_envs"], buffer_size=r["buffer_size"],
        fill_buffer=r["fill_buffer"], batch_size=r["batch_size"], learning_rate=r["learning_rate"],
        num_epochs=r["num_epochs"], total_timesteps=num_blocks * eval_freq, eval_freq=eval_freq,
        skip_initial_evaluation=True, gamma=r["gamma"], polyak=r["polyak"], target_update_freq=r["target_update_freq"],
        max_grad_norm=r["max_grad_norm"], normalize_observations=args.rejax_normalize_obs,
        normalize_rewards=r["normalize_rewards"],
    )
    if algo == "sac":
        peer = rejax.SAC.create(agent_kwargs={"activation": r["activation"]},
                                hidden_layer_sizes=r["hidden_layer_sizes"], num_critics=r["num_critics"], **common)

        def make_act(ts):  # deterministic: the tanh of the Gaussian's mean, on the action bounds
            actor = peer.actor

            def act(obs, rng):
                if peer.normalize_observations:
                    obs = peer.normalize_obs(ts.obs_rms_state, obs)
                dist = actor.apply(ts.actor_ts.params, jnp.expand_dims(obs, 0), method="_action_dist")
                return jnp.squeeze(actor.action_loc + jnp.tanh(dist.loc) * actor.action_scale)

            return act
    elif algo == "td3":
        peer = rejax.TD3.create(
            actor_kwargs={"activation": r["activation"]}, critic_kwargs={"activation": r["activation"]},
            num_critics=r["num_critics"], exploration_noise=r["exploration_noise"], target_noise=r["target_noise"],
            target_noise_clip=r["target_noise_clip"], policy_delay=r["policy_delay"], **common)
        make_act = peer.make_act  # the actor's output, no noise
    else:
        raise ValueError(f"rejax 0.1.3 has no {algo}")

    eval_episodes = args.eval_episodes
    if args.evals:
        def eval_callback(algo_, ts, rng):
            return rejax.evaluate.evaluate(make_act(ts), rng, env, env_params, eval_episodes,
                                           env_params.max_steps_in_episode)
    else:
        def eval_callback(algo_, ts, rng):
            return jnp.zeros((0,), jnp.int32), jnp.zeros((0,))
    peer = peer.replace(eval_callback=eval_callback)
    low, high = peer.action_space.low, peer.action_space.high
    assert jnp.allclose(high, HALF_RANGE) and jnp.allclose(low, -HALF_RANGE), (low, high)
    names = ["num_envs", "buffer_size", "fill_buffer", "batch_size", "num_epochs", "learning_rate",
             "total_timesteps", "eval_freq", "skip_initial_evaluation", "gamma", "polyak", "target_update_freq",
             "max_grad_norm", "num_critics", "normalize_observations", "normalize_rewards"]
    if algo == "td3":
        names += ["exploration_noise", "target_noise", "target_noise_clip", "policy_delay"]
    settings = {n: getattr(peer, n) for n in names}
    settings.update(actor=type(peer.actor).__name__, critic=type(peer.critic).__name__,
                    hidden_layer_sizes=peer.actor.hidden_layer_sizes,
                    activation=getattr(peer.actor.activation, "__name__", peer.actor.activation))
    return peer, num_blocks * per_block, settings


def run_rejax(jax, args, algo, seeds):
    import numpy as np

    peer, iterations, settings = _rejax_algo(args, algo)
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    train = jax.vmap(peer.train)
    lower_s, compile_s, run_times, out, other_cpu = time_compiled(jax, train, (keys,), args.runs)
    ts, (lengths, returns) = jax.device_get(out)
    return dict(
        lower_s=lower_s, compile_s=compile_s, run_times=run_times, other_cpu=other_cpu,
        steps_per_seed=int(np.asarray(ts.global_step).reshape(-1)[0]),
        updates_per_seed=int(np.asarray(ts.critic_ts.step).reshape(-1)[0]), iterations=iterations,
        **rejax_returns(ts, returns, args.evals),
        evaluation=f"{args.evals} x {args.eval_episodes} ep., deterministic" if args.evals else "off",
        settings={k: repr(v) for k, v in settings.items()},
    )


def child_main(args):
    algo, kind, seeds = args.one[0], args.one[1], int(args.one[2])

    def measure(jax):
        if kind == "floor":
            return run_floor(jax, args, seeds)
        return run_rejax(jax, args, algo, seeds) if kind == "rejax" else run_jaxrl(jax, args, algo, seeds, kind)

    # jaxrl applies its XLA settings on import (jaxrl/_xla.py); the peer runs as its own users
    # run it unless asked to run under the same process settings.
    measure_and_emit({"algo": algo, "library": kind, "seeds": seeds}, measure,
                     jaxrl_settings=kind != "rejax" or args.peer_with_jaxrl_settings,
                     packages=("gymnax", "rejax") if kind == "rejax" else ("gymnax",))


# ============================================================================ parent


def _measure(args, algo, kind, seeds):
    return measure_in_child(__file__, {"algo": algo, "library": kind, "seeds": seeds}, args,
                            ("total_timesteps", "evals", "eval_episodes", "seed", "runs", "peer_with_jaxrl_settings",
                             "rejax_normalize_obs"))


HEADERS = ["algo", "run", "seeds", "steps/seed", "updates/seed", "compile s", "run s (fastest)", "all runs s",
           "other CPU load", "steps/s", "final eval return", "last train ep. return",
           "jaxrl/rejax steps/s", "jaxrl/rejax compile"]
LEFT = (0, 1)


def _rows(results):
    rows = []
    for r in results:
        label = _labels(r["algo"])[r["library"]]
        if "error" in r:
            rows.append([r["algo"], label, str(r["seeds"]), "FAILED (see below)"] + ["-"] * (len(HEADERS) - 4))
            continue
        rows.append([
            r["algo"], label, str(r["seeds"]), f"{r['steps_per_seed']:,}", f"{r['updates_per_seed']:,}",
            fmt(r["total_compile_s"], ".1f"), fmt(r["run_s"], ".2f"), ", ".join(f"{t:.2f}" for t in r["run_times"]),
            ", ".join(fmt(c, ".2f") for c in r.get("other_cpu", [])) or "-", f"{r['steps_per_s']:,.0f}",
            fmt(r["final_eval_return"], ".1f"), fmt(r["final_train_return"], ".1f"),
            fmt(r.get("ratio_steps"), ".2f") + ("x" if "ratio_steps" in r else ""),
            fmt(r.get("ratio_compile"), ".2f") + ("x" if "ratio_compile" in r else ""),
        ])
    return rows


MAPPING_HEADERS = ["rejax setting", "rejax value", "jaxrl Config field", "jaxrl value", "same?", "note"]


def _mapping_rows(algo, args):
    rejax_values = dict(REJAX_PENDULUM[algo], normalize_observations=bool(args.rejax_normalize_obs)
                        if algo != "ddpg" else True)
    sources = (rejax_values, jaxrl_fields(algo, args.total_timesteps))
    rows = []
    for rejax_names, jaxrl_names, exact, note in MAPPING[algo]:
        if rejax_names == ("normalize_observations",) and algo != "ddpg" and args.rejax_normalize_obs:
            exact, note = False, "rejax normalises observations (yaml, --rejax-normalize-obs); jaxrl cannot"
        cells = []
        for names, source in zip((rejax_names, jaxrl_names), sources):
            cells += [", ".join(names), ", ".join(repr(source[n]) if n in source else "-" for n in names)]
        rows.append(cells + ["yes" if exact else "NO", note])
    return rows


def _mapping_title(algo):
    if algo == "ddpg":
        return ("ddpg: the DDPG section of rejax's configs/gymnax/pendulum.yaml (from when rejax had DDPG; "
                "rejax 0.1.3 has none) and the jaxrl ddpg.Config it maps to:")
    return (f"{algo}: rejax's Pendulum {algo.upper()} (configs/gymnax/pendulum.yaml + rejax 0.1.3 code defaults) "
            f"and the jaxrl {algo}.Config it maps to (the `jaxrl (rejax cfg)` rows):")


def _label(r):
    return f"{r['algo']} {_labels(r['algo'])[r['library']]}"


def _errors(results):
    return [f"{_label(r)} x{r['seeds']}: {r['error']}" for r in results if "error" in r]


def parent_main(args):
    command = shlex.join(["python"] + sys.argv)
    peer_note = peer_missing("rejax", args.no_peers)
    with_rejax = peer_note is None
    notes = [peer_note] if peer_note else []
    if with_rejax and "ddpg" in args.algos:
        notes.append("rejax 0.1.3 has no DDPG (SAC and TD3 only): the ddpg rows are jaxrl only")

    plan = []
    for algo in args.algos:
        for seeds in args.seeds:
            plan += [(algo, "jaxrl", seeds)] + ([(algo, "rejax", seeds)] if with_rejax and algo in PEERS else [])
            plan += [(algo, "floor", seeds)] if algo == "sac" and not args.no_floor else []
        if not args.no_default:
            plan += [(algo, "jaxrl-default", seeds) for seeds in args.seeds]

    results = []
    for n, (algo, kind, seeds) in enumerate(plan, 1):
        print(f"[{n}/{len(plan)}] {algo}: {_labels(algo)[kind]} x{seeds} seeds ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        result = _measure(args, algo, kind, seeds)
        results.append(result)
        if "error" in result:
            status = result["error"]
        else:
            status = timing_status(result)
        print(f"    {status} (wall {time.perf_counter() - start:.0f}s, load {os.getloadavg()[0]:.2f})",
              file=sys.stderr, flush=True)
    derive_timing(results)
    peer_ratios(results, same=("algo", "seeds"), libraries=("jaxrl", "floor"))
    rows = _rows(results)

    title = (f"{', '.join(a.upper() for a in args.algos)} on {ENV_ID} at rejax's Pendulum configurations, "
             f"{args.total_timesteps:,} env steps per seed, seeds vmapped: {', '.join(map(str, args.seeds))}")
    machine = machine_lines(results, command)
    errors = _errors(results)
    notes += other_cpu_warning(results)
    evaluation = (f"evaluation: {args.evals} x {args.eval_episodes} episodes per run on both sides, deterministic "
                  "policy, inside the timed run" if args.evals else "evaluation: off")
    differences = [d for algo in args.algos for d in DIFFERENCES[algo]] + DIFFERENCES["all"]

    print()
    print(title)
    print()
    print(text_table(HEADERS, rows, left=LEFT))
    print()
    for line in errors:
        print("error: " + line)
    for line in machine + [evaluation] + notes:
        print(line)
    for algo in args.algos:
        print()
        print(_mapping_title(algo))
        print(text_table(MAPPING_HEADERS, _mapping_rows(algo, args), left=range(6)))
    print()
    print("differences that cannot be matched or are by design:")
    for note in differences:
        print(" - " + note)
    for line in settings_lines(results, _label):
        print(" - " + line)

    if args.markdown:
        md = [f"## {title}", "", markdown_table(HEADERS, rows), ""]
        md += [f"- error: {line}" for line in errors]
        md += [f"- {line}" for line in machine + [evaluation] + notes]
        for algo in args.algos:
            md += ["", _mapping_title(algo), "", markdown_table(MAPPING_HEADERS, _mapping_rows(algo, args))]
        md += ["", "Differences that cannot be matched or are by design:", ""]
        md += [f"- {note}" for note in differences]
        md += [f"- {line}" for line in settings_lines(results, _label)]
        write_markdown(args.markdown, md, results)
    return 0 if any(r["library"] == "jaxrl" and "error" not in r for r in results) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS),
                        help="algorithms to measure (default: %(default)s)")
    parser.add_argument("--seeds", nargs="+", type=seed_list, default=[[1, 8]],
                        help='numbers of vmapped seeds, e.g. "1 8" or "1,8" (default: 1 8)')
    parser.add_argument("--total-timesteps", type=int, default=None,
                        help="env steps per seed (default: 20,000; --quick: 5,000)")
    parser.add_argument("--no-default", action="store_true", help="skip the jaxrl X.Config() rows")
    parser.add_argument("--no-floor", action="store_true", help="skip the SAC networks-only rows")
    parser.add_argument("--quick", action="store_true", help="smoke test: 5,000 steps, 1 run per measurement")
    parser.add_argument("--evals", type=int, default=10,
                        help="evaluations per run on both sides, 0 = off (default: %(default)s)")
    parser.add_argument("--eval-episodes", type=int, default=10,
                        help="episodes per evaluation on both sides (default: %(default)s)")
    parser.add_argument("--rejax-normalize-obs", action="store_true",
                        help="run rejax with its Pendulum yaml's normalize_observations=True (jaxrl has no "
                             "observation normalisation for these algorithms, so the default is False)")
    add_peer_arguments(parser, "rejax")
    add_common_arguments(parser, ("ALGO", "RUN", "SEEDS"))
    args = parse_arguments(parser, argv)
    args.seeds = list(dict.fromkeys(s for group in args.seeds for s in group))
    args.algos = list(dict.fromkeys(args.algos))
    if args.total_timesteps is None:
        args.total_timesteps = 5_000 if args.quick else 20_000
    if args.total_timesteps < 2_000:
        parser.error("--total-timesteps must be at least 2,000 (rejax's TD3 fill_buffer and jaxrl's default "
                     "learning_starts, plus some learning)")
    if args.evals < 0 or args.eval_episodes < 1:
        parser.error("--evals must be >= 0, --eval-episodes >= 1")
    if args.one:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
