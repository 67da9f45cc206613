"""PPO-ES (jaxrl.algorithms.ppo_es): the ES step (mirrored perturbation, scoring and
elitist selection) against NumPy, the record under jit and vmap over seeds and a swept
hyper-parameter in one compile, the runner and the command line, and clear errors.
Learning CartPole at the preset is a row of benchmarks/learning_table.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxrl.algorithms import get, ppo, ppo_es
from jaxrl.config import replace_paths, sweep_axes
from jaxrl.workflow import cli, runner
from jaxrl.workflow.options import RunOptions

# Two mirrored pairs on 8-step episodes, a tiny inner PPO: 3 generations.
TINY_PPO = ppo.Config(num_envs=2, num_steps=8, num_minibatches=1, num_epochs=2, hidden_sizes=(8,))
SMALL = ppo_es.Config(
    ppo=TINY_PPO,
    env_kwargs={"max_steps_in_episode": 8},
    population_size=4,
    ppo_iterations=2,
    fitness_episodes=2,
    total_timesteps=3 * (4 * 2 * 16 + 5 * 2 * 8),
    num_evals=1,
    eval_episodes=2,
    num_reports=0,
)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_config_sets_the_inner_ppo_from_its_own_fields():
    assert get("ppo_es") is ppo_es.algorithm
    assert SMALL.num_iterations == 3
    inner = SMALL.ppo
    assert inner.env_kwargs == (("max_steps_in_episode", 8),) and inner.eval_episodes == 2
    assert inner.total_timesteps == 3 * 2 * 16  # one lineage: generations x PPO iterations x 2 envs x 8 steps
    # A part's field by its dotted path, as --set, sweeps and PBT name it.
    assert replace_paths(SMALL, {"ppo.learning_rate": 1e-3}).ppo.learning_rate == 1e-3


# ----------------------------------------------------------------------------- the ES step


def test_perturb_makes_mirrored_members_around_the_centre():
    """Member i < P/2 is centre + sigma * eps_i, member P/2 + i is centre - sigma * eps_i;
    every other leaf (optimiser, observation statistics, envs) is the centre's."""
    config = SMALL.replace(sigma=0.1)
    centre = ppo_es.init(jax.random.key(0), config)
    members, noise = ppo_es.perturb(centre, jax.random.key(1), config)
    flat = np.asarray(ravel_pytree(centre.params["network"])[0], np.float64)
    eps = np.asarray(noise, np.float64)
    expected = np.concatenate([flat + 0.1 * eps, flat - 0.1 * eps])
    got = np.stack(
        [np.asarray(ravel_pytree(jax.tree.map(lambda x: x[i], members.params["network"]))[0]) for i in range(4)]
    )
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    others = members.replace(params={**members.params, "network": ()})
    for member_leaf, centre_leaf in zip(
        leaves(others), leaves(centre.replace(params={**centre.params, "network": ()}))
    ):
        for i in range(4):
            np.testing.assert_array_equal(member_leaf[i], centre_leaf)


@pytest.mark.parametrize(
    "fitness",
    [[3.0, 1.0, 7.0, 2.0, 7.0], [5.0, 5.0, 1.0, 2.0, 0.0], [0.0, 1.0, 2.0, 3.0, 4.0]],
)
def test_update_keeps_the_fittest_candidate_against_numpy(fitness):
    """The new centre is the candidate (centre first, then the members) with the highest
    fitness, the first of tied ones; timesteps add the training and fitness steps."""
    config = SMALL
    centre = ppo_es.init(jax.random.key(0), config)
    centre = centre.replace(timesteps=jnp.asarray(100, jnp.int32))
    candidates = jax.tree.map(
        lambda x: jnp.stack([x + i if jnp.issubdtype(x.dtype, jnp.floating) else x for i in range(5)]), centre
    )
    generation = ppo_es.Generation(candidates, jnp.asarray(fitness, jnp.float32), jnp.asarray(37, jnp.int32))
    state, metrics = jax.jit(ppo_es.update, static_argnums=3)(centre, generation, jax.random.key(2), config)
    best = 0  # a NumPy loop: first strict maximum
    for i, value in enumerate(fitness):
        if value > fitness[best]:
            best = i
    assert int(metrics["best"]) == best and bool(metrics["centre_kept"]) == (best == 0)
    expected = jax.tree.map(lambda x: np.asarray(x)[best], candidates)
    for ours, theirs in zip(leaves(state.params), leaves(expected.params)):
        np.testing.assert_array_equal(ours, theirs)
    assert int(state.timesteps) == 100 + config.training_steps + 37


@pytest.mark.slow
def test_score_is_each_candidates_deterministic_evaluation():
    config = SMALL
    # Each piece compiled as one program: op by op, their many small operations each compile.
    centre = jax.jit(ppo_es.init, static_argnums=1)(jax.random.key(0), config)
    members, _ = jax.jit(ppo_es.perturb, static_argnums=2)(centre, jax.random.key(1), config.replace(sigma=1.0))
    fitness, steps = jax.jit(ppo_es.score, static_argnums=2)(members, jax.random.key(3), config)
    evaluate = jax.jit(ppo.evaluate, static_argnums=2)
    lengths = 0
    for i in range(config.population_size):
        member = jax.tree.map(lambda x: x[i], members.params)
        result = evaluate(member, jax.random.key(3), config.ppo)
        np.testing.assert_allclose(fitness[i], np.mean(np.asarray(result.returns)), rtol=1e-6)
        lengths += int(np.sum(np.asarray(result.lengths)))
    assert int(steps) == lengths


