"""Structured (dict / tuple, nested) observations in datasets and behaviour cloning:
the env-major layout of a collected dataset checked leaf by leaf in NumPy, bit-exact
.npz round trips, schema errors naming the leaf, the masked policy and its loss, and BC
learning from experts on a dict-observation env with an action mask (discrete) and a
nested tuple-observation env (continuous).

Two registered envs, each collected once (module-scoped fixtures); each BC run is one
compile of three vmapped seeds.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cue_env import EPISODE, NUM_ACTIONS, MaskedCue  # noqa: E402
from flax import struct
from gymnax.environments import environment, spaces

from jaxrl import data, envs
from jaxrl.algorithms import bc

SEEDS = 3


@struct.dataclass
class Params:
    max_steps_in_episode: int = EPISODE


@struct.dataclass
class TargetState:
    target: jax.Array  # float32 [1]: the rewarded action
    time: jax.Array


class NestedTarget(environment.Environment):
    """A nested tuple observation ``(target [1], {"time": int32 (), "noise": [2]})``;
    the reward is ``-(action - target)^2``, the target uniform in [-1, 1] each step.
    Episodes are cut at ``max_steps_in_episode``, or end (terminate) when the target
    comes out above 0.95."""

    @property
    def default_params(self):
        return Params()

    def _obs(self, key, state):
        noise = jax.random.normal(key, (2,))
        return (state.target, {"time": state.time, "noise": noise})

    def _draw(self, key, time):
        target_key, noise_key = jax.random.split(key)
        state = TargetState(target=jax.random.uniform(target_key, (1,), minval=-1.0, maxval=1.0), time=time)
        return self._obs(noise_key, state), state

    def reset_env(self, key, params):
        return self._draw(key, jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        reward = -jnp.sum(jnp.square(action - state.target))
        obs, new_state = self._draw(key, state.time + 1)
        return obs, new_state, reward, new_state.target[0] > 0.95, {}

    def observation_space(self, params=None):
        return spaces.Tuple(
            [
                spaces.Box(-1.0, 1.0, (1,), jnp.float32),
                spaces.Dict(
                    {"time": spaces.Discrete(EPISODE + 1), "noise": spaces.Box(-10.0, 10.0, (2,), jnp.float32)}
                ),
            ]
        )

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


CUE, TARGET = "jaxrl_test/DatasetMaskedCue-v0", "jaxrl_test/DatasetNestedTarget-v0"
NUM_STEPS, NUM_ENVS = 768, 8  # 96 steps (12 episodes) per env


@pytest.fixture(scope="module", autouse=True)
def registered():
    envs.register(CUE, lambda **overrides: (MaskedCue(), Params(**overrides)), replace=True)
    envs.register(TARGET, lambda **overrides: (NestedTarget(), Params(**overrides)), replace=True)
    yield
    for env_id in (CUE, TARGET):
        envs.registry._REGISTRY.pop(env_id, None)


def cue_expert(params, obs, carry, key):
    """Always plays the cue (never a masked action: the cue is always allowed)."""
    return jnp.argmax(obs["cue"], axis=-1).astype(jnp.int32), carry


def target_expert(params, obs, carry, key):
    return obs[0], carry


@pytest.fixture(scope="module")
def cue_dataset():
    return data.collect_dataset(cue_expert, None, CUE, jax.random.key(0), NUM_STEPS, NUM_ENVS)


@pytest.fixture(scope="module")
def target_dataset():
    return data.collect_dataset(target_expert, None, TARGET, jax.random.key(1), NUM_STEPS, NUM_ENVS)


def as_numpy(tree):
    return jax.tree.map(np.asarray, tree)


# ----------------------------------------------------------------------------- layout


@pytest.mark.parametrize("name", ["cue_dataset", "target_dataset"])
def test_collected_layout_chains_every_leaf_within_each_env_block(name, request):
    """Env-major: each env's 96 steps are contiguous. Inside a block, every leaf of the
    next observation is that leaf of the next row's observation unless an episode ended,
    where the next row starts a new episode (time 0 on reset); rows are [S, ...] per leaf
    with the env's shapes and dtypes."""
    dataset = request.getfixturevalue(name)
    env_id = CUE if name == "cue_dataset" else TARGET
    spec = envs.spec(*envs.make(env_id))
    obs, next_obs = as_numpy(dataset.obs), as_numpy(dataset.next_obs)
    assert jax.tree.structure(obs) == jax.tree.structure(spec.observation) == jax.tree.structure(next_obs)
    for leaf, expected in zip(jax.tree.leaves(obs), jax.tree.leaves(spec.observation)):
        assert leaf.shape == (NUM_STEPS,) + expected.shape
    done = np.asarray(dataset.terminated | dataset.truncated)
    # The time each observation shows: the cue's position leaf, the target's "time" leaf.
    time = obs["position"][:, 0] if env_id == CUE else obs[1]["time"]
    next_time = next_obs["position"][:, 0] if env_id == CUE else next_obs[1]["time"]
    steps = NUM_STEPS // NUM_ENVS
    chained = 0
    for block in range(NUM_ENVS):
        assert time[block * steps] == 0  # every env starts from a fresh reset
        for i in range(block * steps, (block + 1) * steps):
            assert next_time[i] == time[i] + 1
            if i + 1 == (block + 1) * steps:
                continue
            if done[i]:
                assert time[i + 1] == 0
                continue
            for leaf, next_leaf in zip(jax.tree.leaves(obs), jax.tree.leaves(next_obs)):
                # To rounding: XLA may compute a float leaf once per output it feeds.
                np.testing.assert_allclose(next_leaf[i], leaf[i + 1], rtol=1e-6, atol=0)
            chained += 1
    assert 0 < done.sum() < NUM_STEPS and chained > NUM_STEPS // 2
    if env_id == CUE:
        assert np.asarray(dataset.truncated).sum() == NUM_STEPS // EPISODE  # the time limit alone ends episodes
        assert np.all(obs["action_mask"][np.arange(NUM_STEPS), np.asarray(dataset.action)])  # the expert obeys
    else:
        assert np.asarray(dataset.terminated).any()  # episodes also end early
        np.testing.assert_array_equal(np.asarray(dataset.action), obs[0])


