"""The ``craftax:`` and ``xminigrid:`` adapters (jaxrl.envs.craftax, .xminigrid; navix's
are in tests/test_envs_navix.py): each checked step by step, over 2 seeds at once
(``jax.vmap``), against the suite's own step from the same state and key, through random
play that ends episodes both ways (the suite's own end, and the time limit
``max_steps_in_episode``); then spaces and errors. Each suite's tests skip without its
package. PPO learning an xminigrid task is a row of ``benchmarks/learning_table.py``."""

from __future__ import annotations

import collections
import importlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs
from jaxrl.envs import craftax as craftax_adapter
from jaxrl.envs import xminigrid as xminigrid_adapter

SEEDS = 2


def _host(tree):
    """``tree`` as numpy arrays (PRNG keys as their data): lanes are then cheap to take."""
    to_numpy = lambda x: np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x)  # noqa: E731
    return jax.tree.map(to_numpy, tree)


def _lane(tree, lane: int):
    return jax.tree.map(lambda leaf: leaf[lane], tree)


def _assert_same_tree(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b) and len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        _assert_same(x, y)


def _assert_same(x, y):
    """Equal arrays; floats up to rounding (two programs computing the same floats may
    fuse their operations differently)."""
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    if np.issubdtype(x.dtype, np.floating):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(x, y)


def _follow_suite(env, params, suite_step, suite_reset, num_steps: int, actions, seed: int = 0, alter=None):
    """Play ``num_steps`` random steps (``actions``: the actions to draw from) on
    ``SEEDS`` envs with jaxrl's batched step, checking each against ``suite_step(keys,
    state, action) -> (obs, state, reward, terminated, truncated)``, the suite's own step
    without reset from the same state with the step's key, and ``suite_reset(keys) ->
    (obs, state)``, the suite's reset from the step's reset key (None: the adapter's own
    batched reset from that key). ``alter(i, state)``, if given, may change the state
    before step ``i``. Returns the first observations and the lengths of the episodes that
    ended each way."""
    reset = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    if suite_reset is None:
        suite_reset = lambda keys: reset(jax.vmap(_reset_key)(keys), params)  # noqa: E731
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    obs, state = reset(jax.random.split(jax.random.key(seed), SEEDS), params)
    first_obs = obs
    space = env.observation_space(params)
    assert obs.shape == (SEEDS, *space.shape) and obs.dtype == space.dtype
    rng = np.random.default_rng(seed)
    lengths = {"terminated": [], "truncated": []}
    t = np.zeros(SEEDS, int)
    for i in range(num_steps):
        keys = jax.random.split(jax.random.key(1000 * seed + i + 1), SEEDS)
        action = jnp.asarray(rng.choice(actions, SEEDS), jnp.int32)
        if alter is not None:
            state = alter(i, state)
        new_obs, new_state, reward, terminated, truncated, info = step(keys, state, action, params)
        assert new_obs.dtype == space.dtype and reward.dtype == jnp.float32 and reward.shape == (SEEDS,)
        assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
        s_obs, s_state, s_reward, s_terminated, s_truncated = _host(suite_step(keys, state, action))
        r_obs, r_state = _host(suite_reset(keys))
        host_obs, host_state = _host((new_obs, new_state))
        reward, terminated, truncated, info = _host((reward, terminated, truncated, info))
        t += 1
        for lane in range(SEEDS):
            assert bool(terminated[lane]) == bool(s_terminated[lane])
            assert bool(truncated[lane]) == bool(s_truncated[lane])
            assert not (terminated[lane] and truncated[lane])
            _assert_same(reward[lane], s_reward[lane])
            _assert_same(info["final_observation"][lane], s_obs[lane])
            if terminated[lane] or truncated[lane]:  # reset, from the step's key
                lengths["terminated" if terminated[lane] else "truncated"].append(int(t[lane]))
                t[lane] = 0
                _assert_same(host_obs[lane], r_obs[lane])
                _assert_same_tree(_lane(host_state, lane), _lane(r_state, lane))
            else:
                _assert_same(host_obs[lane], s_obs[lane])
                _assert_same_tree(_lane(host_state, lane), _lane(s_state, lane))
        obs, state = new_obs, new_state
    return first_obs, lengths


def _reset_key(key):
    return jax.random.split(key)[1]  # gymnax's step: key_step, key_reset = split(key)


def _step_key(key):
    return jax.random.split(key)[0]


