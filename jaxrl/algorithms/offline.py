"""What the offline actor-critics (TD3+BC, CQL, Implicit Q-Learning) share: the fields
of their Configs, the dataset as their data path, the start of their state, the run,
and the hand-over of a learned state to the matching online algorithm.

An offline algorithm learns from a fixed :class:`jaxrl.data.Dataset` (passed to
``init`` / ``train``, or read from ``config.dataset_path``) and never steps an env
except to evaluate. Its losses are those of an online algorithm plus its own term, so
each one computes them through the online algorithm's functions with
:func:`online_config`, the online Config of the same networks and numbers: TD3+BC's
critics are TD3's, CQL's SAC's, and the state that comes out is that online
algorithm's to continue (:func:`finetune`).

The data path: each update draws ``batch_size`` transitions uniformly with replacement
(:func:`jaxrl.data.sample`) and hands the losses the batch an online replay would give
them (:func:`batch`): ``obs``, ``action``, ``reward``, ``discount`` (``gamma``),
``terminated``, ``next_obs``, ``weight``. Targets bootstrap through truncation and stop at
termination, as the dataset keeps the two apart. Observations are standardised by the
dataset's statistics (``normalize_observations``), kept in ``params["obs_stats"]``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import data, envs, evaluation, loop, networks
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.contract import Algorithm
from jaxrl.buffers import replay
from jaxrl.config import freeze_mapping, require_int, require_range, static


@struct.dataclass
class Config:
    """The fields every offline actor-critic reads (each algorithm's Config adds its
    own). Static fields fix the program; the rest can be traced and vmapped.

    A run is ``num_updates`` iterations of one update on ``batch_size`` transitions.
    The defaults are the papers' (256 x 256 networks, Adam at 3e-4, Polyak 0.005)."""

    ALGORITHM = "offline"  # named in error messages (not a field)

    # --- static: environment and program structure
    env_id: str = static("Pendulum-v1")
    env_kwargs: Any = static(())  # EnvParams overrides, for evaluation
    dataset_path: str = static("")  # the file train() loads when given no dataset (jaxrl.data.load)
    num_updates: int = static(100_000)  # gradient steps, one per iteration
    batch_size: int = static(256)
    network: Any = static("mlp")  # a shorthand or your torso: networks.resolve_torso
    hidden_sizes: tuple = static((256, 256))
    activation: str = static("relu")
    normalize_observations: bool = static(True)  # by the dataset's mean and std, kept in params
    num_evals: int = static(10)  # deterministic evaluations over the run
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- traced hyper-parameters
    learning_rate: float = 3e-4  # every network (Adam)
    gamma: float = 0.99
    tau: float = 0.005  # Polyak rate of the target networks

    def __post_init__(self):
        check_run_fields(self)
        spec = self.check_actions()
        networks.require_network(self, spec)

    def check_actions(self) -> envs.EnvSpec:
        """The env's spec; ValueError unless its actions suit the algorithm (a Box with
        finite bounds)."""
        return offpolicy.require_box_actions(self, self.ALGORITHM)

    def check_traced(self) -> None:
        """ValueErrors for traced numbers out of range (skipped while tracing)."""
        require_range(self, "learning_rate", 0.0, float("inf"), low_open=True)
        require_range(self, "gamma", 0.0, 1.0)
        require_range(self, "tau", 0.0, 1.0, low_open=True)


def check_run_fields(config) -> None:
    """What every Config that learns from a dataset checks first (this family's and
    BC's): ``env_kwargs`` frozen, ``hidden_sizes`` a tuple, the run's counts whole
    numbers, ``dataset_path`` a string."""
    object.__setattr__(config, "env_kwargs", freeze_mapping(config.env_kwargs, "env_kwargs"))
    object.__setattr__(config, "hidden_sizes", tuple(config.hidden_sizes))
    for field in ("num_updates", "batch_size", "eval_episodes"):
        require_int(config, field, 1)
    for field in ("num_evals", "num_reports"):
        require_int(config, field, 0)
    if not isinstance(config.dataset_path, str):
        raise TypeError(f"dataset_path must be a string, got {config.dataset_path!r}")


SHARED_FIELDS = (
    "env_id",
    "env_kwargs",
    "batch_size",
    "network",
    "hidden_sizes",
    "activation",
    "normalize_observations",
    "learning_rate",
    "gamma",
    "tau",
)


def online_config(config: Config, Online: type, **fields):
    """The online Config (``Online``, e.g. :class:`jaxrl.algorithms.td3.Config`) with the
    offline config's networks and numbers (:data:`SHARED_FIELDS`), then ``fields``:
    the losses' settings while learning offline, and the run's (``total_timesteps``,
    ``learning_starts``, ...) when it continues online (:func:`finetune`)."""
    return Online(**{**{name: getattr(config, name) for name in SHARED_FIELDS}, **fields})


