"""PPO-ES: PPO inside the inner loop of an evolution-strategies step (Liang et al., 2018,
RLlib, arXiv:1712.09381: "PPO updates run inside the inner loop of an ES optimisation
step that randomly perturbs the PPO models").

Each generation (one :func:`step`) perturbs the centre's policy weights into
``population_size`` members with mirrored Gaussian noise ``theta +- sigma * eps``
(:func:`jaxrl.algorithms.es.mirrored_population`), runs ``ppo_iterations`` iterations of
:func:`jaxrl.algorithms.ppo.step` (collect, then update) inside every member from its
perturbed start, and scores the unchanged centre and each member by the mean return of
``fitness_episodes`` deterministic episodes from the same start states. The best of
them, with its whole PPO state (weights, Adam's moments, observation statistics, envs),
is the next centre. The members run as one vmapped program, and ``jax.vmap`` over seeds
or configs nests around it. ::

    config = ppo_es.preset("CartPole-v1")
    out = jax.jit(ppo_es.train)(jax.random.key(0), config)

Why this update. The centre moves to the best member's PPO-updated parameters, as the
PPO-ES agent RLlib shipped with the paper did (Ray's ``PPOESAgent`` ranked its PPO
replicas, copied the winners' trained models over the losers and perturbed the copies
with Gaussian noise of std 0.02): the members' learning is inherited, where an
OpenAI-ES gradient step on the centre (Salimans et al., 2017, arXiv:1703.03864) would
discard it. RLlib ranked by the training episodes' mean return; here the candidates
play deterministic episodes after their PPO iterations, and the old centre competes
with its members (winning ties, so a centre is re-tested on fresh start states every
generation), the elitism of Such et al.'s genetic algorithm (2017, arXiv:1712.06567):
a generation whose PPO updates all went wrong changes nothing (benchmarks/RESULTS.md's
PPO-ES section compares the two rankings).

The inner PPO's settings are the ``ppo`` field, a :class:`jaxrl.algorithms.ppo.Config`
(``--set ppo.learning_rate=1e-3``); its ``env_id`` and ``env_kwargs`` are this Config's,
its ``eval_episodes`` is ``fitness_episodes``, and its ``total_timesteps`` the training
steps of one lineage (so ``anneal_lr`` anneals over the whole run). The state is the
centre's PPO state, whose ``timesteps`` counts every member's steps and the fitness
episodes'. A generation takes ``population_size * ppo_iterations * ppo.num_envs *
ppo.num_steps`` training steps and at most ``(population_size + 1) * fitness_episodes``
episodes to the time limit; the run is ``total_timesteps`` divided by that many
generations.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl import envs, evaluation
from jaxrl.algorithms import es, ppo
from jaxrl.algorithms.contract import Algorithm
from jaxrl.config import freeze_mapping, require_int, require_range, static


@struct.dataclass
class Config:
    """PPO-ES settings: the population around the centre, and the inner PPO's (a part)."""

    env_id: str = static("CartPole-v1")  # the inner PPO's too
    env_kwargs: Any = static(())  # EnvParams overrides, e.g. {"max_steps_in_episode": 200}
    ppo: ppo.Config = struct.field(default_factory=ppo.Config)  # the inner PPO; env and budget are set from here
    population_size: int = static(2)  # members per generation, in mirrored pairs (even)
    ppo_iterations: int = static(4)  # ppo.step calls each member runs per generation
    fitness_episodes: int = static(4)  # deterministic episodes that score each member and the centre
    total_timesteps: int = static(1_000_000)  # at most: every member's training steps and fitness episodes
    num_evals: int = static(10)  # deterministic evaluations of the centre over the run
    eval_episodes: int = static(10)  # episodes of each of those evaluations
    num_reports: int = static(50)  # `train`'s progress reports (the runner reports between chunks)
    sigma: float = 0.02  # std of the weights' perturbation (traced); RLlib's PPO-ES used 0.02

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        if not isinstance(self.ppo, ppo.Config):
            raise TypeError(f"ppo must be a jaxrl.algorithms.ppo.Config, got {self.ppo!r}")
        require_int(self, "population_size", 2)
        if self.population_size % 2:
            raise ValueError(f"population_size must be even (mirrored pairs), got {self.population_size}")
        for field in ("ppo_iterations", "fitness_episodes", "eval_episodes"):
            require_int(self, field, 1)
        for field in ("num_evals", "num_reports"):
            require_int(self, field, 0)
        if envs.steps_on_host(self.env_id):
            raise ValueError(f"ppo_es vmaps its members, which a host-stepped env cannot be: env_id {self.env_id!r}")
        if envs.config_spec(self).max_episode_steps is None:
            raise ValueError(
                f"ppo_es scores members by whole episodes: {self.env_id} needs a time limit "
                "(env_kwargs max_steps_in_episode)"
            )
        require_int(self, "total_timesteps", self.generation_steps)
        inner = {
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "eval_episodes": self.fitness_episodes,
            "total_timesteps": self.num_iterations * self.ppo_iterations * self.ppo.num_envs * self.ppo.num_steps,
        }
        if any(getattr(self.ppo, name) != value for name, value in inner.items()):
            object.__setattr__(self, "ppo", self.ppo.replace(**inner))

    @property
    def training_steps(self) -> int:
        """Env steps of one generation's PPO iterations, every member's together."""
        return self.population_size * self.ppo_iterations * self.ppo.num_envs * self.ppo.num_steps

    @property
    def generation_steps(self) -> int:
        """The most env steps one generation takes: training, then the fitness episodes."""
        max_steps = envs.config_spec(self).max_episode_steps
        return self.training_steps + (self.population_size + 1) * self.fitness_episodes * max_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.generation_steps

    def check_traced(self) -> None:
        """Range checks of the traced fields, the inner PPO's too (skipped while tracing)."""
        require_range(self, "sigma", 0.0, float("inf"))
        self.ppo.check_traced()