def _check_bad_parameters(env_id: str, suite: str):
    with pytest.raises(ValueError, match=r"unknown env parameter\(s\) \['colour'\]"):
        envs.make(env_id, colour="red")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_steps_in_episode must be a positive int"):
            envs.make(env_id, max_steps_in_episode=bad)
    with pytest.raises(ValueError, match=f"unknown {suite} env 'Nope-v0'"):
        envs.check_env_id(f"{suite}:Nope-v0")
    with pytest.raises(ValueError, match=f"unknown {suite} env 'Nope-v0'"):
        envs.make(f"{suite}:Nope-v0")


# ----------------------------------------------------------------------- xminigrid


@pytest.fixture(scope="module")
def xminigrid():
    return pytest.importorskip("xminigrid")


@pytest.mark.slow
def test_xminigrid_steps_follow_xminigrid(xminigrid):
    """MiniGrid-EmptyRandom-5x5 with an 8-step limit (so xminigrid's max_steps, the
    reward's scale, is 8 too), random turns and moves: every step is xminigrid's own step
    from the same timestep; its goal (discount 0) is ``terminated``, its time limit
    ``truncated`` (at exactly 8 steps), and a done step resets in place with xminigrid's
    reset from the step's key."""
    env, params = envs.make("xminigrid:MiniGrid-EmptyRandom-5x5", max_steps_in_episode=8)
    xm, suite_params = env.xminigrid_env, params.suite_params
    assert suite_params.max_steps == 8

    @jax.jit
    @jax.vmap
    def suite_step(key, timestep, action):
        out = xm.step(suite_params, timestep, action)
        last = out.step_type == 2
        return out.observation, out, out.reward, last & (out.discount == 0), last & (out.discount == 1)

    @jax.jit
    @jax.vmap
    def suite_reset(key):
        timestep = xm.reset(suite_params, _reset_key(key))
        return timestep.observation, timestep

    first_obs, lengths = _follow_suite(env, params, suite_step, suite_reset, 60, actions=[0, 0, 1, 2])
    assert first_obs.shape == (SEEDS, 7, 7, 2) and first_obs.dtype == jnp.uint8
    assert not np.array_equal(first_obs[0], first_obs[1])  # the start is random
    assert lengths["truncated"] and set(lengths["truncated"]) == {8}
    assert lengths["terminated"] and max(lengths["terminated"]) <= 8


def test_xminigrid_spaces(xminigrid):
    """Every MiniGrid id: the observation space is what ``reset`` returns (uint8
    egocentric views), 6 actions; XLand ids are not offered."""
    ids = xminigrid_adapter.registered_ids()
    assert "MiniGrid-Empty-6x6" in ids and not any(i.startswith("XLand") for i in ids)
    for env_id in ids:
        env, params = envs.make(f"xminigrid:{env_id}")
        space = env.observation_space(params)
        obs, _ = jax.eval_shape(env.reset, jax.random.key(0), params)
        assert (obs.shape, obs.dtype) == (tuple(space.shape), space.dtype), env_id
        assert env.action_space(params).n == 6
    env, params = envs.make("xminigrid:MiniGrid-Empty-6x6", view_size=5)
    assert env.observation_space(params).shape == (5, 5, 2)
    assert params.max_steps_in_episode == params.suite_params.max_steps == 4 * 6 * 6


def test_xminigrid_bad_ids_and_parameters(xminigrid):
    _check_bad_parameters("xminigrid:MiniGrid-Empty-6x6", "xminigrid")
    with pytest.raises(ValueError, match="rulesets downloaded at run time"):
        envs.make("xminigrid:XLand-MiniGrid-R1-9x9")
    with pytest.raises(ValueError, match="xminigrid ids: .*MiniGrid-Empty-6x6"):
        envs.check_env_id("xminigrid:MiniGrid-Empty-7x7")
    with pytest.raises(ValueError, match="not max_steps"):
        envs.make("xminigrid:MiniGrid-Empty-6x6", max_steps=10)
    with pytest.raises(ValueError, match="view_size must be a positive int"):
        envs.make("xminigrid:MiniGrid-Empty-6x6", view_size=0)


# -------------------------------------------------------------------------- craftax


@pytest.fixture(scope="module")
def craftax():
    return pytest.importorskip("craftax")


