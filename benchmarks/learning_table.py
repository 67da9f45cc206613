"""The learning table: each algorithm's preset (``algo.preset(env_id)``, what
``python -m jaxrl train ALGO --env ENV`` uses) on gymnax tasks, several seeds, beside
the published reference return for the task.

    python benchmarks/learning_table.py --quick                      # the QUICK rows: minutes
    python benchmarks/learning_table.py                              # every row: hours on 2 cores
    python benchmarks/learning_table.py ppo dqn --envs MountainCar-v0 --seeds 8 --markdown table.md
    python benchmarks/learning_table.py dqn --envs MountainCar-v0 --set "n_step=3 exploration.end=0.1"   # a sweep point
    python benchmarks/learning_table.py ppo --envs SpaceInvaders-MinAtar --budget 5000000   # a row at a smaller budget
    python benchmarks/learning_table.py --render a.md b.md --markdown all.md   # one table from earlier runs

Per row, in a fresh process (JAX's persistent compilation cache off): ``jax.jit`` of
``jax.vmap(train)`` over ``--seeds`` keys at the row's budget, evaluating the
deterministic policy on ``EVAL_EPISODES`` episodes at ``EVALS`` points of the run.
A row's ``settings`` change the preset's fields (the adapters' rows: brax, xminigrid,
Gymnasium); ``--set`` changes preset fields for every selected row (the hand sweeps
behind the presets, rerun with a kept command).

Columns: final return = the last evaluation of each seed, summarised as the IQM (the
mean of the middle half of the seeds) with a 95% percentile-bootstrap interval over
seeds (``BOOTSTRAP`` resamples); reached = the seeds whose final return reaches the
reference; steps to ref = the median, over the seeds that got there, of the env steps
at the first evaluation at or above the reference; wall = compile + run of all seeds
together on this machine (seeds run in one vmapped program, so this is not seeds x one
seed's time).

References (``REFERENCES``): the returns of gymnax-blines' trained PPO / OpenAI-ES
agents, as the gymnax README lists them, with the step budget of gymnax-blines' PPO
config for the task (``agents/<env>/ppo.yaml``, ``num_train_steps``); for the env suites'
adapters (brax, xminigrid, Gymnasium), the thresholds their learning tests held before
they moved here, at those tests' budgets. A row's budget is
its own (``Row.budget``, or ``--budget``); where it differs from the reference's, both are
shown, except where the reference's source logged its run (gymnax-blines' PPO on the
MinAtar games, ``BLINES_LOG_RETURNS``): a row at a budget inside that log is set beside
the run's return there. Beside
it, where the same algorithm has one (``ZOO``), rl-baselines3-zoo's result for the task
(its ``benchmark.md``: one trained agent per row, deterministic evaluation, on the gym /
gymnasium version of the task) at the zoo's budget, and the seeds that reach it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import add_common_arguments, fmt, measure_and_emit, measure_in_child, measure_plan, report  # noqa: E402

from jaxrl.algorithms.dqn import RAINBOW  # noqa: E402  (rows' settings)
from jaxrl.algorithms.ppo import PRESETS as PPO_PRESETS  # noqa: E402
from jaxrl.buffers.sequence import Windows  # noqa: E402
from jaxrl.value_heads import ImplicitQuantile, Quantile  # noqa: E402

EVALS, EVAL_EPISODES, BOOTSTRAP = 20, 32, 10_000


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published return for a task: ``value`` after ``budget`` env steps, per ``source``;
    ``curve``: where the source's run logged its return along the way, ``(steps,
    returns)``, so that a row at a smaller budget is set beside the run at that budget."""

    value: float
    budget: int
    source: str
    curve: tuple = ()

    def at(self, budget: int) -> Reference:
        """The reference for a row of ``budget`` env steps: the curve's value there (linear
        between its points) where the curve reaches that far and ``budget`` is not the
        reference's own; else this one."""
        if not self.curve or budget == self.budget or not self.curve[0][0] <= budget <= self.curve[0][-1]:
            return self
        import numpy as np

        value = round(float(np.interp(budget, *self.curve)), 1)
        return Reference(value, budget, f"{self.source}, its logged run")


