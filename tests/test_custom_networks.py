"""A user's own torso in every algorithm (``Config.network``): built where each
algorithm's torso goes with its heads after it, the same training as the built-in network
when it is the same module, one compile for seeds and a traced learning rate, saved in
``run.json``, trained and resumed bit for bit from the command line (``--network
module:factory``), reloaded for ``evaluate``, and a clear error for a bad one. Learning
with users' torsos (PPO, SAC, DQN) is notebooks/custom_networks.ipynb, which
tests/test_notebooks.py runs."""

from __future__ import annotations

import json
import shutil

import custom_torsos
import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import algorithms, data, envs, loop, networks
from jaxrl.algorithms import dqn, es, iql, ppo, r2d2, sac, td3
from jaxrl.config import fields_to_json
from jaxrl.networks import Actor, ActorCritic, ContinuousQ, Whole
from jaxrl.workflow import cli, saved, sweep
from jaxrl.workflow.saved import config_from_fields


def _module_paths(params, name: str) -> list[tuple]:
    """Paths of the parameters under a module whose name contains ``name``."""
    return [path for path in flax.traverse_util.flatten_dict(params) if any(name in str(part) for part in path)]


# ----------------------------------------------------------------------------- every algorithm


def abstract_dataset(config, size: int = 256) -> data.Dataset:
    """A dataset's shapes and dtypes for the config's env (``size`` transitions)."""
    spec = envs.config_spec(config)
    leaf = lambda shape, dtype: jax.ShapeDtypeStruct((size, *shape), dtype)  # noqa: E731
    obs = jax.tree.map(lambda x: leaf(x.shape, x.dtype), spec.observation)
    action = leaf(spec.action_shape, jnp.int32 if spec.discrete else jnp.float32)
    scalars = dict(reward=jnp.float32, terminated=bool, truncated=bool, episode_return=jnp.float32)
    return data.Dataset(
        obs=obs,
        action=action,
        next_obs=obs,
        episode_length=leaf((), jnp.int32),
        env_id=config.env_id,
        **{name: leaf((), dtype) for name, dtype in scalars.items()},
    )


@pytest.mark.parametrize("name", algorithms.names())
def test_every_algorithm_builds_its_heads_on_the_users_torso(name):
    """``init`` puts the user's torso (a factory's, sized by the env's spec: the board of
    a pgx game, agents' dict observations, ...) where the algorithm's torso goes, and no
    built-in torso beside it; an algorithm that learns from a dataset gets one (its shapes)."""
    record = algorithms.get(name)
    if name == "ppo_es":  # the inner PPO's network
        config = record.Config(ppo=ppo.Config(network=custom_torsos.flat_residual))
    else:
        config = record.Config(network=custom_torsos.flat_residual)
    inputs = (abstract_dataset(config),) if record.program(config).inputs is not loop.no_inputs else ()
    params = jax.eval_shape(lambda key, *inputs: record.init(key, config, *inputs), jax.random.key(0), *inputs).params
    assert _module_paths(params, "Residual"), f"{name}: {jax.tree.map(jnp.shape, params)}"
    assert not _module_paths(params, "MLP_"), name


@pytest.mark.slow
def test_each_network_has_its_own_copy():
    """PPO's actor and critic, SAC's actor and twin critics each hold their own weights;
    the critics read the torso's features beside the action."""
    init = jax.jit(ppo.init, static_argnames="config")  # one program, not the init's ops one by one
    params = init(jax.random.key(0), ppo.Config(network=custom_torsos.Residual(width=8))).params["network"]
    actor, critic = params["params"]["actor_torso"], params["params"]["critic_torso"]
    assert jax.tree.map(jnp.shape, actor) == jax.tree.map(jnp.shape, critic)
    assert not np.array_equal(actor["Dense_0"]["kernel"], critic["Dense_0"]["kernel"])
    config = sac.Config(env_id="Pendulum-v1", network=custom_torsos.Residual(width=8))
    state = jax.eval_shape(lambda key: sac.init(key, config), jax.random.key(0))  # shapes only
    critic = flax.traverse_util.flatten_dict(state.critic_params)
    encoder = [path for path in critic if "encoder" in path and path[-1] == "kernel" and "Dense_0" in path]
    assert encoder and critic[encoder[0]].shape[0] == 2  # twin critics, an encoder each


# ----------------------------------------------------------------------------- the same program