# ----------------------------------------------------------------------------- the dataset


def check_dataset(config: Config, dataset: data.Dataset) -> None:
    """Raise ValueError unless ``dataset`` fits the config's env and ``batch_size``."""
    data.check_env_dataset(dataset, config.env_id, config.env_kwargs)
    if config.batch_size > dataset.size:
        raise ValueError(f"batch_size ({config.batch_size}) must be at most the dataset's {dataset.size} transitions")


def load_config_dataset(config, algorithm: str) -> data.Dataset:
    """The dataset at ``config.dataset_path`` (:func:`jaxrl.data.load`: a jaxrl ``.npz``,
    a D4RL-style or a Minari-style HDF5 file); ValueError if unset, FileNotFoundError
    if missing."""
    if not config.dataset_path:
        raise ValueError(
            f"{algorithm}.train needs a dataset: pass one, or set dataset_path to a file "
            "(jaxrl.data.save_dataset's .npz, or a D4RL / Minari HDF5 file)"
        )
    try:
        return data.load(config.dataset_path, config.env_id, config.env_kwargs)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"dataset_path {config.dataset_path!r}: no such file") from error


def observation_stats(config, dataset: data.Dataset):
    """``dataset``'s observation statistics (:func:`jaxrl.envs.observation_stats_update`
    over all ``S`` observations: per float leaf for a structured observation), the
    ``params["obs_stats"]`` that :func:`jaxrl.algorithms.offpolicy.observe` reads."""
    spec = envs.config_spec(config)
    return envs.observation_stats_update(envs.observation_stats_init(spec.observation, spec.obs_classes), dataset.obs)


def batch(params: dict, dataset: data.Dataset, key: jax.Array, config) -> dict:
    """``batch_size`` transitions drawn uniformly with replacement from ``dataset``, as
    an online actor-critic's losses read a replay batch: ``obs`` / ``next_obs`` as the
    networks see them (standardised by ``params["obs_stats"]`` with
    ``normalize_observations``), ``action`` as stored (env units), ``reward``,
    ``discount`` (``gamma``), ``terminated`` and ``weight`` (ones), leaves ``[B, ...]``."""
    sample = data.sample(dataset, key, config.batch_size)
    transitions = {
        "obs": sample.obs,
        "action": sample.action,
        "reward": sample.reward.astype(jnp.float32),
        "discount": jnp.full(sample.reward.shape, config.gamma, jnp.float32),
        "terminated": sample.terminated,
        "next_obs": sample.next_obs,
        "weight": jnp.ones(sample.reward.shape, jnp.float32),
    }
    return offpolicy.observe_batch(params, transitions, config)


def init_networks(key: jax.Array, config, modules: dict) -> dict:
    """Parameters of each of ``modules`` (``{name: (module, reads_action)}``: a critic
    of continuous actions reads one beside the observation), from one observation and
    one unit action of zeros."""
    spec = envs.config_spec(config)
    obs = spec.zeros((1,))
    action = jnp.zeros((1, math.prod(spec.action_shape)), jnp.float32)
    keys = dict(zip(modules, jax.random.split(key, len(modules)), strict=True))
    return {
        name: module.init(keys[name], obs, *((action,) if reads_action else ()))
        for name, (module, reads_action) in modules.items()
    }


def with_obs_stats(params: dict, dataset: data.Dataset, config) -> dict:
    """``params`` plus, with ``normalize_observations``, the dataset's ``"obs_stats"``."""
    if not config.normalize_observations:
        return params
    return {**params, "obs_stats": observation_stats(config, dataset)}


# ----------------------------------------------------------------------------- the run


def step(learn: Callable) -> Callable:
    """An offline algorithm's ``step(state, key, config)`` from its ``learn(state, batch,
    key, index, config)``: one :func:`batch` from ``state.dataset``, one update, the
    ``index``-th (by default ``state.updates``; the run passes its scan counter, which
    stays unbatched under vmap, so TD3+BC's delayed actor is a real branch). Metrics add
    ``updates``, the count so far."""

    def offline_step(state, key: jax.Array, config, index=None):
        sample_key, learn_key = jax.random.split(key)
        sample = batch(state.params, state.dataset, sample_key, config)
        state, metrics = learn(state, sample, learn_key, state.updates if index is None else index, config)
        return state, {**metrics, "updates": state.updates}

    return offline_step