def test_sample_draws_rows_of_every_leaf_together(cue_dataset):
    batch = jax.jit(data.sample, static_argnums=2)(cue_dataset, jax.random.key(5), 64)
    assert batch.size == 64 and batch.obs["cue"].shape == (64, NUM_ACTIONS)
    obs, sampled = as_numpy(cue_dataset.obs), as_numpy(batch.obs)
    rows = {
        tuple(np.concatenate([leaf[i].ravel().astype(np.float32) for leaf in jax.tree.leaves(obs)]))
        for i in range(NUM_STEPS)
    }
    for i in range(64):
        assert tuple(np.concatenate([leaf[i].ravel().astype(np.float32) for leaf in jax.tree.leaves(sampled)])) in rows


# ----------------------------------------------------------------------------- files


class Pair(NamedTuple):
    a: np.ndarray
    b: np.ndarray


def synthetic(obs_fn, size=12, env_id="", num_envs=1):
    """A dataset with random observations ``obs_fn(rng)`` (leaves [size, ...])."""
    rng = np.random.default_rng(0)
    zeros = np.zeros(size, np.float32)
    return data.Dataset(
        obs=obs_fn(rng, size),
        action=rng.integers(0, NUM_ACTIONS, size).astype(np.int32),
        reward=rng.normal(size=size).astype(np.float32),
        terminated=rng.random(size) < 0.2,
        truncated=np.zeros(size, bool),
        next_obs=obs_fn(rng, size),
        episode_return=zeros,
        episode_length=np.zeros(size, np.int32),
        env_id=env_id,
        num_envs=num_envs,
    )


def dict_obs(rng, size):
    return {
        "image": rng.integers(0, 256, (size, 3, 3, 2)).astype(np.uint8),
        "vector": rng.normal(size=(size, 5)).astype(np.float32),
        "action_mask": rng.random((size, NUM_ACTIONS)) < 0.5,
    }


def tuple_obs(rng, size):
    return (rng.normal(size=(size, 2)).astype(np.float32), rng.integers(0, 9, size).astype(np.int32))