PRESETS = {
    # The inner PPO is rl-baselines3-zoo's for CartPole (ppo.PRESETS), its learning rate
    # annealed over the lineage; one mirrored pair, 4 PPO iterations and 4 fitness
    # episodes a generation, 96 generations (196,608 training steps): tests/test_ppo_es.py's
    # learning test, and benchmarks/RESULTS.md's PPO-ES section.
    "CartPole-v1": dict(
        ppo=ppo.preset("CartPole-v1"),
        population_size=2,
        ppo_iterations=4,
        fitness_episodes=4,
        total_timesteps=96 * (2 * 4 * 8 * 32 + 3 * 4 * 500),
    ),
}


@struct.dataclass
class Generation:
    """The candidates of a generation, after the members' PPO iterations."""

    candidates: Any  # PPO states, leaves [population_size + 1, ...]: the centre, then the members
    fitness: jax.Array  # [population_size + 1] each one's mean return over the fitness episodes
    fitness_steps: jax.Array  # int32 env steps of the fitness episodes


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """The inner PPO's :func:`jaxrl.algorithms.ppo.act`."""
    return ppo.act(params, obs, carry, key, config.ppo, deterministic)


def initial_carry(config: Config, batch_size: int):
    """The inner PPO's :func:`jaxrl.algorithms.ppo.initial_carry`."""
    return ppo.initial_carry(config.ppo, batch_size)


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """``eval_episodes`` deterministic episodes of the centre's policy."""
    return ppo.evaluate(params, key, config.ppo.replace(eval_episodes=config.eval_episodes))


def init(key: jax.Array, config: Config):
    """The centre: a fresh :func:`jaxrl.algorithms.ppo.init` state, which is the whole
    state of a PPO-ES run. Checks the traced fields."""
    config.check_traced()
    return ppo.init(key, config.ppo)


def perturb(centre, key: jax.Array, config: Config):
    """The population: ``population_size`` copies of the centre's PPO state whose network
    weights are mirrored samples around the centre's (the rest, the optimiser and the
    observation statistics included, is the centre's). Returns ``(members, noise
    [P // 2, D])``, member leaves ``[P, ...]``."""
    flat, unravel = ravel_pytree(centre.params["network"])
    population, noise = es.mirrored_population(flat, key, config.population_size, config.sigma)
    members = jax.tree.map(lambda x: jnp.broadcast_to(x, (config.population_size,) + x.shape), centre)
    return members.replace(params={**members.params, "network": jax.vmap(unravel)(population)}), noise


