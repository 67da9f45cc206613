"""Updates per second of the offline algorithms on a 1M-transition dataset, beside a floor.

    python benchmarks/offline.py                       # 5,000 updates each, 3 runs
    python benchmarks/offline.py --quick               # 500 updates, 1 run
    python benchmarks/offline.py --algorithms td3_bc cql --markdown out.md
    python benchmarks/offline.py --table --seeds 8      # the learning table (returns, not speed)

Each algorithm (``td3_bc``, ``cql``, ``implicit_q`` on Pendulum-v1's shapes;
``discrete_cql`` on CartPole-v1's) trains at its Config's defaults (the papers' 256 x 256
networks, batch 256) from a dataset of ``--size`` random transitions, without
evaluations or progress reports: ``train`` jitted, compile time apart from the run.

The floor row of each is the same network passes on batches gathered from the same
dataset, nothing else: per update the forward and backward passes each network's loss
needs at the batch's shapes (listed in the notes), each backward pass followed by a tiny
SGD step so that no pass can be hoisted or merged; no optimiser, loss arithmetic, target
update or sampling of actions. Its updates/s is a ceiling for any implementation of
these settings on this machine; ``of floor`` is jaxrl's fraction of it.

``--table`` is the learning table instead: each algorithm at its learning test's settings
(its preset for the env: tests/test_offline_learning.py and notebooks/offline_to_online.ipynb) on
the tests' datasets (tests/offline_datasets.py: a policy stopped early, 80%, and random
actions, 20%), ``--seeds`` seeds, beside the dataset's mean episode return and BC trained
on the same file with the same seeds.

Method: every measurement in a fresh process (JAX's compilation cache off); the fastest
of ``--runs`` runs. A measurement that fails, times out or hangs is reported in the table.
"""

from __future__ import annotations

import argparse
import sys

from _harness import (
    add_common_arguments,
    derive_timing,
    measure_and_emit,
    measure_in_child,
    measure_plan,
    report,
    time_compiled,
)

ALGORITHMS = {"td3_bc": "Pendulum-v1", "cql": "Pendulum-v1", "implicit_q": "Pendulum-v1", "discrete_cql": "CartPole-v1"}
KINDS = ("jaxrl", "floor")
PASSES = {
    "td3_bc": "critics fwd+bwd at (s, a), target actor + target critics fwd at s'; every 2nd update the actor "
    "fwd+bwd through the first critic at s",
    "cql": "as SAC (actor at s' fwd, target critics fwd, critics fwd+bwd at (s, a), actor + critics fwd+bwd at s) "
    "plus the critics fwd+bwd at 3 x 10 proposed actions per state and the actor fwd at s and s' for 10 samples",
    "implicit_q": "V fwd+bwd at s, target critics fwd at (s, a), actor fwd+bwd at s, V fwd at s', critics fwd+bwd "
    "at (s, a)",
    "discrete_cql": "Q fwd+bwd at s, Q and target Q fwd at s' (double Q-learning)",
}


# ============================================================================ child


def random_dataset(jax, env_id: str, size: int):
    """``size`` transitions of random observations, actions and rewards shaped for ``env_id``."""
    import numpy as np

    from jaxrl import data, envs

    env, env_params = envs.make(env_id)
    spec = envs.spec(env, env_params)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(size, *spec.obs_shape)).astype(np.float32)
    if spec.discrete:
        action = rng.integers(0, spec.num_actions, size).astype(np.int32)
    else:
        action = rng.uniform(spec.action_low, spec.action_high, (size, *spec.action_shape)).astype(np.float32)
    return jax.device_put(
        data.Dataset(
            obs=obs,
            action=action,
            reward=rng.normal(size=size).astype(np.float32),
            terminated=rng.random(size) < 0.005,
            truncated=np.zeros(size, bool),
            next_obs=rng.normal(size=(size, *spec.obs_shape)).astype(np.float32),
            episode_return=np.zeros(size, np.float32),
            episode_length=np.zeros(size, np.int32),
            env_id=env_id,
            num_envs=1,
        )
    )


def tiny_sgd(jax, params, grads):
    """``params - 1e-6 * grads``: each pass then depends on the last one's output."""
    return jax.tree.map(lambda p, g: p - 1e-6 * g, params, grads)


