"""Generalized state-dependent exploration (gSDE) for SAC and PPO: the distribution
against NumPy, the noise ``act`` adds against ``z(s) @ theta`` computed in NumPy from
the parameters, when the noise matrix is drawn, training under jit and vmap, and the
config's refusals."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import distributions, networks, rollout
from jaxrl.algorithms import a2c, ippo, offpolicy, onpolicy, ppo, sac
from jaxrl.buffers.sequence import Windows
from jaxrl.config import replace_paths, sweep_axes
from jaxrl.exploration import GSDE

SMALL = dict(hidden_sizes=(8,), num_reports=0, sde=GSDE())
PPO = ppo.Config(env_id="Pendulum-v1", **SMALL)
SAC = sac.Config(env_id="Pendulum-v1", **SMALL)


def with_sde(config, **settings):
    """``config`` with gSDE's ``settings`` (``sample_freq``, ``log_std_init``): the
    fields of its ``sde`` part."""
    return replace_paths(config, {f"sde.{name}": value for name, value in settings.items()})


def perturbed(params, key, scale=0.5):
    """``params`` plus Gaussian noise on every leaf: nonzero biases and a log-std that
    differs across features and actions, so the references below see no special case."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(tree, [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


@pytest.fixture(scope="module")
def initial_params():
    """Each algorithm's parameters at initialisation (of :data:`PPO` and :data:`SAC`),
    shared by the acting tests: their shapes do not depend on ``sde.sample_freq``."""
    return {"ppo": init_params(ppo, PPO), "sac": init_params(sac, SAC)}


def init_params(algo, config):
    """``algo.init``'s parameters, compiled as one program (op by op, each of the init's
    many small operations compiles on its own, which takes longer)."""
    return jax.jit(lambda key: algo.init(key, config).params)(jax.random.key(0))


def np_normal_log_prob(x, loc, scale):
    return np.sum(-0.5 * ((x - loc) / scale) ** 2 - np.log(scale) - 0.5 * math.log(2 * math.pi), axis=-1)


# ----------------------------------------------------------------------------- the distribution


def test_state_dependent_scale_log_prob_entropy_and_noise_match_numpy():
    rng = np.random.default_rng(0)
    batch, num_features, action_dim = 5, 7, 3
    features = rng.normal(size=(batch, num_features)).astype(np.float32)
    features[0] = 0.0  # a state whose features are all 0 (dead ReLUs) keeps a positive scale
    log_std = rng.normal(-1.0, 0.5, size=(num_features, action_dim)).astype(np.float32)
    loc = rng.normal(size=(batch, action_dim)).astype(np.float32)
    action = rng.normal(size=(batch, action_dim)).astype(np.float32)
    unit_matrix = rng.normal(size=(batch, num_features, action_dim)).astype(np.float32)

    noise = distributions.StateDependentNoise(jnp.asarray(features), jnp.asarray(log_std))
    z, std = features.astype(np.float64), np.exp(log_std.astype(np.float64))
    scale = np.sqrt((z**2) @ (std**2) + 1e-6)
    np.testing.assert_allclose(noise.scale(), scale, rtol=1e-5)
    normal = distributions.Normal(jnp.asarray(loc), noise.scale())
    np.testing.assert_allclose(normal.log_prob(action), np_normal_log_prob(action, loc, scale), rtol=1e-5)
    np.testing.assert_allclose(normal.entropy(), np.sum(0.5 * np.log(2 * np.pi * np.e * scale**2), -1), rtol=1e-5)
    theta = std * unit_matrix  # each row's noise matrix
    np.testing.assert_allclose(noise.noise(unit_matrix), np.einsum("bf,bfa->ba", z, theta), rtol=1e-5, atol=1e-6)

    # The spread is learned through log_std alone: no gradient reaches the features.
    grad_features, grad_log_std = jax.grad(
        lambda f, s: jnp.sum(
            distributions.Normal(jnp.asarray(loc), distributions.StateDependentNoise(f, s).scale()).log_prob(action)
        ),
        argnums=(0, 1),
    )(jnp.asarray(features), jnp.asarray(log_std))
    np.testing.assert_array_equal(grad_features, 0.0)
    assert np.all(np.abs(grad_log_std) > 0.0)


