"""Evolution strategies over the weights of a policy network.

Each generation (one :func:`step`) perturbs the current policy parameters into a
population of ``population_size`` members, plays ``episodes_per_member`` episodes with
every member in one vmapped rollout (members x episodes, to the env's time limit), and
moves the search distribution toward the members with the highest returns. The static
field ``strategy`` picks how:

* ``"openai_es"`` (Salimans et al., 2017, arXiv:1703.03864): mirrored noise
  ``theta +- sigma * eps``, fitness shaped into centred ranks in ``[-0.5, 0.5]``, and the
  gradient estimate ``sum_i rank_i * eps_i / (population_size * sigma)`` fed to Adam with
  decoupled weight decay (``learning_rate``, ``weight_decay`` and ``sigma`` are traced).
* ``"cma_es"`` and ``"snes"``: evosax's CMA-ES (Hansen, 2016) and separable NES
  (Wierstra et al., 2014) on the flattened parameters, their initial step size
  ``sigma``. They need the ``es`` extra (``pip install "jaxrl[es]"``). CMA-ES keeps a full
  covariance matrix and eigen-decomposes it (a LAPACK call on CPU): keep networks small.

Fitness is the mean undiscounted return of a member's episodes, played with the
deterministic policy (argmax, or the tanh-squashed mean scaled to the action bounds),
or with sampled actions if ``sample_actions``. Every member of a generation meets the
same ``episodes_per_member`` start states (common random numbers). With
``normalize_observations`` the policy sees observations standardised by running
statistics of every observation the population has seen; they live in ``params``, so
:func:`act` needs nothing else. ::

    config = es.Config(env_id="CartPole-v1")
    out = jax.jit(es.train)(jax.random.key(0), config)

A generation takes at most ``population_size * episodes_per_member * time limit`` env
steps; the run is ``total_timesteps`` divided by that many generations, and the
``timesteps`` metric counts the steps actually taken (episodes that end early take fewer).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl import envs, evaluation, loop, networks
from jaxrl.algorithms import requirements
from jaxrl.algorithms.contract import Algorithm
from jaxrl.config import freeze_mapping, require_choice, require_int, require_range, static
from jaxrl.distributions import mask_actions

STRATEGIES = ("openai_es", "cma_es", "snes")


@struct.dataclass
class Config:
    """ES settings. Static fields fix the program; the rest can be traced and vmapped."""

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())  # EnvParams overrides, e.g. {"max_steps_in_episode": 200}
    strategy: str = static("openai_es")  # "openai_es", "cma_es" or "snes"
    population_size: int = static(64)  # members per generation (even for openai_es: mirrored pairs)
    episodes_per_member: int = static(1)  # each member's fitness is its mean return over these
    total_timesteps: int = static(2_000_000)  # at most; generations = this // (population x episodes x time limit)
    sample_actions: bool = static(False)  # fitness of sampled actions instead of the deterministic policy
    normalize_observations: bool = static(True)  # running stats of the population's observations, in params
    network: Any = static("mlp")  # a shorthand or your torso: networks.resolve_torso
    hidden_sizes: tuple = static((32, 32))
    activation: str = static("tanh")
    num_evals: int = static(10)  # deterministic evaluations of the current parameters over the run
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    sigma: float = 0.05  # noise std (openai_es) / initial step size (cma_es, snes)
    learning_rate: float = 0.03  # Adam's step size (openai_es)
    weight_decay: float = 0.005  # decoupled weight decay (openai_es)
    action_noise: float = 0.1  # std of sampled continuous actions, in units of half the action range

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        require_choice(self, "strategy", STRATEGIES)
        require_int(self, "population_size", 2)
        if self.strategy == "openai_es" and self.population_size % 2:
            raise ValueError(
                f"population_size must be even for strategy='openai_es' (mirrored pairs), got {self.population_size}"
            )
        require_int(self, "episodes_per_member", 1)
        for field in ("eval_episodes",):
            require_int(self, field, 1)
        for field in ("num_evals", "num_reports"):
            require_int(self, field, 0)
        for field in ("sample_actions", "normalize_observations"):
            require_choice(self, field, (True, False))
        spec = envs.config_spec(self)
        networks.require_network(self, spec)
        requirements.refuse_multi_discrete(spec, self.env_id, "es")
        if not spec.discrete and len(spec.action_shape) != 1:
            raise ValueError(f"es needs a Discrete or a 1-D Box action space; {self.env_id} has {spec.action_shape}")
        if spec.max_episode_steps is None:
            raise ValueError(
                f"es plays whole episodes: {self.env_id} needs a time limit (env_kwargs max_steps_in_episode)"
            )
        require_int(self, "total_timesteps", self.generation_steps)

    @property
    def generation_steps(self) -> int:
        """The most env steps one generation takes."""
        return self.population_size * self.episodes_per_member * envs.config_spec(self).max_episode_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.generation_steps

    def check_traced(self) -> None:
        """Range checks of the traced fields (skipped while tracing); run by ``init``."""
        require_range(self, "sigma", 0.0, float("inf"), low_open=True)
        require_range(self, "learning_rate", 0.0, float("inf"), low_open=True)
        require_range(self, "weight_decay", 0.0, float("inf"))
        require_range(self, "action_noise", 0.0, float("inf"))


PRESETS = {}


@struct.dataclass
class State:
    params: dict  # {"network": the search distribution's mean, "obs_stats": RunningStats}
    strategy_state: Any  # openai_es: Adam's state; cma_es / snes: evosax's state
    timesteps: jax.Array  # int32 env steps taken so far


@struct.dataclass
class Generation:
    """A generation's members and how they did."""

    population: jax.Array  # [population_size, num_params] flattened network parameters
    fitness: jax.Array  # [population_size] mean episode return of each member
    noise: Any = ()  # openai_es: [population_size // 2, num_params] the mirrored pairs' eps


