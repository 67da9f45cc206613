"""Behaviour cloning: supervised learning of a policy from a dataset of transitions.

Discrete actions: a categorical policy trained by cross-entropy on the recorded
actions. Continuous actions, by ``loss``: ``"mse"`` regresses a deterministic policy
(tanh output mapped onto the action bounds) onto the actions; ``"gaussian"`` maximises
the likelihood of a diagonal Gaussian with state-dependent scale and acts with its
mean when deterministic. Each iteration is one Adam step on a minibatch drawn
uniformly with replacement from the dataset. Observations are optionally normalised
by the dataset's mean and standard deviation, kept in ``params``. Structured (dict /
tuple) observations work as everywhere else: each leaf is encoded, float leaves are
normalised by their own statistics, and an action mask (``obs["action_mask"]``) masks
the logits both when acting and in the loss, so a masked action is never taken.

The dataset is data, not config: pass it to ``init`` / ``train`` (or name a file
written by :func:`jaxrl.data.save_dataset` in ``config.dataset_path``)::

    dataset = data.load_dataset("cartpole.npz", env_id="CartPole-v1")
    config = bc.Config(env_id="CartPole-v1")
    out = jax.jit(bc.train)(jax.random.key(0), config, dataset)
    out.metrics["eval_return"]   # [num_updates], NaN where no evaluation ran
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import data, envs, evaluation, loop, optim
from jaxrl.algorithms import offline, requirements
from jaxrl.algorithms.contract import Algorithm
from jaxrl.algorithms.offpolicy import initial_carry
from jaxrl.config import require_choice, require_range, static
from jaxrl.distributions import Categorical, Normal, mask_actions
from jaxrl.networks import Actor, require_network, resolve_torso


@struct.dataclass
class Config:
    """BC settings. Static fields fix the program; ``learning_rate`` can be traced and vmapped."""

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())  # EnvParams overrides for evaluation
    dataset_path: str = static("")  # file train() loads when given no dataset: .npz, D4RL / Minari HDF5 (data.load)
    num_updates: int = static(5_000)  # gradient steps (one per iteration)
    batch_size: int = static(256)
    loss: str = static("mse")  # continuous actions: "mse" or "gaussian"; discrete: cross-entropy
    network: Any = static("mlp")  # a shorthand or your torso: networks.resolve_torso
    hidden_sizes: tuple = static((64, 64))
    activation: str = static("relu")
    normalize_observations: bool = static(True)  # by the dataset's statistics, kept in params
    num_evals: int = static(10)  # deterministic evaluations over the run
    eval_episodes: int = static(10)
    num_reports: int = static(50)  # `train`'s progress reports (the runner reports between chunks)
    # --- traced hyper-parameters
    learning_rate: float = 1e-3

    def __post_init__(self):
        offline.check_run_fields(self)
        require_choice(self, "loss", ("mse", "gaussian"))
        spec = env_spec(self)
        require_network(self, spec)
        requirements.refuse_multi_discrete(spec, self.env_id, "bc")
        if not spec.discrete and len(spec.action_shape) != 1:
            raise ValueError(f"BC needs flat continuous actions, {self.env_id} has action shape {spec.action_shape}")


PRESETS = {}


@struct.dataclass
class State:
    params: dict  # {"network": flax params, "obs_stats": RunningStats of the dataset}
    opt_state: Any
    dataset: data.Dataset  # the [S, ...] transitions minibatches are drawn from
    updates: jax.Array  # int32 gradient steps taken so far


# ----------------------------------------------------------------------------- set-up


def env_spec(config: Config) -> envs.EnvSpec:
    return envs.config_spec(config)


def make_network(config: Config) -> Actor:
    """Logits (discrete), a tanh action in [-1, 1] (``"mse"``) or ``(loc, log_std)``
    (``"gaussian"``), each ``[..., action_dim]``."""
    spec = env_spec(config)
    if spec.discrete:
        action_dim, kind = spec.num_actions, "categorical"
    else:
        action_dim, kind = spec.action_shape[0], "deterministic" if config.loss == "mse" else "gaussian"
    return Actor(
        action_dim=action_dim,
        kind=kind,
        network=resolve_torso(config.network, spec),
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=spec.obs_ndim,
    )


def make_optimizer(config: Config) -> optax.GradientTransformation:
    # A schedule, not a number: inject_hyperparams keeps numbers in the optimiser state
    # from init, whereas a schedule is re-read at each update, so ``update`` always
    # steps at the learning rate of the config it is given.
    return optax.inject_hyperparams(optax.adam)(learning_rate=lambda count: config.learning_rate)


def check_dataset(config: Config, dataset: data.Dataset) -> None:
    """Raise ValueError unless ``dataset`` fits the config's env and ``batch_size``."""
    data.check_env_dataset(dataset, config.env_id, config.env_kwargs)
    if config.batch_size > dataset.size:
        raise ValueError(f"batch_size ({config.batch_size}) must be at most the dataset's {dataset.size} transitions")


