"""The envpool adapter: ``"envpool:<id>"`` through envpool's XLA interface (jaxrl.envs.envpool)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

envpool = pytest.importorskip("envpool")

from interrupt import kill_after_checkpoints  # noqa: E402

from jaxrl import envs  # noqa: E402
from jaxrl.algorithms import dqn, ppo  # noqa: E402
from jaxrl.workflow import runner  # noqa: E402
from jaxrl.workflow.options import RunOptions  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.*precision lowered.*")]

# Small Atari settings: fewer, smaller frames (the shapes still follow envpool's settings).
PONG = dict(img_height=42, img_width=42, stack_num=2)


def rollout(env, params, actions, key=None):
    """Reset ``actions.shape[1]`` lanes and step them with ``actions [T, N]`` inside one
    jit; returns (first obs, per-step (obs, reward, terminated, truncated, info))."""
    num_envs = actions.shape[1]
    key = jax.random.key(0) if key is None else key

    @jax.jit
    def run(key, actions):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def body(state, action):
            obs, state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(key, num_envs), state, action, params
            )
            return state, (obs, reward, terminated, truncated, info)

        return obs, jax.lax.scan(body, state, actions)[1]

    return run(key, actions)


def test_atari_steps_inside_jit_with_envpools_shapes():
    """Pong through the XLA interface inside jit: observations, rewards and flags have the
    shapes and dtypes of envpool's own Python API (per env: its batch axis is our vmap),
    and the same seed gives the same frames."""
    num_envs, steps = 3, 8
    env, params = envs.make("envpool:Pong-v5", **PONG)
    spec = envs.spec(env, params)
    python = envpool.make("Pong-v5", env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, seed=0, **PONG)
    obs0, _ = python.reset()
    actions = np.random.default_rng(0).integers(0, python.action_space.n, (steps, num_envs)).astype(np.int32)
    ours0, (obs, reward, terminated, truncated, info) = rollout(env, params, jnp.asarray(actions))
    assert spec.obs_shape == obs0.shape[1:] == (2, 42, 42) and spec.obs_dtype == obs0.dtype == np.uint8
    assert spec.num_actions == python.action_space.n and spec.max_episode_steps == 27000
    assert ours0.shape == obs0.shape and ours0.dtype == obs0.dtype
    np.testing.assert_array_equal(ours0, obs0)
    for t in range(steps):
        o, r, te, tr, i = python.step(actions[t])
        assert obs[t].shape == o.shape and obs[t].dtype == o.dtype
        assert reward[t].shape == r.shape and reward[t].dtype == jnp.float32
        assert terminated[t].shape == te.shape and terminated[t].dtype == te.dtype == np.bool_
        assert truncated[t].shape == tr.shape and truncated[t].dtype == tr.dtype == np.bool_
        np.testing.assert_array_equal(obs[t], o)
        np.testing.assert_array_equal(reward[t], r)
        np.testing.assert_array_equal(terminated[t], te)
    assert info["final_observation"].shape == obs.shape and bool(np.all(info["valid"]))
    python.close()
    # channels_last: the same frames as [H, W, C], the layout of jaxrl's pixel networks.
    env, params = envs.make("envpool:Pong-v5", channels_last=True, **PONG)
    assert envs.spec(env, params).obs_shape == (42, 42, 2)
    last0, (last, *_) = rollout(env, params, jnp.asarray(actions))
    np.testing.assert_array_equal(last0, np.moveaxis(np.asarray(ours0), 1, -1))
    np.testing.assert_array_equal(last, np.moveaxis(np.asarray(obs), 2, -1))


def test_next_step_autoreset_is_mapped_and_the_dummy_step_marked():
    """CartPole pushed one way falls within ~10 steps. The step that ends an episode is
    envpool's (reward 1, terminated, final observation = observation); the next one is
    envpool's reset step (reward 0, a fresh observation) marked ``valid=False``; every
    lane matches envpool's own Python loop with the same seed."""
    num_envs, steps = 4, 40
    env, params = envs.make("envpool:CartPole-v1")
    actions = np.zeros((steps, num_envs), np.int32)
    _, (obs, reward, terminated, truncated, info) = rollout(env, params, jnp.asarray(actions))
    python = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, seed=0)
    python.reset()
    for t in range(steps):
        o, r, te, tr, _ = python.step(actions[t])
        np.testing.assert_allclose(obs[t], o)
        np.testing.assert_array_equal(reward[t], r)
        np.testing.assert_array_equal(terminated[t], te)
        np.testing.assert_array_equal(truncated[t], tr)
    python.close()
    terminated, valid, reward = np.asarray(terminated), np.asarray(info["valid"]), np.asarray(reward)
    assert terminated.sum() >= 2 * num_envs and not np.asarray(truncated).any()
    np.testing.assert_array_equal(info["final_observation"], obs)
    ended = np.argwhere(terminated[:-1])
    for t, lane in ended:
        assert reward[t, lane] == 1.0 and valid[t, lane]
        assert not valid[t + 1, lane] and reward[t + 1, lane] == 0.0 and not terminated[t + 1, lane]
        assert abs(obs[t + 1, lane, 2]) < 0.05  # a fresh pole, upright
    assert valid.sum() == valid.size - len(ended)