def algorithm(name: str, Config: type, init: Callable, act: Callable, learn: Callable, presets: dict, summary: str):
    """An offline algorithm's record from its ``init(key, config, dataset)``, ``act`` and
    ``learn(state, batch, key, index, config)``: ``update`` is ``learn`` counted from
    ``state.updates``, ``step`` and ``program`` this module's."""

    def update(state, batch: dict, key: jax.Array, config):
        """One update on ``batch`` (:func:`jaxrl.algorithms.offline.batch`'s), the
        ``state.updates``-th. Returns ``(state, metrics)``."""
        return learn(state, batch, key, state.updates, config)

    offline_step, evaluate = step(learn), evaluator(act)
    return Algorithm(
        name=name,
        Config=Config,
        init=init,
        act=act,
        initial_carry=offpolicy.initial_carry,
        update=update,
        step=offline_step,
        program=lambda config: program(config, init, offline_step, evaluate, name),
        evaluate=evaluate,
        presets=presets,
        summary=summary,
    )


def program(config, init: Callable, step: Callable, evaluate: Callable, algorithm: str) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program`: ``init(key, config, dataset)`` on its
    ``inputs`` (the dataset, read from ``config.dataset_path`` on the host unless one is
    passed in), then ``num_updates`` iterations of ``step`` (:func:`step`'s), counted in
    ``updates``."""
    return loop.config_program(
        config,
        init,
        step,
        evaluate,
        init=lambda key, dataset: init(key, config, dataset),
        iteration=lambda state, key, index: step(state, key, config, index),
        num_iterations=config.num_updates,
        counter="updates",
        budget=config.num_updates,
        inputs=functools.partial(load_config_dataset, config, algorithm),
    )


def evaluator(act: Callable) -> Callable:
    """``evaluate(params, key, config)``: deterministic episodes of ``act`` (no memory)."""
    return functools.partial(evaluation.evaluate_config, act, offpolicy.initial_carry)


# ----------------------------------------------------------------------------- offline to online


def fill_replay(buffer: replay.ReplayState, dataset: data.Dataset) -> replay.ReplayState:
    """``buffer`` (an online replay, leaves ``[R, N, ...]``) with the dataset's
    transitions added, oldest first, as rows of ``N``: the first ``S - S mod N`` of them
    (one-step targets read a transition alone, so which lane holds which does not
    matter). Where ``S`` exceeds the buffer's capacity the ring keeps the newest."""
    num_envs = buffer.num_envs
    rows = dataset.size // num_envs
    if rows == 0:
        raise ValueError(f"the dataset's {dataset.size} transitions fill no row of {num_envs} envs")
    fields = {
        name: getattr(dataset, name) for name in ("obs", "action", "reward", "terminated", "truncated", "next_obs")
    }
    example = jax.tree.map(lambda x: x[0, 0], buffer.data)
    if set(example) - set(fields):
        raise ValueError(f"the replay stores {sorted(set(example) - set(fields))}, which a dataset does not hold")
    items = jax.tree.map(
        lambda x, like: x[: rows * num_envs].reshape((rows, num_envs) + x.shape[1:]).astype(like.dtype),
        fields,
        {name: example[name] for name in fields},
    )
    return replay.add_sequence(buffer, items)


def carried_opt_state(offline_opt_state, online_opt_state):
    """The offline optimiser's state (Adam's moments and step count) under the online
    config's hyper-parameters: ``inject_hyperparams`` keeps the learning rate in the
    state, so a copied state would keep the offline run's."""
    return offline_opt_state._replace(hyperparams=online_opt_state.hyperparams)


def hand_over(online_state, state, keep_dataset: bool = True, **fields):
    """``online_state`` (the online algorithm's, freshly initialised) with the offline
    ``state``'s ``params`` (the actor, the observation statistics), ``critic_params``,
    ``target_params`` and the optimiser states the two share by name
    (:func:`carried_opt_state`; the online algorithm's others start fresh), with
    ``keep_dataset`` the dataset in its replay (:func:`fill_replay`), and ``fields``:
    other state the online algorithm takes over (SAC's ``log_alpha``)."""
    opt_state = {
        name: carried_opt_state(state.opt_state[name], online) if name in state.opt_state else online
        for name, online in online_state.opt_state.items()
    }
    return online_state.replace(
        params={**online_state.params, **state.params},
        critic_params=state.critic_params,
        target_params=state.target_params,
        opt_state=opt_state,
        buffer=fill_replay(online_state.buffer, state.dataset) if keep_dataset else online_state.buffer,
        **fields,
    )


def finetune_program(online_program: loop.Program, hand_over: Callable) -> loop.Program:
    """``online_program`` (the online algorithm's ``program(online_config)``) started from
    an offline state: its ``init(key, offline_state)`` initialises the online run, then
    ``hand_over(online_state, offline_state)`` puts the offline networks in it."""
    return online_program._replace(
        init=lambda key, offline_state: hand_over(online_program.init(key, ()), offline_state),
        inputs=loop.no_inputs,
    )


def finetune(program: loop.Program, key: jax.Array, offline_state) -> loop.TrainOutput:
    """The online run of ``program`` (:func:`finetune_program`) from ``offline_state``:
    ``jax.jit``- and ``vmap``-able as ``train`` is."""
    return loop.train(program, key, offline_state)