# ----------------------------------------------------------------------------- the record


@pytest.mark.slow
def test_jit_vmap_over_seeds_and_a_swept_hyperparameter_compile_once():
    """One compile serves seeds x sigma x the inner PPO's learning rate; each lane equals
    the plain jitted run with that key and setting, which is deterministic."""
    single = jax.jit(ppo_es.train)
    out = single(jax.random.key(0), SMALL)
    metrics = out.metrics
    for name in ("timesteps", "episode_return", "fitness_max", "fitness_centre", "best", "policy_loss"):
        assert metrics[name].shape == (SMALL.num_iterations,), name
    timesteps = np.asarray(metrics["timesteps"])
    assert np.all(np.diff(timesteps) >= SMALL.training_steps) and timesteps[-1] <= SMALL.total_timesteps
    assert np.sum(~np.isnan(np.asarray(metrics["eval_return"]))) == 1
    for x, y in zip(leaves(out), leaves(single(jax.random.key(0), SMALL))):
        np.testing.assert_array_equal(x, y)
    action, carry = ppo_es.act(
        out.state.params, jnp.zeros((3, 4)), ppo_es.initial_carry(SMALL, 3), jax.random.key(1), SMALL, True
    )
    assert action.shape == (3,) and carry == ()

    configs = replace_paths(SMALL, {"sigma": jnp.array([0.0, 0.05]), "ppo.learning_rate": jnp.array([1e-3, 3e-4])})
    sweep = jax.jit(jax.vmap(jax.vmap(ppo_es.train, in_axes=(0, None)), in_axes=(None, sweep_axes(configs))))
    keys = jax.random.split(jax.random.key(1), 2)
    outs = sweep(keys, configs)
    sweep(keys, replace_paths(configs, {"ppo.clip_eps": 0.1}))  # new values, the same program
    assert sweep._cache_size() == 1
    lane = single(keys[1], SMALL.replace(sigma=0.05, ppo=SMALL.ppo.replace(learning_rate=3e-4)))
    for x, y in zip(leaves(lane.metrics), leaves(jax.tree.map(lambda x: x[1, 1], outs.metrics))):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)


# The inner PPO's options carry over: a GRU policy on Pendulum's continuous actions.
COMMAND = ["train", "ppo_es", "--env", "Pendulum-v1", "--env-param", "max_steps_in_episode=8"]
COMMAND += ["--total-timesteps", "1048", "--set", "ppo_iterations=1", "--set", "fitness_episodes=1"]
for setting in ("num_envs=2", "num_steps=8", "num_minibatches=2", "hidden_sizes=8", "memory=gru", "memory_size=4"):
    COMMAND += ["--set", f"ppo.{setting}"]


@pytest.mark.slow
def test_command_line_and_runner(tmp_path, capsys):
    """The command line, then the runner by name on the same config (which reuses the
    compiled program); the members keep the GRU's memory in the PPO state, and act
    takes it from initial_carry."""
    assert cli.main([*COMMAND, "--no-progress", "--no-cache"]) in (0, None)
    assert "ppo_es on Pendulum-v1" in capsys.readouterr().out
    config = cli.make_config(ppo_es.algorithm, cli.build_parser().parse_args(COMMAND))
    assert config.ppo.memory == "gru" and config.num_iterations == 1048 // (2 * 16 + 3 * 8)
    result = runner.run("ppo_es", config, options=RunOptions(tmp_path / "run"))
    assert result.completed == config.num_iterations and (tmp_path / "run" / "metrics.csv").exists()
    params = jax.tree.map(lambda x: x[0], result.state.params)
    action, carry = ppo_es.act(params, jnp.zeros((5, 3)), ppo_es.initial_carry(config, 5), jax.random.key(1), config)
    assert action.shape == (5, 1) and jax.tree.leaves(carry)[0].shape == (5, 4)


@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"population_size": 3}, ValueError, "population_size must be even"),
        ({"population_size": 0}, ValueError, "population_size must be an integer >= 2"),
        ({"ppo_iterations": 0}, ValueError, "ppo_iterations must be an integer >= 1"),
        ({"fitness_episodes": 0}, ValueError, "fitness_episodes must be an integer >= 1"),
        ({"total_timesteps": 10}, ValueError, "total_timesteps must be an integer >= 208"),
        ({"ppo": {"learning_rate": 1e-3}}, TypeError, "ppo must be a jaxrl.algorithms.ppo.Config"),
        ({"env_id": "gymnasium:CartPole-v1"}, ValueError, "host-stepped env"),
    ],
)
def test_bad_config_is_an_error_naming_the_field(overrides, error, message):
    with pytest.raises(error, match=message):
        SMALL.replace(**overrides)


def test_bad_traced_values_are_value_errors():
    with pytest.raises(ValueError, match="sigma must lie in"):
        ppo_es.init(jax.random.key(0), SMALL.replace(sigma=-0.1))
    with pytest.raises(ValueError, match="learning_rate must lie in"):
        ppo_es.init(jax.random.key(0), replace_paths(SMALL, {"ppo.learning_rate": 0.0}))