BLINES = "gymnax-blines PPO"
# gymnax-blines' PPO runs on the MinAtar games (their agents/<game>-MinAtar/ppo.pkl at
# 3f029d6, "log_steps" / "log_return": sampled episodes' mean return every 320k steps),
# at the settings of jaxrl's MinAtar preset. Their Breakout run ends at 22.9, below the 28
# of gymnax's README, which stays the reference at 10M.
BLINES_LOG_STEPS = tuple(319_936 + 320_000 * k for k in range(31))
BLINES_LOG_RETURNS = {
    "Asterix": (
        1.36, 1.62, 1.8, 2.14, 2.55, 2.76, 3.45, 4.67, 5.38, 7.21, 6.68, 7.0, 8.64, 7.65, 8.08, 7.65,
        8.54, 9.99, 11.26, 9.72, 10.48, 12.51, 12.38, 11.49, 11.46, 13.77, 12.74, 13.34, 14.83, 15.37, 14.95,
    ),
    "Breakout": (
        8.37, 15.45, 16.63, 15.71, 16.02, 15.42, 16.29, 16.23, 15.63, 15.54, 14.91, 16.54, 17.9, 21.63, 21.97,
        21.95, 22.51, 22.72, 23.02, 22.55, 22.99, 22.12, 22.87, 22.91, 23.34, 20.7, 23.04, 23.46, 23.46, 20.07, 22.88,
    ),
    "Freeway": (
        24.69, 28.16, 29.04, 30.25, 32.8, 36.16, 38.32, 40.33, 43.18, 43.77, 46.99, 48.57, 49.6, 50.78, 52.09,
        51.23, 53.98, 54.64, 54.52, 54.49, 54.41, 55.73, 55.28, 56.45, 57.04, 57.54, 57.86, 57.4, 57.51, 58.27, 58.8,
    ),
    "SpaceInvaders": (
        19.4, 30.37, 50.38, 58.38, 71.53, 84.32, 87.51, 89.55, 94.06, 90.36, 88.91, 92.37, 99.55, 97.34, 99.87,
        92.71, 105.68, 112.76, 122.37, 118.57, 125.35, 126.55, 125.74, 123.34, 126.72, 120.77, 126.03, 127.53,
        130.36, 136.54, 131.64,
    ),
}  # fmt: skip
BLINES_ES = "gymnax-blines PPO/ES"
REFERENCES = {
    "CartPole-v1": Reference(500.0, 150_000, BLINES_ES),
    "Acrobot-v1": Reference(-80.0, 500_000, BLINES_ES),
    "MountainCar-v0": Reference(-118.0, 250_000, BLINES_ES),
    "Pendulum-v1": Reference(-130.0, 1_000_000, BLINES_ES),
    "MountainCarContinuous-v0": Reference(92.0, 1_000_000, BLINES_ES),
    "Catch-bsuite": Reference(1.0, 100_000, BLINES_ES),
    "DeepSea-bsuite": Reference(0.0, 150_000, BLINES_ES),
    "MemoryChain-bsuite": Reference(0.1, 150_000, BLINES_ES),
    "UmbrellaChain-bsuite": Reference(1.0, 150_000, BLINES_ES),
    "DiscountingChain-bsuite": Reference(1.1, 150_000, BLINES_ES),
    **{
        f"{game}-MinAtar": Reference(value, 10_000_000, BLINES, (BLINES_LOG_STEPS, BLINES_LOG_RETURNS[game]))
        for game, value in (("Asterix", 15.0), ("Breakout", 28.0), ("Freeway", 58.0), ("SpaceInvaders", 131.0))
    },
    # Adapters' rows (each adapter's steps are checked against its suite in tests/): the
    # thresholds their learning tests held before moving here, at those tests' budgets.
    "brax:inverted_pendulum": Reference(180.0, 100_000, "jaxrl; doing nothing scores 21, at most 200"),
    "xminigrid:MiniGrid-EmptyRandom-6x6": Reference(0.9, 16_384, "jaxrl; never reaching the goal scores 0"),
    "gymnasium:Pendulum-v1": Reference(-250.0, 12_000, "jaxrl; gymnax's Pendulum-v1 alike"),
    "gymnasium:CartPole-v1": Reference(475.0, 80_000, "jaxrl; random play scores about 22"),
    # Former learning tests' rows: the thresholds those tests held, at their budgets.
    "MaskedPendulum-v1": Reference(-300.0, 12_000, "jaxrl; random play scores about -1200"),
    "jaxmarl:MPE_simple_spread_v3": Reference(-23.3, 300_000, "jaxrl; uniform random play: -26.3 per agent"),
}
# Asterix, Breakout, Freeway and SpaceInvaders are the MinAtar games gymnax-blines
# trained; gymnax's Seaquest-MinAtar has no reference there.