def floor_update(jax, name: str, config):
    """``(init(key) -> params, update(params, batch) -> params)``: the network passes of one
    update of ``name`` (:data:`PASSES`) at ``config``'s networks."""
    import jax.numpy as jnp

    from jaxrl import envs
    from jaxrl.algorithms import cql, ddpg, discrete_cql, dqn, implicit_q, sac, td3_bc

    spec = envs.config_spec(config)
    obs = spec.zeros((1,))
    if name == "discrete_cql":
        online = discrete_cql.online_config(config)
        network = dqn.make_network(online)

        def init(key):
            params = dqn.init_network(online, key, obs)
            return {"q": params, "target": params}

        def update(params, batch):
            next_action = jnp.argmax(network.apply(params["q"], batch["next_obs"]), -1)
            next_q = jnp.take_along_axis(network.apply(params["target"], batch["next_obs"]), next_action[:, None], -1)
            loss = lambda q: jnp.mean(jnp.square(network.apply(q, batch["obs"]).max(-1) - next_q[:, 0]))  # noqa: E731
            return {**params, "q": tiny_sgd(jax, params["q"], jax.grad(loss)(params["q"]))}

        return init, update

    unit = jnp.zeros((1, spec.action_shape[0]), jnp.float32)
    if name == "td3_bc":
        online = td3_bc.online_config(config)
        actor, critic, first = ddpg.make_actor(online), ddpg.make_critic(online), ddpg.make_critic(online, 1)
    else:
        online = (implicit_q if name == "implicit_q" else cql).online_config(config)
        actor, critic = sac.make_actor(online), sac.make_critic(online)

    def init(key):
        keys = jax.random.split(key, 3)
        params = {"actor": actor.init(keys[0], obs), "critic": critic.init(keys[1], obs, unit)}
        params["target_actor"], params["target_critic"] = params["actor"], params["critic"]
        if name == "implicit_q":
            params["value"] = implicit_q.make_value(config).init(keys[2], obs)
        return params

    def critic_step(params, batch, target):
        loss = lambda c: jnp.mean(jnp.square(critic.apply(c, batch["obs"], batch["unit"]) - target))  # noqa: E731
        return {**params, "critic": tiny_sgd(jax, params["critic"], jax.grad(loss)(params["critic"]))}

    if name == "td3_bc":

        def one(params, batch):
            next_action = actor.apply(params["target_actor"], batch["next_obs"])
            target = jnp.min(critic.apply(params["target_critic"], batch["next_obs"], next_action), 0)
            return critic_step(params, batch, target)

        def update(params, batch):  # two critic updates, one actor update
            params = one(one(params, batch), batch)
            head = jax.tree.map(lambda p: p[:1], params["critic"])
            loss = lambda a: -jnp.mean(first.apply(head, batch["obs"], actor.apply(a, batch["obs"])))  # noqa: E731
            return {**params, "actor": tiny_sgd(jax, params["actor"], jax.grad(loss)(params["actor"]))}

        return init, update

    if name == "implicit_q":
        value = implicit_q.make_value(config)

        def update(params, batch):
            q = jnp.min(critic.apply(params["target_critic"], batch["obs"], batch["unit"]), 0)
            v_loss = lambda v: jnp.mean(jnp.square(value.apply(v, batch["obs"]) - q))  # noqa: E731
            params = {**params, "value": tiny_sgd(jax, params["value"], jax.grad(v_loss)(params["value"]))}
            weights = jnp.exp(q - value.apply(params["value"], batch["obs"]))

            def a_loss(a):
                loc, log_std = actor.apply(a, batch["obs"])
                return -jnp.mean(weights * jnp.sum(loc * batch["unit"] - log_std, -1))

            params = {**params, "actor": tiny_sgd(jax, params["actor"], jax.grad(a_loss)(params["actor"]))}
            return critic_step(params, batch, value.apply(params["value"], batch["next_obs"]))

        return init, update

    proposals = 10

    def update(params, batch):  # CQL on SAC
        next_loc, _ = actor.apply(params["actor"], batch["next_obs"])
        target = jnp.min(critic.apply(params["target_critic"], batch["next_obs"], jnp.tanh(next_loc)), 0)
        loc, _ = actor.apply(params["actor"], batch["obs"])
        sampled = jnp.tanh(jnp.concatenate([loc, next_loc, loc]))  # 3 proposals' worth of actions per state
        many_obs = jnp.repeat(jnp.concatenate([batch["obs"]] * 3), proposals, axis=0)
        many_actions = jnp.repeat(sampled, proposals, axis=0)

        def c_loss(c):
            td = jnp.mean(jnp.square(critic.apply(c, batch["obs"], batch["unit"]) - target))
            return td + jnp.mean(jax.nn.logsumexp(critic.apply(c, many_obs, many_actions)))

        params = {**params, "critic": tiny_sgd(jax, params["critic"], jax.grad(c_loss)(params["critic"]))}

        def a_loss(a):
            loc, log_std = actor.apply(a, batch["obs"])
            return jnp.mean(log_std) - jnp.mean(jnp.min(critic.apply(params["critic"], batch["obs"], jnp.tanh(loc)), 0))

        return {**params, "actor": tiny_sgd(jax, params["actor"], jax.grad(a_loss)(params["actor"]))}

    return init, update