PPO_SMALL = dict(env_id="CartPole-v1", hidden_sizes=(16, 16), num_envs=4, num_steps=16, total_timesteps=256)
OFF_POLICY_SMALL = dict(hidden_sizes=(16, 16), learning_starts=64, buffer_size=256, total_timesteps=256)


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, built_in, config",
    [
        (ppo, networks.MLP((16, 16), "tanh"), PPO_SMALL),
        (dqn, networks.MLP((16, 16), "relu"), dict(env_id="CartPole-v1", **OFF_POLICY_SMALL)),
        (ppo, Whole(ActorCritic(2, True, hidden_sizes=(16, 16))), PPO_SMALL),
        (
            sac,
            Whole(Actor(1, "gaussian", hidden_sizes=(16, 16)), critic=ContinuousQ((16, 16))),
            dict(env_id="Pendulum-v1", **OFF_POLICY_SMALL),
        ),
    ],
    ids=["ppo-torso", "dqn-torso", "ppo-whole", "sac-whole"],
)
def test_the_built_in_network_given_as_a_users_trains_identically(module, built_in, config):
    """The built-in MLP passed as a user's torso, or the built-in networks passed as a
    whole network (``Whole``), build the same parameters in the same places, so training
    is bit for bit the built-in network's (acting included: collection acts with it)."""
    base = module.Config(num_evals=0, num_reports=0, **config)  # no evaluation branch to compile
    ours = jax.jit(module.train)(jax.random.key(3), base.replace(network=built_in))
    theirs = jax.jit(module.train)(jax.random.key(3), base)
    assert jax.tree.structure(ours.state.params) == jax.tree.structure(theirs.state.params)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_seeds_and_a_traced_learning_rate_compile_once():
    """SAC with a user's torso, vmapped over 2 seeds, for 2 learning rates as traced
    values: one compile; the learning rate reaches the update."""
    config = sac.Config(
        env_id="Pendulum-v1",
        network=custom_torsos.Residual(width=16),
        hidden_sizes=(16,),
        num_envs=2,
        total_timesteps=96,
        learning_starts=32,
        batch_size=16,
        num_evals=0,
        num_reports=0,
    )
    train = jax.jit(jax.vmap(sac.train, in_axes=(0, None)))
    keys = jax.random.split(jax.random.key(0), 2)
    outs = [train(keys, config.replace(learning_rate=jnp.asarray(lr))) for lr in (1e-3, 3e-3)]
    assert train._cache_size() == 1
    first, second = (jax.tree.leaves(out.state.params) for out in outs)
    assert all(np.all(np.isfinite(leaf)) for leaf in first + second)
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, config",
    [
        (dqn, dict(env_id="CartPole-v1", network=Whole(custom_torsos.QNet()), dueling=False)),
        (
            sac,
            dict(env_id="CartPole-v1", discrete=True, network=Whole(custom_torsos.QNet(), critic=custom_torsos.QNet())),
        ),
    ],
    ids=["dqn", "discrete-sac"],
)
def test_a_whole_network_trains(module, config):
    """DQN's ``net(obs) -> q`` and discrete SAC's ``actor(obs) -> logits`` and ``critic(obs)
    -> q`` (two copies) train: finite parameters that moved."""
    config = module.Config(**OFF_POLICY_SMALL, num_evals=0, num_reports=0, **config)
    init_key, _ = jax.random.split(jax.random.key(0))  # the key train() initialises from
    before = jax.jit(module.init, static_argnames="config")(init_key, config)
    after = jax.jit(module.train)(jax.random.key(0), config).state
    assert _module_paths(after.params, "Residual")
    moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before.params), jax.tree.leaves(after.params))]
    assert any(moved) and all(np.all(np.isfinite(leaf)) for leaf in jax.tree.leaves(after.params))


def test_a_whole_network_across_agents():
    """IQL's agents are a batch axis of the whole Q-network's observations."""
    config = iql.Config(network=Whole(custom_torsos.flat_q_net), dueling=False)
    params = jax.eval_shape(lambda key: iql.init(key, config), jax.random.key(0)).params
    assert _module_paths(params, "Residual")


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "network, message",
    [
        (custom_torsos.Flattening(), r"network: a torso returns features \[\.\.\., F\].* \(expected \[2, 3, F\]\)"),
        (custom_torsos.PixelsOnly(), r"network: PixelsOnly cannot take the env's observation float32\[2, 3, 4\]"),
        (custom_torsos.ListWidths([8]), "network: .* is not hashable"),
        ("custom_torsos:missing", "network: cannot import 'custom_torsos:missing'"),
        (lambda spec: "mlp", "network: the factory .* must return a flax linen module"),
        (custom_torsos.Residual.__init__, "network: the factory .* raised"),
        (3, "network must be one of .* a flax linen module"),
    ],
    ids=["output-shape", "observation", "unhashable", "import", "factory-result", "factory-raises", "type"],
)
def test_a_bad_network_is_a_clear_error(network, message):
    with pytest.raises(ValueError, match=message):
        ppo.Config(env_id="CartPole-v1", network=network)