# Where an algorithm's row has a reference of its own at its budget. DQN on MinAtar:
# gymnax-blines trained no DQN, so the MinAtar paper's (Young & Tian, 2019) DQN curves
# at 500k steps, read off its published plot (kenjyoung/MinAtar's learning_curves.gif:
# 30 seeds, training returns at epsilon 0.1, sticky actions, the full action set).
MINATAR_DQN = "MinAtar paper DQN, read off its plot"
ALGORITHM_REFERENCES = {
    ("dqn", "Asterix-MinAtar"): Reference(1.0, 500_000, MINATAR_DQN),
    ("dqn", "Breakout-MinAtar"): Reference(8.3, 500_000, MINATAR_DQN),
    ("dqn", "Freeway-MinAtar"): Reference(34.5, 500_000, MINATAR_DQN),
    ("dqn", "SpaceInvaders-MinAtar"): Reference(27.8, 500_000, MINATAR_DQN),
}


def reference_for(row) -> Reference:
    return ALGORITHM_REFERENCES.get((row.algorithm, row.env_id), REFERENCES[row.env_id]).at(row.budget)


ZOO_SOURCE = "rl-baselines3-zoo"
ZOO = {
    (algorithm, env_id): Reference(value, budget, ZOO_SOURCE)
    for algorithm, env_id, value, budget in (
        ("ppo", "CartPole-v1", 500.0, 100_000),
        ("a2c", "CartPole-v1", 500.0, 500_000),
        ("dqn", "CartPole-v1", 500.0, 50_000),
        ("ppo", "Acrobot-v1", -73.5, 1_000_000),
        ("a2c", "Acrobot-v1", -83.4, 500_000),
        ("dqn", "Acrobot-v1", -76.6, 100_000),
        ("ppo", "MountainCar-v0", -110.4, 1_000_000),
        ("a2c", "MountainCar-v0", -111.3, 1_000_000),
        ("dqn", "MountainCar-v0", -100.8, 120_000),
        ("ppo", "Pendulum-v1", -172.2, 100_000),
        ("sac", "Pendulum-v1", -157.0, 20_000),
        ("td3", "Pendulum-v1", -151.9, 20_000),
        ("ppo", "MountainCarContinuous-v0", 88.3, 20_000),
        ("sac", "MountainCarContinuous-v0", 94.7, 50_000),
        ("td3", "MountainCarContinuous-v0", 93.5, 300_000),
    )
}


@dataclasses.dataclass(frozen=True)
class Row:
    algorithm: str
    env_id: str
    budget: int  # env steps per seed
    quick: bool = False  # in --quick
    settings: dict = dataclasses.field(default_factory=dict)  # over the preset, under --set