def nested_obs(rng, size):
    # Keys that look like indices or hold quotes must not be confused with tuple indices.
    return {
        "goal": (rng.normal(size=(size, 2)).astype(np.float32), {"0": rng.random((size, 1)) < 0.5}),
        "it's": (rng.normal(size=(size, 4)).astype(np.float32),),
        "x[1]": rng.integers(-5, 5, (size, 2, 2)).astype(np.int8),
    }


def assert_same(loaded, original):
    for field in data.FIELDS:
        a, b = getattr(loaded, field), getattr(original, field)
        assert jax.tree.structure(a) == jax.tree.structure(b), field
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert np.asarray(x).dtype == np.asarray(y).dtype, field
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert (loaded.env_id, loaded.num_envs) == (original.env_id, original.num_envs)


@pytest.mark.parametrize("obs_fn", [dict_obs, tuple_obs, nested_obs], ids=["dict", "tuple", "nested"])
def test_round_trip_without_an_env_is_bit_exact(obs_fn, tmp_path):
    dataset = synthetic(obs_fn, num_envs=3)
    path = tmp_path / "data.npz"
    data.save_dataset(path, dataset)
    assert_same(data.load_dataset(path), dataset)
    with np.load(path) as file:
        stored = set(file.files) - {"_format_version", "_env_id", "_num_envs"}
    assert stored == set(data.leaf_names("obs", dataset.obs)) | set(data.leaf_names("next_obs", dataset.next_obs)) | {
        "action",
        "reward",
        "terminated",
        "truncated",
        "episode_return",
        "episode_length",
    }


def test_leaf_names_are_key_paths():
    assert list(data.leaf_names("obs", nested_obs(np.random.default_rng(0), 2))) == [
        "obs['goal'][0]",
        "obs['goal'][1]['0']",
        'obs["it\'s"][0]',
        "obs['x[1]']",
    ]
    assert list(data.leaf_names("next_obs", np.zeros((2, 3)))) == ["next_obs"]


def test_a_collected_dataset_round_trips_and_checks_against_its_env(cue_dataset, tmp_path):
    path = tmp_path / "cue.npz"
    data.save_dataset(path, cue_dataset)
    assert_same(data.load_dataset(path, env_id=CUE), cue_dataset)
    with pytest.raises(ValueError, match="env_id is"):
        data.load_dataset(path, env_id=TARGET)


# ----------------------------------------------------------------------------- errors


def with_leaf(dataset, key, value, fields=("obs", "next_obs")):
    """``dataset`` (dict observations) with leaf ``key`` of ``fields`` set to ``value``
    (None: removed)."""
    changed = {}
    for field in fields:
        tree = {**getattr(dataset, field), key: value}
        changed[field] = {k: v for k, v in tree.items() if v is not None}
    return dataset.replace(**changed)


S = NUM_STEPS


@pytest.mark.parametrize(
    "key, value, fields, env_id, message",
    [
        (
            "cue",
            np.zeros((S, 3), np.float32),
            ("obs", "next_obs"),
            CUE,
            r"field \"obs\['cue'\]\" has observations of shape \(3,\), expected \(4,\)",
        ),
        (
            "cue",
            np.zeros((S - 1, 4), np.float32),
            ("obs",),
            None,
            r"field \"obs\['cue'\]\" must be \[768, \.\.\.\] like \"obs\['action_mask'\]\"",
        ),
        (
            "position",
            np.zeros((S, 3), np.float32),
            ("next_obs",),
            None,
            r"field \"next_obs\['position'\]\" must have the shape of obs\['position'\]",
        ),
        (
            "position",
            np.zeros((S, 2), np.int32),
            ("next_obs",),
            None,
            r"field \"next_obs\['position'\]\" must have the dtype of obs\['position'\]",
        ),
        (
            "action_mask",
            np.ones((S, 4), np.float32),
            ("obs", "next_obs"),
            CUE,
            r"field \"obs\['action_mask'\]\" must be bool",
        ),
        (
            "position",
            None,
            ("obs",),
            None,
            r"field 'next_obs' must have the leaves of obs \(obs\['action_mask'\], obs\['cue'\]\)",
        ),
        (
            "cue",
            None,
            ("obs", "next_obs"),
            CUE,
            r"field 'obs' has the leaves obs\['action_mask'\], obs\['position'\], expected",
        ),
    ],
)
def test_errors_name_the_leaf(cue_dataset, key, value, fields, env_id, message):
    dataset = with_leaf(as_numpy(cue_dataset), key, value, fields)
    spec = None if env_id is None else envs.spec(*envs.make(env_id))
    with pytest.raises(ValueError, match=message):
        data.check_dataset(dataset, spec, env_id or "the env")