# ----------------------------------------------------------------------------- policy


def make_network(config) -> networks.Actor:
    """The policy: a torso, then logits (discrete) or a tanh-squashed mean (continuous)."""
    spec = envs.config_spec(config)
    return networks.Actor(
        action_dim=spec.num_actions if spec.discrete else spec.action_shape[0],
        kind="categorical" if spec.discrete else "deterministic",
        network=networks.resolve_torso(config.network, spec),
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=spec.obs_ndim,
    )


def initial_carry(config, batch_size: int):
    """ES policies are feed-forward: no memory."""
    del config, batch_size
    return ()


def _policy(network_params, obs_stats, obs: jax.Array, key: jax.Array, config, deterministic: bool):
    """Actions ``[B, ...]`` of one set of network parameters for raw observations
    (leaves ``[B, ...]``); masked actions (``obs["action_mask"]``) are never chosen."""
    raw_obs = obs
    if config.normalize_observations:
        obs = envs.normalize_observation(obs_stats, obs)
    out = make_network(config).apply(network_params, obs)
    spec = envs.config_spec(config)
    if spec.action_mask:
        out = mask_actions(out, raw_obs[envs.ACTION_MASK])
    if spec.discrete:
        if deterministic:
            return jnp.argmax(out, axis=-1).astype(jnp.int32)
        return jax.random.categorical(key, out).astype(jnp.int32)
    if not deterministic:  # noise in the tanh range, clipped back into it
        out = jnp.clip(out + config.action_noise * jax.random.normal(key, out.shape), -1.0, 1.0)
    return spec.from_unit(out)


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config, deterministic: bool = False):
    """``(action [B, ...], carry)`` for raw observations (leaves ``[B, ...]``); ``carry``
    is ``()`` (no memory). Argmax / the squashed mean if ``deterministic``, else a
    categorical sample / the mean plus ``action_noise``."""
    return _policy(params["network"], params["obs_stats"], obs, key, config, deterministic), carry


# ----------------------------------------------------------------------------- OpenAI-ES