DISCRETE = ("ppo", "a2c", "dqn")
CONTINUOUS = ("ppo", "sac", "td3")
ROWS = (
    Row("reinforce", "CartPole-v1", 200_000, quick=True),
    *(Row(a, "CartPole-v1", 150_000) for a in ("ppo", "a2c", "dqn")),
    *(Row(a, "Acrobot-v1", 500_000) for a in DISCRETE),
    Row("ppo", "MountainCar-v0", 1_000_000, quick=True),
    Row("dqn", "MountainCar-v0", 250_000),
    Row("a2c", "MountainCar-v0", 1_000_000),
    *(Row(a, "Pendulum-v1", 300_000 if a == "ppo" else 50_000) for a in CONTINUOUS),
    Row("td3", "MountainCarContinuous-v0", 60_000, quick=True),
    Row("ppo", "MountainCarContinuous-v0", 300_000),
    Row("sac", "MountainCarContinuous-v0", 50_000),
    *(
        Row(a, env_id, 150_000)
        for env_id in ("Catch-bsuite", "DeepSea-bsuite", "UmbrellaChain-bsuite", "DiscountingChain-bsuite")
        for a in DISCRETE
    ),
    # PPO at gymnax-blines' 10M steps; DQN at its preset's 500k, as its CNN update is
    # the cost (wall times: benchmarks/RESULTS.md, "Pixels").
    *(
        Row(a, f"{game}-MinAtar", budget)
        for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
        for a, budget in (("ppo", 10_000_000), ("dqn", 500_000))
    ),
    # PQN (tests/test_pqn.py solves CartPole at 200k); on MinAtar at what 2 cores train in
    # about 20 minutes for 4 seeds, as its MinAtar CNN is the cost (benchmarks/RESULTS.md,
    # "PQN and quantile heads"), a tenth of purejaxql's 10M-step budget.
    Row("pqn", "CartPole-v1", 200_000),
    *(Row("pqn", f"{game}-MinAtar", 1_048_576) for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders")),
    # brax's default "generalized" backend (on "spring" a hand-set PD controller holds the
    # pendulum 91 steps, on "generalized" 1000), episodes cut at 200 steps. As a test, 4
    # seeds (key 42) ended at 200 and 8 others at 200 but one at 183.
    Row(
        "ppo",
        "brax:inverted_pendulum",
        100_000,
        settings=dict(
            env_kwargs={"max_steps_in_episode": 200},
            num_envs=16,
            num_steps=64,
            hidden_sizes=(32, 32),
            learning_rate=1e-3,
            num_epochs=10,
            num_minibatches=8,
            normalize_observations=True,
            ent_coef=0.0,
        ),
    ),
    # Random start, egocentric 7x7 view, reward 1 - 0.9 * steps / 144 at the goal (shortest
    # paths average about 5 steps). As a test, 20 seeds ended between 0.946 and 0.966;
    # after 4k steps most are below 0.5.
    Row(
        "ppo",
        "xminigrid:MiniGrid-EmptyRandom-6x6",
        16_384,
        settings=dict(num_envs=16, num_steps=32, learning_rate=1e-3),
    ),
    # SAC's defaults through the Gymnasium bridge (host callbacks). As a test, over 5 seeds
    # evaluated every 2k steps: all >= -250 at 4k, 3-4 of 5 at 6k-10k, all at 12k-16k.
    Row("sac", "gymnasium:Pendulum-v1", 12_000),
    # PPO through the bridge at CartPole-v1's own preset (RL Zoo's settings): its former
    # test's threshold and budget (>= 475 in 2 of 3 seeds at 80k).
    Row(
        "ppo",
        "gymnasium:CartPole-v1",
        80_000,
        settings={k: v for k, v in PPO_PRESETS["CartPole-v1"].items() if k != "total_timesteps"},
    ),
    # Learning tests that repeated what a kept test shows (named), at their budgets and
    # settings; the trials behind each budget: benchmarks/RESULTS.md, "elemental emitters".
    # IMPALA with its actors in step (the test keeps 4 updates of lag); DDPG (TD3's and
    # SAC's Pendulum tests stay); discrete SAC (SAC's Pendulum test and its loss against
    # NumPy stay).
    Row("impala", "CartPole-v1", 200_000, settings=dict(policy_lag=0)),
    # Rainbow (dqn.rainbow: C51, noisy nets, prioritized, dueling, double, 3-step) at the
    # 70k steps of its former test, where trials ended >= 475 in 7 of 8 seeds of key 42.
    Row("dqn", "CartPole-v1", 70_000, settings=dict(RAINBOW)),
    # QR-DQN and IQN at the settings of their former tests (tests/test_quantile_heads.py
    # says them: DQN's defaults with a quantile head, 64 x 64 units, the learning rate
    # annealed; IQN's head cut to 8 fractions per pass and 32 cosines for a 2-core CPU);
    # IQN at 120k, as rows are told apart by algorithm, env and budget. Both tests (>= 475
    # in 2 of the first 3 seeds of key 42) left the suite for its time budget.
    Row(
        "dqn",
        "CartPole-v1",
        100_000,
        settings=dict(head=Quantile(num_quantiles=32), hidden_sizes=(64, 64), learning_rate=5e-3, anneal_lr=True),
    ),
    Row(
        "dqn",
        "CartPole-v1",
        120_000,
        settings=dict(
            head=ImplicitQuantile(num_online=8, num_target=8, num_acting=8, embedding_dim=32),
            hidden_sizes=(64, 64),
            learning_rate=6e-3,
            anneal_lr=True,
        ),
    ),
    Row("ddpg", "Pendulum-v1", 10_000),
    Row("sac", "CartPole-v1", 30_000, settings=dict(discrete=True)),
    # Recurrent SAC (its window and burn-in oracles and R2D2's memory chain stay): a 32-unit
    # GRU in the actor and critics, windows of 10 steps (2 of burn-in) every 5.
    Row(
        "sac",
        "MaskedPendulum-v1",
        12_000,
        settings=dict(memory="gru", memory_size=32, windows=Windows(10, 2, 5), batch_size=32),
    ),
    # IPPO and MAPPO at the preset, 16 envs x 128 steps (MAPPO's former test: random play
    # + 3 in 3 of 4 seeds of key 0).
    Row("ippo", "jaxmarl:MPE_simple_spread_v3", 300_000),
    Row("mappo", "jaxmarl:MPE_simple_spread_v3", 300_000),
    # PPO-ES at its preset's budget (96 generations; training and fitness episodes), its
    # former test: >= 475 in 3 of 4 seeds of key 0.
    Row("ppo_es", "CartPole-v1", 772_608),
)


def row_name(row: Row) -> str:
    return f"{row.algorithm} {row.env_id}"


# ============================================================================ child


def parse_overrides(text: str | None) -> dict:
    """``"name=value name=value"`` (values as Python literals, else strings) as a dict."""
    overrides = {}
    for item in (text or "").split():
        name, _, value = item.partition("=")
        try:
            overrides[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[name] = value
    return overrides


def config_for(row: Row, overrides: dict | None = None):
    """The row's Config: the algorithm's preset for the env at the row's budget, with the
    table's evaluations, no progress reports, and ``overrides`` (a part's fields by their
    dotted path: ``exploration.end=0.07``)."""
    from jaxrl.config import replace_paths

    module = importlib.import_module(f"jaxrl.algorithms.{row.algorithm}")
    fields = {name: value for name, value in (overrides or {}).items() if "." not in name}
    in_parts = {name: value for name, value in (overrides or {}).items() if "." in name}
    config = module.preset(
        row.env_id,
        **{**row.settings, **fields, "total_timesteps": row.budget},
        num_evals=EVALS,
        eval_episodes=EVAL_EPISODES,
        num_reports=0,
    )
    return module, replace_paths(config, in_parts)


def measure_row(jax, row: Row, seeds: int, seed: int, overrides: dict | None = None) -> dict:
    import numpy as np
    from _harness import phase

    module, config = config_for(row, overrides)
    keys = jax.random.split(jax.random.key(seed), seeds)
    phase("compiling")
    start = time.perf_counter()
    train = jax.jit(jax.vmap(module.train, in_axes=(0, None))).lower(keys, config).compile()
    compile_s = time.perf_counter() - start
    phase("training")
    start = time.perf_counter()
    out = jax.block_until_ready(train(keys, config))
    run_s = time.perf_counter() - start
    evals = np.asarray(jax.device_get(out.metrics["eval_return"]))  # [seeds, iterations]
    steps = np.asarray(jax.device_get(out.metrics["timesteps"]))
    points = ~np.isnan(evals[0])
    # The behaviour policy's returns over the last tenth of the run (PPO's sampled actions,
    # as gymnax-blines evaluates; DQN's epsilon-greedy ones), beside the greedy evaluations.
    episodes = np.asarray(jax.device_get(out.metrics["episode_return"]))
    last = episodes[:, -max(1, episodes.shape[1] // 10) :]
    return dict(
        compile_s=compile_s,
        run_s=run_s,
        eval_returns=evals[:, points].tolist(),
        eval_steps=steps[0, points].tolist(),
        final_training_returns=[float(np.nanmean(seed)) if np.isfinite(seed).any() else None for seed in last],
        settings={f.name: repr(getattr(config, f.name)) for f in dataclasses.fields(config)},
    )


# ============================================================================ statistics


def iqm(values) -> float:
    """The interquartile mean (Agarwal et al., 2021): the mean after trimming a quarter of
    the values, rounded down, off each end (``scipy.stats.trim_mean``, as rliable does)."""
    import numpy as np
    from scipy import stats

    return float(stats.trim_mean(np.asarray(values, float), 0.25))


def bootstrap_ci(values, rng, resamples: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the IQM over seeds."""
    import numpy as np
    from scipy import stats

    values = np.asarray(values, float)
    samples = values[rng.integers(0, len(values), (resamples, len(values)))]
    means = stats.trim_mean(samples, 0.25, axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarise(result: dict, row: Row, rng) -> dict:
    """IQM, interval, seeds at the reference and steps to it, from a child's result."""
    import numpy as np

    reference = reference_for(row).value
    evals = np.asarray(result["eval_returns"])  # [seeds, points]
    final = evals[:, -1]
    reached_at = [
        result["eval_steps"][int(np.argmax(seed >= reference))] for seed in evals if (seed >= reference).any()
    ]
    zoo = ZOO.get((row.algorithm, row.env_id))
    return dict(
        iqm=iqm(final),
        ci=bootstrap_ci(final, rng),
        reached=int(np.sum(final >= reference)),
        steps_to_reference=float(np.median(reached_at)) if reached_at else None,
        reached_zoo=None if zoo is None else int(np.sum(final >= zoo.value)),
    )


# ============================================================================ parent


def load_results(path: str) -> list[dict]:
    """The raw results a ``--markdown`` file of this script holds (after "Raw results:")."""
    import json

    text = open(path).read()
    block = text[text.index("Raw results:") :]
    return json.loads(block[block.index("```json") + len("```json") : block.rindex("```")])


def table_rows(rows, results, rng) -> list[list[str]]:
    """One table row per ``(row, result)``, each result's seeds counted from the result."""
    table = []
    for row, result in zip(rows, results, strict=True):
        ref = reference_for(row)
        reference = f"{ref.value:g} at {ref.budget:,} ({ref.source})"
        zoo = ZOO.get((row.algorithm, row.env_id))
        zoo_reference = "-" if zoo is None else f"{zoo.value:g} at {zoo.budget:,}"
        head = [row.algorithm, row.env_id, f"{row.budget:,}"]
        if "error" in result:
            table.append(head + [result["error"][:80], "-", "-", reference, zoo_reference, "-", "-"])
            continue
        s = summarise(result, row, rng)
        result["summary"] = s
        seeds = result["seeds"]
        table.append(
            head
            + [
                f"{s['iqm']:.1f} [{s['ci'][0]:.1f}, {s['ci'][1]:.1f}]",
                f"{s['reached']}/{seeds}",
                fmt(s["steps_to_reference"], ",.0f"),
                reference,
                zoo_reference,
                "-" if s["reached_zoo"] is None else f"{s['reached_zoo']}/{seeds}",
                f"{result['compile_s'] + result['run_s']:.0f}",
            ]
        )
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("algos", nargs="*", help="algorithms to run (default: all)")
    parser.add_argument("--envs", nargs="*", help="env ids to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="only the rows marked quick")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per row (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="base PRNG seed (default: %(default)s)")
    parser.add_argument("--set", metavar='"NAME=VALUE ..."', help="change these preset fields in every selected row")
    parser.add_argument(
        "--budget",
        type=int,
        help="env steps per seed for every selected row, in place of the row's (the reference then at that "
        "budget where its source logged a curve)",
    )
    parser.add_argument(
        "--render",
        nargs="+",
        metavar="MD",
        help="measure nothing: tabulate the raw results of earlier --markdown files",
    )
    add_common_arguments(parser, ("ALGO", "ENV", "BUDGET", "SEEDS", "SEED"), runs=False, timeout=6 * 3600)
    args = parser.parse_args(argv)
    if args.one:
        algorithm, env_id, budget, seeds, seed = args.one
        key = (algorithm, env_id, int(budget))
        row = next((r for r in ROWS if (r.algorithm, r.env_id, r.budget) == key), Row(*key))
        row = dataclasses.replace(row, budget=args.budget or row.budget)
        result = dict(algorithm=algorithm, env_id=env_id, budget=row.budget, seeds=int(seeds))
        overrides = parse_overrides(args.set)
        measure_and_emit(result, lambda jax: measure_row(jax, row, int(seeds), int(seed), overrides))
        return 0

    def selected(row: Row) -> bool:
        return (
            (not args.quick or row.quick)
            and (not args.algos or row.algorithm in args.algos)
            and (not args.envs or row.env_id in args.envs)
        )

    if args.render:
        loaded = {}  # a row measured in several files: the last file's result
        for path in args.render:
            for result in load_results(path):
                loaded[result["algorithm"], result["env_id"], int(result["budget"])] = result
        current = {(r.algorithm, r.env_id, r.budget): r for r in ROWS}  # results of rows the table still has
        at_budget = {(r.algorithm, r.env_id): r for r in ROWS if not r.settings}  # and of --budget runs of them
        for key in loaded:
            if key not in current and key[:2] in at_budget:
                current[key] = dataclasses.replace(at_budget[key[:2]], budget=key[2])
        pairs = [(current[key], result) for key, result in loaded.items() if key in current]
        pairs = [(row, result) for row, result in pairs if selected(row)]

        def table_order(pair) -> int:
            row = pair[0]
            return ROWS.index(row if row in ROWS else at_budget[row.algorithm, row.env_id])

        pairs.sort(key=table_order)
        rows, results = [row for row, _ in pairs], [result for _, result in pairs]
    else:
        planned = [row for row in ROWS if selected(row)]

        def measure(row):  # the child finds the row by its table budget and runs it at --budget
            key = dict(algorithm=row.algorithm, env_id=row.env_id, budget=row.budget, seeds=args.seeds, seed=args.seed)
            return measure_in_child(__file__, key, args, options=("set", "budget"))

        results = measure_plan(planned, measure, row_name) if planned else []
        rows = [dataclasses.replace(row, budget=args.budget or row.budget) for row in planned]
    if not rows:
        parser.error("no row matches")

    import numpy as np

    headers = ["algorithm", "env", "budget", "final return: IQM [95% CI]", "reached", "steps to ref", "reference",
               "zoo", "reached zoo", "wall s"]  # fmt: skip
    table = table_rows(rows, results, np.random.default_rng(0))
    notes = [
        f"{EVAL_EPISODES}-episode deterministic evaluations at {EVALS} points of each run, a row's seeds "
        "vmapped in one program; the final return is the last evaluation.",
        "Settings: each algorithm's preset(env_id) with the row's settings and budget (printed in the raw results)"
        + (f", and {args.set}." if args.set else "."),
    ]
    if args.render:
        notes.append("Tabulated from the raw results of: " + ", ".join(args.render))
    report(
        f"Learning table ({'--quick rows' if args.quick else 'selected rows'})",
        headers,
        table,
        notes,
        results,
        args.markdown,
        left=(0, 1, 6, 7),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