def test_an_array_dataset_is_refused_by_a_dict_env(cue_dataset):
    flat = np.zeros((S, 4), np.float32)
    with pytest.raises(
        ValueError, match=r"field 'obs' has the leaves obs, expected obs\['action_mask'\], obs\['cue'\]"
    ):
        data.check_env_dataset(as_numpy(cue_dataset).replace(obs=flat, next_obs=flat), CUE)


def test_containers_other_than_dicts_and_tuples_are_refused():
    dataset = synthetic(lambda rng, size: Pair(np.zeros((size, 2)), np.zeros((size, 1))))
    with pytest.raises(ValueError, match="dataset field 'obs' must be an array or a dict"):
        data.check_dataset(dataset)
    with pytest.raises(ValueError, match="dataset field 'obs' must be an array or a dict"):
        data.check_dataset(synthetic(lambda rng, size: {1: np.zeros((size, 2))}))


@pytest.mark.parametrize(
    "names, message",
    [
        (["obs[0]", "obs['a']"], r"dataset field 'obs': the leaves obs\[0\], obs\['a'\] form no array, dict or tuple"),
        (["obs[0]", "obs[2]"], r"the leaves obs\[0\], obs\[2\] form no"),
        (["obs", "obs[0]"], r"the leaves obs, obs\[0\] form no"),
        (["obs", "obs[x]"], r"dataset field 'obs\[x\]' in .* is not one of"),
        (["obs", "reward[0]"], r"dataset field 'reward\[0\]' in .* is not one of"),
    ],
)
def test_leaf_names_that_form_no_tree_are_refused_on_load(tmp_path, names, message):
    dataset = synthetic(lambda rng, size: np.zeros((size, 2), np.float32))
    contents = {name: np.asarray(getattr(dataset, name)) for name in data.FIELDS if name != "obs"}
    contents.update({name: np.zeros((12, 2), np.float32) for name in names})
    meta = {"_format_version": np.int64(data.FORMAT_VERSION), "_env_id": np.str_(""), "_num_envs": np.int64(1)}
    np.savez(tmp_path / "bad.npz", **contents, **meta)
    with pytest.raises(ValueError, match=message):
        data.load_dataset(tmp_path / "bad.npz")


# ----------------------------------------------------------------------------- BC: masks and loss


@pytest.fixture(scope="module")
def cue_config(registered):
    return bc.Config(
        env_id=CUE,
        num_updates=200,
        batch_size=64,
        hidden_sizes=(32,),
        learning_rate=3e-3,
        num_evals=4,
        eval_episodes=16,
        num_reports=0,
    )


def perturbed_state(config, dataset):
    """``init``'s state with every weight moved far off its init, so the unmasked
    policy would often pick masked actions."""
    state = jax.jit(bc.init, static_argnames="config")(jax.random.key(0), config, dataset)
    rng = np.random.default_rng(0)
    network = jax.tree.map(lambda w: w + rng.normal(0.0, 1.0, w.shape).astype(np.float32), state.params["network"])
    return state.replace(params={**state.params, "network": network})