def run_ppo(member, key: jax.Array, config: Config):
    """``ppo_iterations`` PPO iterations of one member; metric leaves ``[ppo_iterations]``."""
    keys = jax.random.split(key, config.ppo_iterations)
    return jax.lax.scan(lambda state, k: ppo.step(state, k, config.ppo), member, keys)


def score(candidates, key: jax.Array, config: Config):
    """``(fitness [C], env steps)`` of candidate PPO states (leaves ``[C, ...]``): each
    one's mean return over ``fitness_episodes`` deterministic episodes, all from the
    same start states (common random numbers)."""
    result = jax.vmap(ppo.evaluate, in_axes=(0, None, None))(candidates.params, key, config.ppo)
    return jnp.mean(result.returns, axis=-1), jnp.sum(result.lengths)


def update(state, generation: Generation, key: jax.Array, config: Config):
    """The selection: the candidate with the highest fitness (the first of tied ones:
    the centre before its members) is the new centre; ``timesteps`` counts the whole
    generation. Returns ``(state, metrics)``; ``best`` is the winner's index (0: the
    centre)."""
    del key
    best = jnp.argmax(generation.fitness)
    centre = jax.tree.map(lambda x: x[best], generation.candidates)
    timesteps = state.timesteps + config.training_steps + generation.fitness_steps
    return centre.replace(timesteps=timesteps), {"best": best, "centre_kept": best == 0}


def step(state, key: jax.Array, config: Config):
    """One generation: perturb the centre, run PPO inside every member (vmapped), score
    the members and the centre, keep the best."""
    perturb_key, ppo_key, score_key = jax.random.split(key, 3)
    members, _ = perturb(state, perturb_key, config)
    keys = jax.random.split(ppo_key, config.population_size)
    members, inner = jax.vmap(run_ppo, in_axes=(0, 0, None))(members, keys, config)
    candidates = jax.tree.map(lambda c, m: jnp.concatenate([c[None], m]), state, members)
    fitness, fitness_steps = score(candidates, score_key, config)
    state, metrics = update(state, Generation(candidates, fitness, fitness_steps), score_key, config)
    learner = {k: jnp.mean(v) for k, v in inner.items() if k not in EPISODE_METRICS}
    return (
        state,
        {
            **learner,  # the inner PPO's losses, entropy, ..., averaged over members and iterations
            **metrics,
            **training_episodes(inner),
            "timesteps": state.timesteps,
            "fitness_max": jnp.max(fitness[1:]),
            "fitness_mean": jnp.mean(fitness[1:]),
            "fitness_centre": fitness[0],
        },
    )


EPISODE_METRICS = ("episode_return", "episode_length", "episodes", "timesteps")


def training_episodes(inner: dict) -> dict:
    """``episode_return`` and ``episode_length``, the means over every training episode
    the members finished (NaN if none), and their count ``episodes``, from the inner
    PPO's per-iteration metrics (leaves ``[P, K]``)."""
    count = inner["episodes"]
    total = jnp.maximum(jnp.sum(count), 1).astype(jnp.float32)

    def mean(x):
        return jnp.where(jnp.sum(count) > 0, jnp.sum(jnp.where(count > 0, x * count, 0.0)) / total, jnp.nan)

    return {
        "episode_return": mean(inner["episode_return"]),
        "episode_length": mean(inner["episode_length"]),
        "episodes": jnp.sum(count),
    }


algorithm = Algorithm(
    name="ppo_es",
    Config=Config,
    init=init,
    act=act,
    initial_carry=initial_carry,
    update=update,
    step=step,
    evaluate=evaluate,
    presets=PRESETS,
    summary="PPO-ES: PPO runs inside each member of a mirrored-noise population; the best is the next centre",
)
__getattr__ = algorithm.module_getattr(__name__)  # ppo_es.train, ppo_es.preset: the record's