def measure(jax, args) -> dict:
    import importlib

    from jaxrl import data, envs

    name, kind = args.one
    module = importlib.import_module(f"jaxrl.algorithms.{name}")
    config = module.Config(env_id=ALGORITHMS[name], num_updates=args.updates, num_evals=0, num_reports=0)
    dataset = random_dataset(jax, config.env_id, args.size)
    key = jax.random.key(0)
    if kind == "jaxrl":
        timing, _ = time_compiled(
            jax, lambda key, dataset: module.train(key, config, dataset), (key, dataset), args.runs
        )
    else:
        spec, (init, update) = envs.config_spec(config), floor_update(jax, name, config)

        def floor(key, dataset):
            def one(params, key):
                batch = data.sample(dataset, key, config.batch_size)
                batch = {"obs": batch.obs, "next_obs": batch.next_obs, "action": batch.action}
                if not spec.discrete:
                    batch["unit"] = spec.to_unit(batch["action"])
                return update(params, batch), ()

            # TD3+BC's floor update is two critic updates and one actor update.
            calls = args.updates // (2 if name == "td3_bc" else 1)
            return jax.lax.scan(one, init(key), jax.random.split(key, calls))[0]

        timing, _ = time_compiled(jax, floor, (key, dataset), args.runs)
    return dict(timing, steps_per_seed=args.updates, dataset_size=args.size)


def child_main(args) -> None:
    measure_and_emit({}, lambda jax: measure(jax, args))


# ============================================================================ the learning table

# Each algorithm at its preset for the dataset's env (its learning test's settings), on
# the tests' dataset of that name (tests/offline_datasets.py).
TABLE = {
    "td3_bc": "medium_pendulum",
    "cql": "medium_pendulum",
    "implicit_q": "medium_pendulum",
    "discrete_cql": "mixed_cartpole",
}
BC_UPDATES = 5_000