@pytest.mark.slow
def test_craftax_steps_follow_craftax(craftax):
    """Craftax-Classic-Symbolic-v1 with a 6-step limit, random actions: every step is
    craftax's own ``step_env`` (with ``max_timesteps`` 6) from the same state with the
    step's key; craftax's ``done`` at the time limit is ``truncated`` (at exactly 6
    steps), and a done step resets in place from the step's key. In the first episode of
    seed 0 the player dies (health set to 0) on the step that also reaches the time limit:
    ``terminated``, not ``truncated``. (The reset is the adapter's own batched reset,
    craftax's ``reset_env``: a third compiled world generator would add about a minute.)"""
    env, params = envs.make("craftax:Craftax-Classic-Symbolic-v1", max_steps_in_episode=6)
    game = env.craftax_env
    suite_params = params.suite_params.replace(max_timesteps=6)

    @jax.jit
    @jax.vmap
    def suite_step(key, state, action):
        obs, new_state, reward, done, info = game.step(_step_key(key), state, action, suite_params)
        truncated = done & (new_state.timestep >= 6) & (new_state.player_health > 0)
        return obs, new_state, reward, done & ~truncated, truncated

    def kill_seed_0(i, state):
        if i != 5:
            return state
        assert int(state.timestep[0]) == 5
        return state.replace(player_health=state.player_health.at[0].set(0))

    first_obs, lengths = _follow_suite(env, params, suite_step, None, 13, actions=np.arange(17), alter=kill_seed_0)
    assert first_obs.shape == (SEEDS, 1345) and first_obs.dtype == jnp.float32
    assert not np.array_equal(first_obs[0], first_obs[1])  # each reset draws a new world
    assert lengths == {"terminated": [6], "truncated": [6, 6, 6]}


@pytest.mark.slow
def test_craftax_spaces(craftax, monkeypatch):
    """Each id's observation space is what ``reset`` returns (float32 in [0, 1]). A pixel
    env loads craftax's textures when it is built, and in a fresh install craftax first
    processes them into its own package directory (minutes: benchmarks/RESULTS.md); spaces
    do not read them, so a stub stands in, and the pixel ids' ``reset`` (which renders) is
    not traced."""
    for renderer in ("craftax.craftax.renderer", "craftax.craftax_classic.renderer"):
        no_textures = lambda: collections.defaultdict(dict)  # noqa: E731
        monkeypatch.setattr(importlib.import_module(renderer), "load_all_textures", no_textures)
    shapes = {
        "Craftax-Symbolic-v1": (8268,),
        "Craftax-Classic-Symbolic-v1": (1345,),
        "Craftax-Pixels-v1": (130, 110, 3),
        "Craftax-Classic-Pixels-v1": (63, 63, 3),
    }
    assert set(shapes) == set(craftax_adapter.ENV_IDS)
    for env_id, shape in shapes.items():
        env, params = envs.make(f"craftax:{env_id}")
        space = env.observation_space(params)
        assert (tuple(space.shape), space.dtype) == (shape, jnp.float32), env_id
        if "Symbolic" in env_id:
            obs, state = jax.eval_shape(env.reset, jax.random.key(0), params)
            assert (obs.shape, obs.dtype) == (shape, jnp.float32), env_id
        assert env.action_space(params).n == (17 if "Classic" in env_id else 43)
    env, params = envs.make("craftax:Craftax-Classic-Symbolic-v1")
    state = jax.eval_shape(env.reset, jax.random.key(0), params)[1]
    info = jax.eval_shape(env.step, jax.random.key(0), state, 0, params)[-1]
    assert "Achievements/collect_diamond" in info and "discount" not in info
    env, params = envs.make("craftax:Craftax-Symbolic-v1", day_length=100)
    assert params.suite_params.day_length == 100 and params.max_steps_in_episode == 100000


def test_craftax_bad_ids_and_parameters(craftax):
    _check_bad_parameters("craftax:Craftax-Classic-Symbolic-v1", "craftax")
    with pytest.raises(ValueError, match="craftax ids: Craftax-Symbolic-v1"):
        envs.make("craftax:Craftax-Classic-v1")
    with pytest.raises(ValueError, match="not max_timesteps"):
        envs.make("craftax:Craftax-Classic-Symbolic-v1", max_timesteps=10)


@pytest.mark.parametrize(
    "suite, env_id",
    [("craftax", "Craftax-Classic-Symbolic-v1"), ("navix", "Navix-Empty-5x5-v0"), ("xminigrid", "MiniGrid-Empty-6x6")],
)
def test_a_missing_suite_says_how_to_install_it(monkeypatch, suite, env_id):
    monkeypatch.setitem(sys.modules, suite, None)  # import fails as if not installed
    for name in [m for m in sys.modules if m.startswith(f"{suite}.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=f'pip install "jaxrl\\[{suite}\\]"'):
        envs.make(f"{suite}:{env_id}")