def test_the_noise_over_fresh_matrices_has_the_policys_scale():
    """``z @ theta`` over many draws of ``theta`` is the Gaussian whose scale the policy
    reports: its standard deviation within 4 standard errors of ``scale()``."""
    rng = np.random.default_rng(1)
    features = jnp.asarray(rng.normal(size=(4,)), jnp.float32)
    log_std = jnp.asarray(rng.normal(-0.5, 0.3, size=(4, 2)), jnp.float32)
    noise = distributions.StateDependentNoise(features, log_std)
    draws = 20_000
    unit = jax.random.normal(jax.random.key(0), (draws, 4, 2))
    samples = np.asarray(jax.vmap(noise.noise)(unit), np.float64)  # [draws, 2]
    std = np.asarray(noise.scale())
    assert np.all(np.abs(samples.mean(0)) < 4 * std / np.sqrt(draws))
    assert np.all(np.abs(samples.std(0) - std) < 4 * std / np.sqrt(2 * draws))


# ----------------------------------------------------------------------------- acting


def np_ppo_policy(params, obs):
    """PPO's actor in NumPy: features ``tanh(obs W + b)``, mean, gSDE log-std."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params["network"]["params"])
    z = np.tanh(obs @ p["actor_torso"]["Dense_0"]["kernel"] + p["actor_torso"]["Dense_0"]["bias"])
    return z, z @ p["policy_head"]["kernel"] + p["policy_head"]["bias"], p["sde_log_std"]


def np_sac_policy(params, obs):
    """SAC's actor in NumPy: features ``relu(obs W + b)``, the Gaussian's mean, gSDE log-std."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params["actor"]["params"])
    z = np.maximum(obs @ p["MLP_0"]["Dense_0"]["kernel"] + p["MLP_0"]["Dense_0"]["bias"], 0.0)
    return z, z @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"], p["sde_log_std"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "sac"])
def test_act_adds_the_features_times_the_carried_matrix(name, initial_params):
    """The sampled action is the mean plus ``z(s) @ theta`` with ``theta = exp(log_std) *``
    the carry's matrix (SAC: through tanh, onto Pendulum's bounds of +-2; PPO: clipped to
    them); deterministic acting returns the mean and leaves the carry alone."""
    algo, config, np_policy = (ppo, PPO, np_ppo_policy) if name == "ppo" else (sac, SAC, np_sac_policy)
    params = initial_params[name]
    network = "network" if name == "ppo" else "actor"
    params = {**params, network: perturbed(params[network], jax.random.key(1))}
    obs = jax.random.normal(jax.random.key(2), (6, 3))
    carry = algo.initial_carry(config, 6)
    assert carry["sde"]["matrix"].shape == (6, 8, 1) and carry["sde"]["steps"].dtype == jnp.int32

    act = jax.jit(algo.act, static_argnames=("config", "deterministic"))  # one program, not op by op
    action, next_carry = act(params, obs, carry, jax.random.key(3), config=config)
    z, mean, log_std = np_policy(params, np.asarray(obs, np.float64))
    matrix = np.asarray(next_carry["sde"]["matrix"], np.float64)
    assert np.all(matrix != 0.0)  # drawn at the episode's first step
    np.testing.assert_array_equal(next_carry["sde"]["steps"], 1)
    noise = np.einsum("bf,bfa->ba", z, np.exp(log_std) * matrix)
    if name == "ppo":
        expected, expected_mode = np.clip(mean + noise, -2.0, 2.0), np.clip(mean, -2.0, 2.0)
    else:
        expected, expected_mode = 2.0 * np.tanh(mean + noise), 2.0 * np.tanh(mean)
    assert np.std(noise) > 0.05  # the noise is visible beside the tolerance
    np.testing.assert_allclose(action, expected, rtol=1e-4, atol=1e-5)

    mode, same = act(params, obs, next_carry, jax.random.key(4), config=config, deterministic=True)
    np.testing.assert_allclose(mode, expected_mode, rtol=1e-4, atol=1e-5)
    assert same is next_carry or jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), same, next_carry))