def test_the_policy_never_acts_against_the_mask_and_the_loss_is_the_masked_likelihood(cue_config, cue_dataset):
    state = perturbed_state(cue_config, cue_dataset)
    obs = as_numpy(cue_dataset.obs)
    mask = obs["action_mask"]
    unmasked = np.asarray(
        bc.make_network(cue_config).apply(
            state.params["network"], envs.normalize_observation(state.params["obs_stats"], cue_dataset.obs)
        )
    )
    assert not mask[np.arange(NUM_STEPS), unmasked.argmax(-1)].all()  # the mask has something to do
    act = jax.jit(bc.act, static_argnames=("config", "deterministic"))
    for deterministic in (False, True):
        action = np.asarray(act(state.params, cue_dataset.obs, (), jax.random.key(1), cue_config, deterministic)[0])
        assert mask[np.arange(NUM_STEPS), action].all(), deterministic
    # Whole evaluation episodes (deterministic, through the env's auto-resets) too: one
    # masked action would cost 1000.
    returns = jax.jit(bc.evaluate, static_argnames="config")(state.params, jax.random.key(2), config=cue_config).returns
    assert np.asarray(returns).min() >= 0.0, returns
    # The cross-entropy of the policy that acts: a log-softmax over the allowed actions.
    loss, metrics = jax.jit(bc.loss_fn, static_argnames="config")(
        state.params["network"], state.params["obs_stats"], cue_dataset, config=cue_config
    )
    logits = np.where(mask, unmasked.astype(np.float64), -np.inf)
    log_p = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    action = np.asarray(cue_dataset.action)
    np.testing.assert_allclose(loss, -log_p[np.arange(NUM_STEPS), action].mean(), rtol=1e-4)
    np.testing.assert_allclose(metrics["accuracy"], np.mean(logits.argmax(-1) == action), rtol=1e-6)


def test_observation_statistics_are_kept_per_float_leaf(cue_config, cue_dataset):
    stats = jax.jit(bc.init, static_argnames="config")(jax.random.key(0), cue_config, cue_dataset).params["obs_stats"]
    obs = as_numpy(cue_dataset.obs)
    assert stats[0] is None  # leaves order: action_mask (never normalised), cue, position
    np.testing.assert_allclose(stats[2].mean, obs["position"].mean(0), rtol=1e-3)
    np.testing.assert_allclose(stats[2].var, obs["position"].var(0), rtol=1e-3)


# ----------------------------------------------------------------------------- BC: learning


def train_seeds(config, dataset):
    keys = jax.random.split(jax.random.key(2), SEEDS)
    out = jax.jit(jax.vmap(bc.train, in_axes=(0, None, None)))(keys, config, dataset)
    evals = np.asarray(out.metrics["eval_return"])
    return evals[:, np.isfinite(evals[0])]  # [seeds, num_evals]


@pytest.mark.learns
def test_clones_the_cue_expert_and_never_takes_a_masked_action(cue_config, cue_dataset):
    """MaskedCue (dict observation, action mask): 768 transitions of an expert that
    always plays the cue; BC (cross-entropy, 200 updates of batch 64) over 3 seeds: the
    final deterministic evaluation (16 episodes of 8 steps) follows the cue on >= 7.5 of
    8 steps on average in at least 2 of 3 seeds, and never takes a masked action (one
    would cost 1000). The two allowed actions chosen uniformly would earn 4."""
    evals = train_seeds(cue_config, cue_dataset)
    print(f"MaskedCue BC eval returns (seeds x evaluations): {evals.tolist()}")
    assert evals.shape == (SEEDS, 4) and evals.min() >= 0.0, evals  # early, half-trained policies too
    assert (evals[:, -1] >= 7.5).sum() >= 2, evals


@pytest.mark.learns
def test_clones_the_target_expert_on_nested_tuple_observations(target_dataset):
    """NestedTarget (tuple observation with a nested dict and an int scalar leaf,
    continuous actions): 768 transitions of the expert that plays the target; BC
    (``loss="mse"``, 200 updates of batch 64) over 3 seeds: the final deterministic
    evaluation return (16 episodes, at most 8 steps) >= -0.25 in at least 2 of 3 seeds.
    Playing 0 scores about -2.5 (a third per step), the expert 0."""
    config = bc.Config(
        env_id=TARGET,
        loss="mse",
        num_updates=200,
        batch_size=64,
        hidden_sizes=(32,),
        learning_rate=3e-3,
        num_evals=1,
        eval_episodes=16,
        num_reports=0,
    )
    returns = train_seeds(config, target_dataset)[:, -1]
    print(f"NestedTarget BC eval returns: {returns}")
    assert (returns >= -0.25).sum() >= 2, returns