def init(key: jax.Array, config: Config, dataset: data.Dataset) -> State:
    """Network, optimiser and observation statistics of ``dataset`` (leaves ``[S, ...]``;
    per float leaf for a structured observation, see :func:`jaxrl.envs.observation_stats_init`)."""
    require_range(config, "learning_rate", 0.0, float("inf"), low_open=True)
    check_dataset(config, dataset)
    spec = env_spec(config)
    params = {
        "network": make_network(config).init(key, spec.zeros((1,))),
        "obs_stats": envs.observation_stats_update(
            envs.observation_stats_init(spec.observation, spec.obs_classes), dataset.obs
        ),
    }
    return State(
        params=params,
        opt_state=make_optimizer(config).init(params["network"]),
        dataset=dataset,
        updates=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


def _network_output(params: dict, obs, config: Config):
    """The network's output on raw observations (leaves ``[B, ...]``), logits masked
    where the env gives an action mask."""
    raw_obs = obs
    if config.normalize_observations:
        obs = envs.normalize_observation(params["obs_stats"], obs)
    output = make_network(config).apply(params["network"], obs)
    if env_spec(config).action_mask:
        output = mask_actions(output, raw_obs[envs.ACTION_MASK])
    return output


def _gaussian(output) -> Normal:
    loc, log_std = output
    return Normal(loc, jnp.exp(log_std))


def act(params: dict, obs: jax.Array, carry, key: jax.Array, config: Config, deterministic: bool = False):
    """``(action [B, ...], carry)`` for raw observations ``[B, *obs_shape]`` (a pytree
    of ``[B, ...]`` leaves if structured).

    Samples from the policy, or takes its mode if ``deterministic`` (the ``"mse"``
    policy is deterministic either way); continuous actions are clipped to the bounds,
    and discrete ones are never actions the observation's mask forbids.
    The policy has no memory: ``carry`` (:func:`initial_carry`: ``()``) is passed through.
    """
    output = _network_output(params, obs, config)
    spec = env_spec(config)
    if spec.discrete:
        distribution = Categorical(output)
        return (distribution.mode() if deterministic else distribution.sample(key)), carry
    if config.loss == "mse":
        action = spec.from_unit(output)
    else:
        distribution = _gaussian(output)
        action = distribution.mode() if deterministic else distribution.sample(key)
    return jnp.clip(action, spec.action_low, spec.action_high), carry


# ----------------------------------------------------------------------------- learning


def loss_fn(network_params, obs_stats, batch: data.Dataset, config: Config):
    """BC loss on a batch (``obs [B, *obs_shape]`` or a pytree of ``[B, ...]``
    leaves, ``action [B, ...]``); returns ``(loss, metrics)``.

    Discrete: mean cross-entropy ``-log pi(a|s)``, with the batch ``accuracy`` of the
    policy's mode. With an action mask ``pi`` is the masked policy that acts, a softmax
    over the allowed actions only: the expert never took a masked action, so pushing
    those logits down would spend capacity on what the mask already rules out.
    ``"mse"``: mean over batch and action dims of ``(pi(s) - a)^2``. ``"gaussian"``:
    mean negative log-likelihood ``-log N(a; mu(s), sigma(s))``, summed over action
    dims.
    """
    output = _network_output({"network": network_params, "obs_stats": obs_stats}, batch.obs, config)
    spec = env_spec(config)
    if spec.discrete:
        distribution = Categorical(output)
        loss = -jnp.mean(distribution.log_prob(batch.action))
        return loss, {"loss": loss, "accuracy": jnp.mean(distribution.mode() == batch.action)}
    if config.loss == "mse":
        loss = jnp.mean(jnp.square(spec.from_unit(output) - batch.action))
    else:
        loss = -jnp.mean(_gaussian(output).log_prob(batch.action))
    return loss, {"loss": loss}


def update(state: State, batch: data.Dataset, key: jax.Array, config: Config):
    """One Adam step on ``batch`` (a :class:`jaxrl.data.Dataset` of ``[B, ...]``
    leaves; only ``obs`` and ``action`` are read). ``key`` is unused: the loss is
    deterministic. Returns ``(state, metrics)``."""
    del key
    network_params, opt_state, _, metrics = optim.step(
        make_optimizer(config),
        loss_fn,
        state.params["network"],
        state.opt_state,
        state.params["obs_stats"],
        batch,
        config,
    )
    state = state.replace(
        params={**state.params, "network": network_params}, opt_state=opt_state, updates=state.updates + 1
    )
    return state, metrics


def step(state: State, key: jax.Array, config: Config):
    """One iteration: draw ``batch_size`` transitions uniformly with replacement from
    ``state.dataset``, then :func:`update`. Metrics add ``updates``, the step count."""
    sample_key, update_key = jax.random.split(key)
    state, metrics = update(state, data.sample(state.dataset, sample_key, config.batch_size), update_key, config)
    return state, {**metrics, "updates": state.updates}


# ----------------------------------------------------------------------------- training


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Deterministic returns of ``eval_episodes`` episodes on the config's env."""
    return evaluation.evaluate_config(act, initial_carry, params, key, config)


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program`: ``init`` on its ``inputs`` (the dataset,
    read from ``config.dataset_path`` on the host unless one is passed in) then
    ``num_updates`` of :func:`step`, counted in ``updates``."""
    return loop.config_program(
        config,
        init,
        step,
        evaluate,
        init=lambda key, dataset: init(key, config, dataset),
        num_iterations=config.num_updates,
        counter="updates",
        budget=config.num_updates,
        inputs=functools.partial(offline.load_config_dataset, config, "bc"),
    )


algorithm = Algorithm(
    name="bc",
    Config=Config,
    init=init,
    act=act,
    initial_carry=initial_carry,
    update=update,
    step=step,
    program=program,
    evaluate=evaluate,
    presets=PRESETS,
    summary="Behaviour cloning: supervised learning of a recorded dataset's actions",
)
__getattr__ = algorithm.module_getattr(__name__)  # bc.train, bc.preset: the record's