@pytest.mark.parametrize("name", ["ppo", "sac"])
def test_the_matrix_is_kept_between_draws_and_redrawn_every_sample_freq_steps(name, initial_params):
    """Driving ``act`` by hand with ``sde.sample_freq=3``: a matrix serves steps 0-2, a
    fresh one 3-5, and so on; an env whose episode ends (its carry reset, as the rollout
    does) draws a fresh one at its next step while the other keeps its own."""
    algo = ppo if name == "ppo" else sac
    config = with_sde(PPO if name == "ppo" else SAC, sample_freq=3)
    params = initial_params[name]
    obs = jax.random.normal(jax.random.key(1), (2, 3))
    act = jax.jit(lambda carry, key: algo.act(params, obs, carry, key, config))
    carry, used = algo.initial_carry(config, 2), []
    for key in jax.random.split(jax.random.key(2), 7):
        _, carry = act(carry, key)
        used.append(np.asarray(carry["sde"]["matrix"]))
    for t in range(1, 7):
        assert np.array_equal(used[t], used[t - 1]) == (t % 3 != 0), t
    carry = networks.reset_carry(carry, jnp.array([True, False]))  # env 0's episode ended after step 6
    _, carry = act(carry, jax.random.key(3))
    after = np.asarray(carry["sde"]["matrix"])
    assert not np.array_equal(after[0], used[-1][0])
    np.testing.assert_array_equal(after[1], used[-1][1])  # env 1 is at its step 7: same matrix as 6
    np.testing.assert_array_equal(carry["sde"]["steps"], [1, 2])


@pytest.mark.parametrize("name", ["ppo", "sac"])
@pytest.mark.parametrize("sample_freq", [0, 5])
def test_rollouts_draw_a_matrix_at_each_episode_start_and_every_sample_freq_steps(name, sample_freq):
    """Through the training rollout on 7-step episodes: the matrix an env acts with
    changes exactly at its episodes' first steps and (``sde.sample_freq=5``) at their
    fifth steps after that; with 0, one matrix serves each whole episode."""
    config = with_sde(
        (PPO if name == "ppo" else SAC).replace(env_kwargs={"max_steps_in_episode": 7}), sample_freq=sample_freq
    )
    algo = ppo if name == "ppo" else sac
    env, env_params = onpolicy.make_env(config) if name == "ppo" else offpolicy.make_env(config)
    state = algo.init(jax.random.key(0), config)

    def policy(obs, carry, key):
        action, next_carry = algo.act(state.params, obs, carry, key, config)
        return action, next_carry, {"matrix": next_carry["sde"]["matrix"]}

    trajectory, *_ = jax.jit(
        lambda: rollout.collect(env, env_params, policy, state.env_state, state.obs, jax.random.key(1), 24, state.carry)
    )()
    used = np.asarray(trajectory.extras["matrix"])  # [T, N, F, A]
    done = np.asarray(trajectory.done)
    step_in_episode = np.zeros(done.shape, int)
    for t in range(1, done.shape[0]):
        step_in_episode[t] = np.where(done[t - 1], 0, step_in_episode[t - 1] + 1)
    assert done.sum() >= 2 * config.num_envs
    drawn = step_in_episode == 0 if sample_freq == 0 else step_in_episode % sample_freq == 0
    changed = np.any(used[1:] != used[:-1], axis=(2, 3))
    np.testing.assert_array_equal(changed, drawn[1:])


# ----------------------------------------------------------------------------- training