def centered_ranks(fitness: jax.Array) -> jax.Array:
    """Fitness ``[P]`` shaped into ranks scaled to ``[-0.5, 0.5]`` (the worst -0.5, the
    best 0.5); tied values share the mean of their ranks."""
    size = fitness.shape[0]
    below = jnp.sum(fitness[None, :] < fitness[:, None], axis=1)
    ties = jnp.sum(fitness[None, :] == fitness[:, None], axis=1)
    rank = below + 0.5 * (ties - 1)
    return rank / (size - 1) - 0.5


def mirrored_population(mean: jax.Array, key: jax.Array, population_size: int, sigma):
    """Mirrored (antithetic) samples around ``mean [D]``: ``(population [P, D], noise [P // 2, D])``
    with member ``i < P // 2`` at ``mean + sigma * noise_i`` and member ``P // 2 + i`` at
    ``mean - sigma * noise_i`` (the layout :func:`es_gradient` reads); ``P`` is even."""
    noise = jax.random.normal(key, (population_size // 2, mean.shape[0]))
    return mean + sigma * jnp.concatenate([noise, -noise]), noise


def es_gradient(noise: jax.Array, shaped_fitness: jax.Array, sigma) -> jax.Array:
    """The ES estimate of the gradient of the expected (shaped) fitness at the mean.

    Args:
      noise: ``[P // 2, D]`` the pairs' eps; member ``i < P // 2`` is ``mean + sigma * eps_i``,
        member ``P // 2 + i`` is ``mean - sigma * eps_i``.
      shaped_fitness: ``[P]`` the members' shaped fitness, in that order.
      sigma: the noise std.
    Returns ``[D]``: ``sum_i (f+_i - f-_i) * eps_i / (P * sigma)``.
    """
    half = noise.shape[0]
    difference = shaped_fitness[:half] - shaped_fitness[half:]
    return difference @ noise / (2 * half * sigma)


def _adam(config) -> optax.GradientTransformation:
    # Callables, read from the config at every update (a changed config takes effect).
    return optax.inject_hyperparams(optax.adamw)(
        learning_rate=lambda count: config.learning_rate, weight_decay=lambda count: config.weight_decay
    )


# ----------------------------------------------------------------------------- evosax


def _evosax_strategy(config, num_params: int):
    try:
        algorithms = importlib.import_module("evosax.algorithms")
    except ImportError as error:
        raise ImportError(
            f'strategy={config.strategy!r} needs evosax: pip install "jaxrl[es]" (or pip install evosax>=0.3.2)'
        ) from error
    cls = {"cma_es": algorithms.CMA_ES, "snes": algorithms.SNES}[config.strategy]
    strategy = cls(population_size=config.population_size, solution=jnp.zeros(num_params))
    params = strategy.default_params.replace(std_init=jnp.asarray(config.sigma, jnp.float32))
    return strategy, params


# ----------------------------------------------------------------------------- the contract


def _flat(params: dict):
    return ravel_pytree(params["network"])


def init(key: jax.Array, config: Config) -> State:
    """The initial network (the search distribution's mean), observation statistics and
    the strategy's state. Checks the traced fields."""
    config.check_traced()
    spec = envs.config_spec(config)
    network_key, strategy_key = jax.random.split(key)
    network = make_network(config).init(network_key, spec.zeros((1,)))
    params = {"network": network, "obs_stats": envs.observation_stats_init(spec.observation, spec.obs_classes)}
    flat, _ = _flat(params)
    if config.strategy == "openai_es":
        strategy_state = _adam(config).init(flat)
    else:
        strategy, strategy_params = _evosax_strategy(config, flat.shape[0])
        strategy_state = strategy.init(strategy_key, flat, strategy_params)
    return State(params=params, strategy_state=strategy_state, timesteps=jnp.zeros((), jnp.int32))


def ask(state: State, key: jax.Array, config: Config):
    """The generation's members: ``(population [P, D], noise, state)``; ``noise`` is
    OpenAI-ES's ``[P // 2, D]`` eps (``()`` for evosax's strategies)."""
    flat, _ = _flat(state.params)
    if config.strategy == "openai_es":
        population, noise = mirrored_population(flat, key, config.population_size, config.sigma)
        return population, noise, state
    strategy, strategy_params = _evosax_strategy(config, flat.shape[0])
    population, strategy_state = strategy.ask(key, state.strategy_state, strategy_params)
    return population, (), state.replace(strategy_state=strategy_state)


def play(params: dict, population: jax.Array, key: jax.Array, config: Config):
    """Every member's episodes, to their ends or the time limit, as one vmapped rollout.

    Returns ``(fitness [P], lengths [P, E] int32, obs_moments)``: each member's mean
    return, its episodes' lengths, and ``(count, sums, sums of squares)`` of the
    observations seen (lists, one entry per normalised leaf, centred on its running mean)
    for the running statistics.
    """
    env, env_params = envs.make(config.env_id, **dict(config.env_kwargs))
    env = envs.ClipAction(env)
    max_steps = envs.config_spec(config).max_episode_steps
    members, episodes = config.population_size, config.episodes_per_member
    _, unravel = _flat(params)
    networks_ = jax.vmap(unravel)(population)
    obs_stats = params["obs_stats"]
    reset_key, run_key = jax.random.split(key)
    # Common random numbers: every member meets the same start states.
    reset_keys = jnp.tile(jax.random.split(reset_key, episodes), members)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    by_member = lambda tree: jax.tree.map(lambda x: x.reshape((members, episodes) + x.shape[1:]), tree)  # noqa: E731
    flat = lambda x: x.reshape((members * episodes,) + x.shape[2:])  # noqa: E731
    policy = jax.vmap(
        functools.partial(_policy, config=config, deterministic=not config.sample_actions),
        in_axes=(0, None, 0, 0),
    )

    def cond(carry):
        t, *_, running = carry
        return (t < max_steps) & evaluation.any_in_batch(running)

    def body(carry):
        t, obs, env_state, total, length, moments, running = carry
        act_key, env_key = jax.random.split(jax.random.fold_in(run_key, t))
        action = flat(policy(networks_, obs_stats, by_member(obs), jax.random.split(act_key, members)))
        count, first, second = moments
        sums = [_centred_sums(stats, x, running) for stats, x in _float_leaves(obs_stats, obs)]
        first = [f + s for f, (s, _) in zip(first, sums, strict=True)]
        second = [q + s for q, (_, s) in zip(second, sums, strict=True)]
        moments = (count + jnp.sum(running), first, second)
        obs, env_state, reward, terminated, truncated, _ = step(
            jax.random.split(env_key, members * episodes), env_state, action, env_params
        )
        total = total + jnp.where(running, reward, 0.0)
        length = length + running.astype(jnp.int32)
        running = running & ~(terminated | truncated)
        return t + 1, obs, env_state, total, length, moments, running

    size = members * episodes
    zeros = [jnp.zeros_like(stats.mean) for stats, _ in _float_leaves(obs_stats, obs)]
    start = (
        jnp.zeros((), jnp.int32),
        obs,
        env_state,
        jnp.zeros(size),
        jnp.zeros(size, jnp.int32),
        (jnp.zeros((), jnp.int32), zeros, zeros),
        jnp.ones(size, bool),
    )
    *_, total, length, moments, _ = jax.lax.while_loop(cond, body, start)
    return jnp.mean(by_member(total), axis=1), by_member(length), moments


def _float_leaves(obs_stats, obs) -> list:
    """``(RunningStats, leaf [B, ...])`` for every normalised leaf of ``obs``: the whole
    array observation, or each float leaf of a structured one (see
    :func:`jaxrl.envs.observation_stats_init`)."""
    if obs_stats is None or isinstance(obs_stats, envs.RunningStats):
        return [] if obs_stats is None else [(obs_stats, obs)]
    return [(stats, x) for stats, x in zip(obs_stats, jax.tree.leaves(obs), strict=True) if stats is not None]


def _centred_sums(stats: envs.RunningStats, x: jax.Array, running: jax.Array):
    """Sum and sum of squares over the batch of ``x [B, ...]`` centred on ``stats.mean``,
    counting the rows where ``running [B]``."""
    weight = running.astype(jnp.float32).reshape((-1,) + (1,) * (x.ndim - 1))
    centred = (x.astype(jnp.float32) - stats.mean) * weight
    return jnp.sum(centred, 0), jnp.sum(centred**2, 0)


def _merge_obs_stats(obs_stats, moments):
    """Fold ``(count, sums, sums of squares)`` (one per :func:`_float_leaves` entry) of
    observations centred on the running means into ``obs_stats``."""
    count, first, second = moments
    if obs_stats is None or isinstance(obs_stats, envs.RunningStats):
        return obs_stats if obs_stats is None else _merge(obs_stats, count, first[0], second[0])
    sums = iter(zip(first, second, strict=True))
    return [None if stats is None else _merge(stats, count, *next(sums)) for stats in obs_stats]


def _merge(stats: envs.RunningStats, count, first, second) -> envs.RunningStats:
    """Fold ``count`` observations' ``first`` / ``second`` sums centred on ``stats.mean``
    into the running statistics."""
    count = count.astype(jnp.float32)
    safe = jnp.maximum(count, 1.0)
    offset = first / safe  # the batch's mean minus the running mean
    batch_var = jnp.maximum(second / safe - offset**2, 0.0)
    return envs.running_stats_merge(stats, stats.mean + offset, batch_var, count)


def update(state: State, generation: Generation, key: jax.Array, config: Config):
    """Move the search distribution on a played generation. Returns ``(state, metrics)``."""
    flat, unravel = _flat(state.params)
    if config.strategy == "openai_es":
        shaped = centered_ranks(generation.fitness)
        gradient = es_gradient(generation.noise, shaped, config.sigma)
        updates, strategy_state = _adam(config).update(-gradient, state.strategy_state, flat)
        mean = optax.apply_updates(flat, updates)
        metrics = {"grad_norm": jnp.linalg.norm(gradient), "sigma": jnp.asarray(config.sigma, jnp.float32)}
    else:
        strategy, strategy_params = _evosax_strategy(config, flat.shape[0])
        # evosax minimises.
        strategy_state, _ = strategy.tell(
            key, generation.population, -generation.fitness, state.strategy_state, strategy_params
        )
        mean = strategy_state.mean
        metrics = {"sigma": jnp.mean(strategy_state.std)}
    params = {**state.params, "network": unravel(mean)}
    return state.replace(params=params, strategy_state=strategy_state), metrics


def step(state: State, key: jax.Array, config: Config):
    """One generation: ask, play every member's episodes, update the observation
    statistics and the search distribution."""
    ask_key, play_key, update_key = jax.random.split(key, 3)
    population, noise, state = ask(state, ask_key, config)
    fitness, lengths, moments = play(state.params, population, play_key, config)
    state, metrics = update(state, Generation(population, fitness, noise), update_key, config)
    if config.normalize_observations:
        params = {**state.params, "obs_stats": _merge_obs_stats(state.params["obs_stats"], moments)}
        state = state.replace(params=params)
    state = state.replace(timesteps=state.timesteps + jnp.sum(lengths))
    metrics.update(
        timesteps=state.timesteps,
        episode_return=jnp.mean(fitness),
        episode_length=jnp.mean(lengths.astype(jnp.float32)),
        fitness_mean=jnp.mean(fitness),
        fitness_max=jnp.max(fitness),
        fitness_min=jnp.min(fitness),
    )
    return state, metrics


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Deterministic returns of ``eval_episodes`` episodes of the current mean."""
    return evaluation.evaluate_config(act, initial_carry, params, key, config)


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program` (for :mod:`jaxrl.workflow.runner`'s chunked training)."""
    # Every generation starts fresh episodes: no env state outlives a step, host env or not.
    return loop.config_program(config, init, step, evaluate, resumable=True)


algorithm = Algorithm(
    name="es",
    Config=Config,
    init=init,
    act=act,
    initial_carry=initial_carry,
    update=update,
    step=step,
    program=program,
    evaluate=evaluate,
    presets=PRESETS,
    summary="Evolution strategies over policy weights: OpenAI-ES, CMA-ES, SNES",
)
__getattr__ = algorithm.module_getattr(__name__)  # es.train, es.preset: the record's