def learning_table(args) -> int:
    import pathlib
    import time

    import jax
    import numpy as np

    sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "tests"))
    import offline_datasets

    from jaxrl import algorithms, data

    keys = jax.random.split(jax.random.key(42), args.seeds)
    evaluation = dict(num_evals=1, eval_episodes=10, num_reports=0)

    def final(algorithm, config, dataset):
        out = jax.jit(jax.vmap(algorithm.train, in_axes=(0, None, None)))(keys, config, dataset)
        return np.asarray(out.metrics["eval_return"])[:, -1]

    rows, cloned = [], {}
    for name in args.algorithms:
        if name not in TABLE:
            continue
        recipe = TABLE[name]
        dataset = getattr(offline_datasets, recipe)()
        mean = float(data.episode_metrics(dataset)["episode_return"])
        if recipe not in cloned:
            bc = algorithms.get("bc")
            cloned[recipe] = final(bc, bc.Config(env_id=dataset.env_id, num_updates=BC_UPDATES, **evaluation), dataset)
        algorithm = algorithms.get(name)
        start = time.perf_counter()
        config = algorithm.preset(dataset.env_id, **evaluation)
        returns = final(algorithm, config, dataset)
        seconds = time.perf_counter() - start
        beats = int(((returns > mean) & (returns > cloned[recipe])).sum())
        rows.append(
            [
                f"{recipe} ({dataset.env_id})",
                name,
                f"{config.num_updates:,}",
                f"{returns.mean():.0f} ({', '.join(f'{r:.0f}' for r in returns)})",
                f"{mean:.0f}",
                f"{cloned[recipe].mean():.0f}",
                f"{beats}/{args.seeds}",
                f"{seconds:.0f}",
            ]
        )
    headers = ["dataset", "algorithm", "updates", "final return: mean (seeds)", "dataset mean", "BC", "above both", "s"]
    notes = [
        f"final evaluation: 10 deterministic episodes; BC: {BC_UPDATES:,} updates at bc.Config's defaults, the same "
        "seeds; 'above both': seeds above the dataset's mean episode return and above BC's same seed",
        "s: wall seconds of the 4-seed program, compile included",
    ]
    report(
        f"Offline algorithms: learning from the tests' datasets, {args.seeds} seeds",
        headers,
        rows,
        notes,
        [],
        args.markdown,
    )
    return 0


# ============================================================================ parent

HEADERS = ["algorithm", "env", "row", "compile s", "run s", "updates/s", "of floor"]


def parent_main(args) -> int:
    plan = [(name, kind) for name in args.algorithms for kind in KINDS]
    results = measure_plan(
        plan,
        lambda item: measure_in_child(
            __file__, {"algorithm": item[0], "kind": item[1]}, args, ("updates", "size", "runs")
        ),
        label=lambda item: f"{item[0]} {item[1]}",
    )
    derive_timing(results)
    floors = {r["algorithm"]: r["steps_per_s"] for r in results if r["kind"] == "floor" and "error" not in r}
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["algorithm"], ALGORITHMS[r["algorithm"]], r["kind"], "-", "-", "failed", "-"])
            continue
        floor = floors.get(r["algorithm"])
        fraction = f"{r['steps_per_s'] / floor:.0%}" if floor and r["kind"] == "jaxrl" else "-"
        rows.append(
            [
                r["algorithm"],
                ALGORITHMS[r["algorithm"]],
                r["kind"],
                f"{r['compile_s']:.1f}",
                f"{r['run_s']:.2f}",
                f"{r['steps_per_s']:,.0f}",
                fraction,
            ]
        )
    notes = [
        f"{args.updates:,} updates per run, batch 256, each Config's defaults (256 x 256 networks), from "
        f"{args.size:,} random transitions; the fastest of {args.runs} run(s); no evaluation",
        *[f"floor of {name}: {PASSES[name]}" for name in args.algorithms],
        "errors: " + "; ".join(f"{r['algorithm']} {r['kind']}: {r['error']}" for r in results if "error" in r)
        if any("error" in r for r in results)
        else "no errors",
    ]
    title = f"Offline algorithms: updates per second on a {args.size:,}-transition dataset"
    report(title, HEADERS, rows, notes, results, args.markdown, left=(0, 1, 2))
    return 0 if all("error" not in r for r in results) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", choices=list(ALGORITHMS), default=list(ALGORITHMS))
    parser.add_argument("--updates", type=int, default=None, help="updates per run (default 5000; --quick 500)")
    parser.add_argument("--size", type=int, default=1_000_000, help="transitions in the dataset (default 1M)")
    parser.add_argument("--quick", action="store_true", help="500 updates, 1 run")
    parser.add_argument("--table", action="store_true", help="the learning table instead of updates per second")
    parser.add_argument("--seeds", type=int, default=4, help="--table: seeds per algorithm (default 4)")
    add_common_arguments(parser, ("ALGORITHM", "KIND"), runs=True, timeout=1800, stall_timeout=600)
    args = parser.parse_args(argv)
    args.updates = args.updates or (500 if args.quick else 5_000)
    args.runs = 1 if args.quick else (args.runs or 3)
    if args.one:
        child_main(args)
        return 0
    if args.table:
        return learning_table(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