TRAIN = {
    "ppo": PPO.replace(num_envs=2, num_steps=16, num_minibatches=2, num_epochs=2, total_timesteps=160, num_evals=2),
    "sac": SAC.replace(
        num_envs=2, batch_size=16, buffer_size=256, learning_starts=32, total_timesteps=64, num_evals=2, num_updates=2
    ),
}
TRAIN = {
    name: config.replace(eval_episodes=2, env_kwargs={"max_steps_in_episode": 20}) for name, config in TRAIN.items()
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "sac"])
def test_training_vmaps_over_seeds_and_the_initial_log_std_in_one_compile(name):
    algo = ppo if name == "ppo" else sac
    configs = with_sde(TRAIN[name], log_std_init=jnp.array([-3.0, -1.0])).replace(learning_rate=jnp.array([1e-3, 3e-4]))
    keys = jax.random.split(jax.random.key(0), 2)
    sweep = jax.jit(jax.vmap(algo.train, in_axes=(0, sweep_axes(configs))))
    out = sweep(keys, configs)
    sweep(keys, with_sde(configs, log_std_init=jnp.array([-2.0, -2.5])))  # new values, the same program
    assert sweep._cache_size() == 1
    params = out.state.params["network" if name == "ppo" else "actor"]["params"]
    log_std = np.asarray(params[networks.SDE_LOG_STD])  # [2, F, A], moved a little from where each started
    np.testing.assert_allclose(log_std.mean(axis=(1, 2)), [-3.0, -1.0], atol=0.2)
    evaluated = np.asarray(out.metrics["eval_return"])
    assert np.all(np.isfinite(evaluated[~np.isnan(evaluated)])) and np.sum(~np.isnan(evaluated)) == 4
    assert np.all(np.isfinite(np.asarray(out.metrics["entropy"])[:, -1]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo, config",
    [
        (ppo, TRAIN["ppo"].replace(memory="gru", memory_size=8, sequence_length=8)),
        (sac, TRAIN["sac"].replace(memory="gru", memory_size=8, windows=Windows(4, 1, 2))),
        (a2c, a2c.Config(env_id="Pendulum-v1", num_envs=2, num_steps=8, total_timesteps=64, **SMALL)),
    ],
    ids=["recurrent-ppo", "recurrent-sac", "a2c"],
)
def test_gsde_trains_beside_a_memory_and_in_a2c(algo, config):
    """With memory the carry holds the memory and the gSDE state side by side (the
    matrix over the core's features); A2C inherits PPO's acting."""
    out = jax.jit(algo.train, static_argnums=1)(jax.random.key(0), config)
    carry = out.state.carry
    features = config.memory_size if config.memory != "none" else config.hidden_sizes[-1]
    assert carry["sde"]["matrix"].shape == (config.num_envs, features, 1)
    assert np.all(np.isfinite(np.asarray(out.metrics["entropy"])[-1]))


# ----------------------------------------------------------------------------- refusals


def test_bad_gsde_settings_are_clear_errors():
    with pytest.raises(ValueError, match="sde \\(gSDE\\) needs a continuous"):
        ppo.Config(env_id="CartPole-v1", sde=GSDE())
    with pytest.raises(ValueError, match="sde \\(gSDE\\) needs continuous actions"):
        sac.Config(env_id="CartPole-v1", discrete=True, sde=GSDE())
    with pytest.raises(ValueError, match="sample_freq must be an integer >= 0"):
        GSDE(sample_freq=-1)
    for algo, config in ((ppo, PPO), (sac, SAC)):
        with pytest.raises(ValueError, match=r"sde\.log_std_init must lie in"):
            algo.init(jax.random.key(0), with_sde(config, log_std_init=math.nan))
        with pytest.raises(ValueError, match="sde must be one of jaxrl.exploration.GSDE"):
            algo.Config(env_id="Pendulum-v1", sde="state-dependent please")
    with pytest.raises(ValueError, match="sde.log_std_init"):
        ppo.preset("Pendulum-v1", sde=GSDE())  # its log_std_init belongs to the state-independent Gaussian
    with pytest.raises(TypeError, match="sde"):  # a multi-agent Config has no gSDE
        ippo.Config(sde=GSDE())