def test_vmap_over_seeds_folds_into_one_envpool():
    """vmap over 2 seeds of 3 lanes runs one envpool of 6 envs: lane i of seed s is
    envpool's env 3 s + i."""
    env, params = envs.make("envpool:CartPole-v1", seed=5)
    actions = jnp.ones((5, 2, 3), jnp.int32)
    keys = jax.random.split(jax.random.key(1), 2)
    obs0, (obs, *_) = jax.vmap(lambda a, k: rollout(env, params, a, k), in_axes=(1, 0), out_axes=(0, 1))(actions, keys)
    python = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=6, batch_size=6, seed=5)
    ref0, _ = python.reset()
    np.testing.assert_allclose(np.asarray(obs0).reshape(6, 4), ref0)
    for t in range(5):
        ref, *_ = python.step(np.ones(6, np.int32))
        np.testing.assert_allclose(np.asarray(obs[t]).reshape(6, 4), ref)
    python.close()
    # A reset whose key is not vmapped over the seeds cannot serve their steps.
    with pytest.raises(ValueError, match="is stepped with 6"):
        jax.vmap(lambda a: rollout(env, params, a), in_axes=1)(actions)


def test_bad_ids_and_arguments():
    with pytest.raises(ValueError, match="unknown envpool task"):
        envs.check_env_id("envpool:Pongg-v5")
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("envpool:CartPole-v1", num_envs=4)
    env, params = envs.make("envpool:CartPole-v1", max_steps_in_episode=100)
    assert params.max_steps_in_episode == 100 and env.name == "envpool:CartPole-v1"


def test_ppo_learns_cartpole_through_envpool():
    """PPO, default config (4 envs x 128 steps), 100k steps on envpool's CartPole-v1
    inside one jit, evaluations included: the last three deterministic evaluations
    (10 episodes each) average >= 350 (seed 0: 455.3, in a fresh process; random play
    about 22)."""
    config = ppo.Config(env_id="envpool:CartPole-v1", total_timesteps=100_000, num_reports=0)
    out = jax.jit(ppo.train)(jax.random.key(0), config)
    evals = np.asarray(out.metrics["eval_return"])
    evals = evals[~np.isnan(evals)]
    assert evals[-3:].mean() >= 350, evals


@pytest.mark.learns
@pytest.mark.optimised
def test_dqn_learns_cartpole_through_envpool():
    """DQN's default config (prioritized replay), 100k steps on envpool's CartPole-v1: the
    last three greedy evaluations (10 episodes each) average >= 350 for 2 of 3 seeds
    (random play about 22). The dummy reset steps are stored with weight 0 and the least
    priority. At 60k steps DQN is still climbing on CartPole, with or without envpool."""
    config = dqn.Config(env_id="envpool:CartPole-v1", total_timesteps=100_000, num_reports=0)
    out = jax.jit(jax.vmap(dqn.train, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 3), config)
    evals = np.asarray(out.metrics["eval_return"])
    last = evals[:, ~np.isnan(evals[0])][:, -3:].mean(axis=1)
    assert (last >= 350).sum() >= 2, last
    assert not np.asarray(out.state.buffer.replay.data["valid"]).all()


RESUME = ppo.Config(
    env_id="envpool:CartPole-v1",
    total_timesteps=256,
    num_envs=2,
    num_steps=16,
    hidden_sizes=(16,),
    num_evals=0,
    num_reports=0,
    num_minibatches=2,
    num_epochs=1,
)


def run(logdir, resume=False):
    return runner.run(
        "ppo", RESUME, chunk_iterations=2, options=RunOptions(logdir, ("csv",), checkpoint_every=1, resume=resume)
    )


def test_a_resumed_envpool_run_continues_with_fresh_episodes_and_says_so(tmp_path):
    """envpool's envs live in the process that made them: a killed run resumes from its
    checkpoint with fresh episodes (a warning says so) and finishes its budget."""
    logdir = tmp_path / "run"
    kill_after_checkpoints("test_envs_envpool", f"t.run({str(logdir)!r})", tmp_path)
    with pytest.warns(UserWarning, match="continues with fresh episodes"):
        resumed = run(logdir, resume=True)
    assert resumed.completed == 8 and np.all(resumed.metrics["timesteps"][:, -1] == 256)


def test_impala_with_actors_apart_steps_one_envpool_per_actor():
    """Each actor steps an envpool of its own from Python (seeded from its key, so the two
    actors' first observations differ), beside the learner; with central inference too."""
    from jaxrl.algorithms import impala
    from jaxrl.workflow import actor_learner

    config = impala.Config(
        env_id="envpool:CartPole-v1", num_envs=4, num_steps=8, total_timesteps=4 * 8 * 30, num_evals=1
    )
    programs = actor_learner.ActorPrograms(impala.ACTOR_LEARNER, impala.actor_learner_config(config), 2)
    first = [programs.actor(a, jax.devices()[0], jax.random.key(a)) for a in range(2)]
    assert not np.array_equal(first[0].obs, first[1].obs)
    for actor in first:
        actor.close()
    result = actor_learner.run("impala", config, actors=2)
    assert result.completed == 30 and result.restarts == 0
    assert all(steps > 0 for steps in result.actor_steps) and sum(result.actor_steps) >= 30 * 4 * 8
    assert np.isfinite(result.metrics["eval_return"][0, -1])
    options = actor_learner.ActorOptions(actors=2, central_inference=True)
    assert actor_learner.run("impala", config, actors=options).completed == 30