def _td3_gaussian_actor():
    config = td3.Config(network=Whole(custom_torsos.GaussianActor(), critic=custom_torsos.Critic()))
    return td3.init(jax.random.key(0), config)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: ppo.Config(network=Whole(custom_torsos.QNet())),
            r"network\(obs, carry=\(\), reset=None, critic_obs=None\)",
        ),
        (lambda: ppo.Config(network=Whole(custom_torsos.actor_critic_net), memory="gru"), r"turn off \['memory'\]"),
        (lambda: dqn.Config(network=Whole(custom_torsos.QNet())), r"turn off \['dueling'\]"),
        (lambda: dqn.Config(network=Whole(custom_torsos.QNet(3)), dueling=False), r"network\(obs\) -> q \[\.\.\., 2\]"),
        (lambda: r2d2.Config(network=Whole(custom_torsos.QNet()), dueling=False), r"turn off \['memory'\]"),
        (lambda: es.Config(network=Whole(custom_torsos.QNet())), "es takes a torso, not a whole network"),
        (lambda: sac.Config(network=Whole(custom_torsos.GaussianActor())), "needs the critic too"),
        (
            _td3_gaussian_actor,
            r"actor\(obs\) -> deterministic output \[\.\.\., 1\]; it returned shapes \(\(2, 3, 1\), \(2, 3, 1\)\)",
        ),
    ],
    ids=["ppo-call", "ppo-memory", "dqn-dueling", "dqn-actions", "r2d2", "es", "sac-critic", "td3-actor"],
)
def test_a_bad_whole_network_is_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ----------------------------------------------------------------------------- run.json


@pytest.mark.parametrize(
    "network",
    [
        custom_torsos.Residual(width=8, blocks=2),
        custom_torsos.flat_residual,
        custom_torsos.Residual,
        "custom_torsos:flat_residual",
        Whole(custom_torsos.actor_critic_net),
    ],
    ids=["module", "factory", "class", "reference", "whole"],
)
def test_a_users_network_round_trips_through_run_json(network):
    config = ppo.Config(network=network)
    fields = json.loads(json.dumps(fields_to_json(config)))
    again = config_from_fields(ppo.Config, fields)
    assert again == config and hash(again) == hash(config)


def test_a_network_defined_where_it_cannot_be_imported_names_itself_on_load():
    fields = fields_to_json(ppo.Config(network=lambda spec: custom_torsos.Residual()))
    with pytest.raises(ValueError, match="cannot import '.*<lambda>'"):
        config_from_fields(ppo.Config, json.loads(json.dumps(fields)))


# ----------------------------------------------------------------------------- command line

CHUNKS = 4
COMMAND = [
    "train",
    "ppo",
    "--env",
    "CartPole-v1",
    "--network",
    "custom_torsos:flat_residual",
    "--seeds",
    "2",
    "--total-timesteps",
    str(4 * 16 * 8),
    *("--set", "num_envs=4", "--set", "num_steps=16", "--set", "num_evals=2", "--set", "eval_episodes=2"),
    *("--chunks", str(CHUNKS), "--checkpoint-every", "1", "--no-cache", "--no-progress"),
]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("custom") / "run"
    assert cli.main([*COMMAND, "--logdir", str(logdir)]) == 0
    return logdir


@pytest.mark.slow
def test_the_command_line_trains_resumes_and_evaluates_a_users_network(cli_run, tmp_path):
    """``--network custom_torsos:flat_residual`` trains (run.json names it); a copy that
    lost its last two checkpoints resumes to the same final state, bit for bit; the saved
    run reloads (the network imported from run.json) and evaluates."""
    meta = json.loads((cli_run / "run.json").read_text())
    assert meta["config"]["network"] == "custom_torsos:flat_residual"
    straight = saved.load(cli_run)
    assert straight.step == 8 and _module_paths(straight.state.params, "Residual")

    resumed_dir = tmp_path / "resumed"
    shutil.copytree(cli_run, resumed_dir)
    steps = sorted(int(p.name) for p in (resumed_dir / "checkpoints").iterdir() if p.name.isdigit())
    for step in steps[-2:]:
        shutil.rmtree(resumed_dir / "checkpoints" / str(step))
    assert cli.main([*COMMAND, "--logdir", str(resumed_dir), "--resume"]) == 0
    resumed = saved.load(resumed_dir)
    assert resumed.step == straight.step
    for ours, theirs in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))

    out = tmp_path / "evaluation.json"
    assert cli.main(["evaluate", str(resumed_dir), "--json", str(out), "--no-cache"]) == 0
    result = json.loads(out.read_text())
    assert np.shape(result["returns"]) == (2, 2) and result["mean_return"] == result["run_eval_return"]
    dataset = tmp_path / "recorded.npz"
    assert (
        cli.main(["record", str(resumed_dir), "--steps", "32", "--envs", "2", "--out", str(dataset), "--no-cache"]) == 0
    )
    assert np.load(dataset)["obs"].shape[-1] == 4


@pytest.mark.slow
def test_a_sweep_over_a_users_torso():
    """Two learning rates x two seeds of PPO on a user's torso, lanes of one program."""
    config = ppo.Config(network=custom_torsos.Residual(width=8), **{**PPO_SMALL, "total_timesteps": 128})
    result = sweep.run("ppo", config, sweep.grid(learning_rate=[1e-3, 1e-2]), seeds=2)
    params = jax.tree.leaves(result.state.params)
    assert params[0].shape[:2] == (2, 2) and all(np.all(np.isfinite(leaf)) for leaf in params)
    first, second = ([np.asarray(leaf)[c] for leaf in params] for c in (0, 1))
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))  # the learning rate reached each lane
