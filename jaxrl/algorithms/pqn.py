"""PQN: parallelised Q-learning (Gallici et al., 2024, "Simplifying Deep Temporal
Difference Learning", arXiv:2407.04811).

Q-learning with no replay buffer and no target network. Each iteration collects
``num_steps`` steps from each of ``num_envs`` vectorised envs with an epsilon-greedy
policy (epsilon annealed by the ``exploration`` part), computes Peng's Q(lambda) targets
backwards over the rollout with the params that collected it
(:func:`jaxrl.returns.q_lambda_targets`: bootstrapped through truncation from the final
observation, stopped at termination), then runs ``num_epochs`` epochs of
``num_minibatches`` minibatches of the squared TD error, as PPO runs its epochs. What
keeps it stable without a target network is LayerNorm in the network (``layer_norm``:
before each activation of the built-in torsos, after a torso of your own) and the many
decorrelated envs.

With ``memory="gru"`` / ``"lstm"`` it is recurrent PQN (purejaxql's ``pqn_rnn``), with
PPO's memory contract: the policy's carry is kept per env, reset where episodes end and
stored with each step; targets re-run the network from the stored carries, and
minibatches are sequences of ``sequence_length`` steps entered with the carry stored at
their start. ::

    config = pqn.preset("CartPole-v1")
    out = jax.jit(pqn.train)(jax.random.key(0), config)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, evaluation, loop, networks, optim, returns, rollout
from jaxrl.algorithms import dqn, offpolicy, onpolicy, requirements
from jaxrl.algorithms.contract import Algorithm
from jaxrl.config import (
    check_traced_parts,
    choose_part,
    freeze_mapping,
    require_choice,
    require_int,
    require_range,
    static,
)
from jaxrl.exploration import EpsilonGreedy
from jaxrl.networks import QNetwork, resolve_torso
from jaxrl.rollout import masked_mean
from jaxrl.types import Trajectory


@struct.dataclass
class Config:
    """PQN settings (defaults: purejaxql's CartPole-v1 PQN, ``config/alg/pqn_cartpole.yaml``).
    Static fields fix the program; the rest, the ``exploration`` part's numbers included,
    can be traced and vmapped."""

    # --- static: environment and program structure
    env_id: str = static("CartPole-v1")
    env_kwargs: Any = static(())  # EnvParams overrides
    num_envs: int = static(32)
    num_steps: int = static(64)  # rollout length per env per iteration
    num_epochs: int = static(4)  # passes over each rollout
    num_minibatches: int = static(16)  # per epoch
    total_timesteps: int = static(500_000)
    network: Any = static("mlp")  # a shorthand or your torso (networks.resolve_torso), or networks.Whole
    hidden_sizes: tuple = static((256, 256))
    activation: str = static("relu")
    layer_norm: bool = static(True)  # before each activation of the torso (after a torso of your own)
    memory: str = static("none")  # "gru" or "lstm": recurrent PQN
    memory_size: int = static(128)  # the recurrent core's units
    sequence_length: int = static(0)  # recurrent minibatches' sequences (0: the whole rollout); divides num_steps
    anneal_lr: bool = static(True)  # linearly to 0 over the run
    num_evals: int = static(10)
    eval_episodes: int = static(10)
    num_reports: int = static(50)
    # --- parts (jaxrl.config.part): the class fixes the program, the numbers are traced
    exploration: Any = EpsilonGreedy(start=1.0, end=0.2, fraction=0.2)  # per env step of the run
    # --- traced hyper-parameters
    learning_rate: float = 1e-4
    gamma: float = 0.99
    lambda_: float = 0.95  # Q(lambda)'s: 0 is one-step Q-learning, 1 Monte Carlo to the rollout's end
    reward_scale: float = 0.1  # rewards are multiplied by it in the targets
    max_grad_norm: float = 10.0

    def __post_init__(self):
        object.__setattr__(self, "env_kwargs", freeze_mapping(self.env_kwargs, "env_kwargs"))
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for field in ("num_envs", "num_steps", "num_epochs", "num_minibatches", "eval_episodes", "memory_size"):
            require_int(self, field, 1)
        for field in ("num_evals", "num_reports", "sequence_length"):
            require_int(self, field, 0)
        require_choice(self, "memory", networks.MEMORY_KINDS)
        require_choice(self, "layer_norm", (True, False))
        choose_part(self, "exploration", {"epsilon_greedy": EpsilonGreedy})
        require_int(self, "total_timesteps", self.num_envs * self.num_steps)
        if self.sequence_length and self.num_steps % self.sequence_length:
            raise ValueError(
                f"sequence_length ({self.sequence_length}) must divide num_steps ({self.num_steps}): "
                "each env's rollout is cut into whole sequences"
            )
        length = (self.sequence_length or self.num_steps) if self.recurrent else 1  # steps per minibatch row
        rows = self.num_envs * self.num_steps // length
        if rows % self.num_minibatches:
            what = "sequences (num_envs * num_steps / sequence_length)" if self.recurrent else "num_envs * num_steps"
            raise ValueError(f"num_minibatches ({self.num_minibatches}) must divide the rollout's {rows} {what}")
        spec = envs.config_spec(self)
        requirements.refuse_multi_discrete(spec, self.env_id, "pqn")
        if not spec.discrete:
            raise ValueError(
                f"PQN needs a discrete action space; env_id {self.env_id!r} has a continuous (Box) action "
                f"space of shape {spec.action_shape} (use SAC, TD3 or DDPG)"
            )
        if self.recurrent:  # a padding step would carry one episode's memory into the next
            requirements.require_transitions_only(self, f"pqn with memory={self.memory!r}")
        networks.require_network(self, spec, check_whole_network)

    @property
    def recurrent(self) -> bool:
        return self.memory != "none"

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // (self.num_envs * self.num_steps)

    def check_traced(self) -> None:
        """ValueErrors for traced hyper-parameters out of range (skipped while tracing)."""
        require_range(self, "learning_rate", 0.0, float("inf"), low_open=True)
        require_range(self, "max_grad_norm", 0.0, float("inf"), low_open=True)
        require_range(self, "gamma", 0.0, 1.0)
        require_range(self, "lambda_", 0.0, 1.0)
        require_range(self, "reward_scale", 0.0, float("inf"), low_open=True)
        check_traced_parts(self)


PRESETS = {
    "CartPole-v1": {},  # the defaults: purejaxql's config/alg/pqn_cartpole.yaml
    # purejaxql's config/alg/pqn_minatar.yaml (128 envs x 32 steps, 2 epochs of 32
    # minibatches, epsilon 1 -> 0.05 over a tenth of the run, learning rate 5e-4, lambda
    # 0.65, LayerNorm) with its MinAtar network: one 3x3 convolution of 16 filters and a
    # dense layer of 128, each normalised; rewards unscaled.
    **{
        f"{game}-MinAtar": dict(
            network="cnn",
            hidden_sizes=(128,),
            num_envs=128,
            num_steps=32,
            num_epochs=2,
            num_minibatches=32,
            total_timesteps=10_000_000,
            exploration=EpsilonGreedy(start=1.0, end=0.05, fraction=0.1),
            learning_rate=5e-4,
            lambda_=0.65,
            reward_scale=1.0,
        )
        for game in ("Asterix", "Breakout", "Freeway", "SpaceInvaders")
    },
}


@struct.dataclass
class State:
    params: dict  # {"network": flax params}: all ``act`` needs
    opt_state: Any
    env_state: Any  # batched env state [num_envs]
    obs: Any  # [num_envs, *obs_shape]
    carry: Any  # the policy's memory for ``obs``, leaves [num_envs, ...]; () without memory
    timesteps: jax.Array  # int32 env steps so far


# ----------------------------------------------------------------------------- set-up


def check_whole_network(config: Config, spec) -> None:
    """A whole Q-network (:class:`jaxrl.networks.Whole`) is called ``network(obs) -> q
    [..., A]``, feed-forward, and brings its own normalisation (``layer_norm=False``)."""
    networks.refuse_head_options({"memory": config.recurrent, "layer_norm (put LayerNorm in it)": config.layer_norm})
    module = networks.user_module(config.network.network, spec)
    shape = networks.PROBE_DIMS + (spec.num_actions,)
    networks.check_call(
        module, (networks.probe_batch(spec.observation),), [shape], f"network(obs) -> q [..., {spec.num_actions}]"
    )


def make_network(config: Config) -> QNetwork:
    """The Q-network: the torso (normalised with ``layer_norm``), a recurrent core with
    ``memory``, a linear output per action."""
    spec = envs.config_spec(config)
    if isinstance(config.network, networks.Whole):
        return networks.WholeQ(networks.user_module(config.network.network, spec))
    return QNetwork(
        num_actions=spec.num_actions,
        network=resolve_torso(config.network, spec),
        hidden_sizes=config.hidden_sizes,
        activation=config.activation,
        obs_ndim=spec.obs_ndim,
        layer_norm=config.layer_norm,
        memory=config.memory,
        memory_size=config.memory_size,
    )


def make_env(config: Config):
    """The training env, with episode statistics."""
    env, env_params = envs.make_config_env(config)
    return envs.EpisodeStatistics(env), env_params


def updates_per_iteration(config: Config) -> int:
    return config.num_epochs * config.num_minibatches


def make_optimizer(config: Config) -> optax.GradientTransformation:
    """Global-norm clipping then RAdam (purejaxql's), the learning rate annealed linearly
    to 0 over the run's updates with ``anneal_lr``."""
    num_updates = config.num_iterations * updates_per_iteration(config)

    def learning_rate(count):
        if not config.anneal_lr:
            return config.learning_rate
        return config.learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.inject_hyperparams(optax.radam)(learning_rate=learning_rate),
    )


def initial_carry(config: Config, batch_size: int):
    """The policy's memory before an episode's first step: zeros, leaves ``[batch_size,
    memory_size]``; ``()`` without memory."""
    return networks.initial_carry(config.memory, config.memory_size, batch_size)


def init(key: jax.Array, config: Config) -> State:
    """The Q-network, its optimiser and ``num_envs`` reset envs."""
    config.check_traced()
    params_key, env_key = jax.random.split(key)
    env, env_params = make_env(config)
    obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
    example = jax.tree.map(lambda x: x[:1], obs)
    carry = initial_carry(config, config.num_envs)
    network = make_network(config)
    if config.recurrent:
        network_params = network.init(params_key, offpolicy.add_time(example), carry=initial_carry(config, 1))
    else:
        network_params = network.init(params_key, example)
    return State(
        params={"network": network_params},
        opt_state=make_optimizer(config).init(network_params),
        env_state=env_state,
        obs=obs,
        carry=carry,
        timesteps=jnp.zeros((), jnp.int32),
    )


# ----------------------------------------------------------------------------- acting


def q_values(network_params, obs, config: Config, carry=(), reset=None):
    """``(q, carry)``: action values ``[..., A]`` at observations ``[..., *obs_shape]``;
    recurrent, ``obs [T, B, ...]`` is a sequence entered with ``carry`` (leaves ``[B,
    ...]``), ``reset [T, B]`` (default none) marking the steps that begin an episode, and
    ``carry`` is returned after its last step."""
    network = make_network(config)
    if not config.recurrent:
        return network.apply(network_params, obs, deterministic=True), carry
    return network.apply(network_params, obs, deterministic=True, carry=carry, reset=reset)


def act(params: dict, obs, carry, key: jax.Array, config: Config, deterministic: bool = False, epsilon=0.0):
    """``(action [B], carry)`` for observations ``[B, *obs_shape]`` and the policy's
    memory ``carry`` (:func:`initial_carry`'s; the caller resets it where an episode
    ends): greedy in the Q-values (never a forbidden action), each action replaced with
    probability ``epsilon`` (a scalar or ``[B]``; off if ``deterministic``) by a uniformly
    random allowed one (:func:`jaxrl.algorithms.dqn.epsilon_greedy`)."""
    if config.recurrent:
        q, carry = q_values(params["network"], offpolicy.add_time(obs), config, carry)
        q = q[0]
    else:
        q, carry = q_values(params["network"], obs, config, carry)
    keys = jax.random.split(key)
    return dqn.epsilon_greedy(q, obs, keys, config, deterministic, epsilon), carry


def epsilon(timesteps: jax.Array, config: Config) -> jax.Array:
    """Each env's exploration rate ``[num_envs]`` after ``timesteps`` env steps."""
    return config.exploration.epsilons(timesteps, config.total_timesteps, config.num_envs)


def collect(state: State, key: jax.Array, config: Config):
    """``num_steps`` epsilon-greedy steps in each env with ``state.params``. The
    trajectory's ``extras["carry"]`` holds the memory entering each step (``()``
    without memory). Returns ``(state, trajectory)``, the envs, memory and
    ``timesteps`` advanced."""
    env, env_params = make_env(config)
    lane_epsilon = epsilon(state.timesteps, config)

    def policy(obs, carry, policy_key):
        action, next_carry = act(state.params, obs, carry, policy_key, config, epsilon=lane_epsilon)
        return action, next_carry, {"carry": carry}

    trajectory, env_state, obs, carry = rollout.collect(
        env, env_params, policy, state.env_state, state.obs, key, config.num_steps, state.carry
    )
    state = state.replace(
        env_state=env_state,
        obs=obs,
        carry=carry,
        timesteps=state.timesteps + config.num_envs * config.num_steps,
    )
    return state, trajectory


# ----------------------------------------------------------------------------- learning


def next_q_values(network_params, trajectory: Trajectory, config: Config) -> jax.Array:
    """The action values ``[T, N, A]`` of each step's next observation (the final one
    where an episode ended); recurrent, with the memory the policy had after the step:
    the stored carry entering it, advanced through ``obs[t]`` then ``next_obs[t]`` (all
    steps at once, as a batch of two-step sequences)."""
    if not config.recurrent:
        return q_values(network_params, trajectory.next_obs, config)[0]
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    obs = jax.tree.map(lambda a, b: jnp.stack([flat(a), flat(b)]), trajectory.obs, trajectory.next_obs)
    q = q_values(network_params, obs, config, jax.tree.map(flat, trajectory.extras["carry"]))[0][1]
    return q.reshape(trajectory.reward.shape + q.shape[-1:])


def targets(network_params, trajectory: Trajectory, config: Config) -> jax.Array:
    """Q(lambda) targets ``[T, N]`` of a rollout (:func:`jaxrl.returns.q_lambda_targets`)
    under ``network_params``, on rewards times ``reward_scale``; forbidden actions never
    bootstrap."""
    q_next = dqn.allowed(next_q_values(network_params, trajectory, config), trajectory.next_obs, config)
    reward = config.reward_scale * trajectory.reward
    return returns.q_lambda_targets(
        reward, q_next, trajectory.terminated, trajectory.truncated, config.gamma, config.lambda_
    )


def minibatch_rows(trajectory: Trajectory, target: jax.Array, config: Config) -> dict:
    """What the epochs shuffle: transitions (leaves ``[T * N, ...]``) or, recurrent,
    sequences of ``sequence_length`` steps of one env (leaves ``[N * T / L, L, ...]``)
    with the memory stored at their start (``carry``) and the steps that begin an
    episode (``reset``)."""
    batch = {"obs": trajectory.obs, "action": trajectory.action, "target": target}
    if trajectory.valid is not None:
        batch["valid"] = trajectory.valid
    # PPO's rows, chosen by ``memory``: transitions, or sequences entered with their carry
    return onpolicy.data_path(config).minibatch_rows(batch, trajectory, config.sequence_length or config.num_steps)


def rows_q_values(network_params, rows: dict, config: Config) -> jax.Array:
    """The action values of the rows' observations, shaped like the rows (``[B, A]``, or
    ``[B, L, A]`` for sequences)."""
    if not config.recurrent:
        return q_values(network_params, rows["obs"], config)[0]
    time_major = offpolicy.time_major
    obs = jax.tree.map(time_major, rows["obs"])
    return time_major(q_values(network_params, obs, config, rows["carry"], time_major(rows["reset"]))[0])


def loss_fn(network_params, rows: dict, config: Config):
    """Half the squared error between the Q-value of each row's action and its target,
    averaged over the rows (an env's padding steps left out): ``(loss, metrics)``."""
    q = rows_q_values(network_params, rows, config)
    q_taken = jnp.take_along_axis(q, rows["action"][..., None], axis=-1)[..., 0]
    error = rows["target"] - q_taken
    valid = rows.get("valid")
    loss = 0.5 * masked_mean(jnp.square(error), valid)
    return loss, {"loss": loss, "q_mean": masked_mean(q_taken, valid), "td_abs": masked_mean(jnp.abs(error), valid)}


def update(state: State, trajectory: Trajectory, key: jax.Array, config: Config):
    """The learner's work on one rollout: :func:`targets` under the params that collected
    it, then ``num_epochs`` epochs of ``num_minibatches`` shuffled minibatches
    (:func:`jaxrl.algorithms.onpolicy.shuffled_minibatches`) of :func:`loss_fn`. Returns
    ``(state, metrics)``, the metrics averaged over the minibatches."""
    rows = minibatch_rows(trajectory, targets(state.params["network"], trajectory, config), config)
    optimizer = make_optimizer(config)

    def minibatch_step(carry, minibatch):
        network_params, opt_state = carry
        network_params, opt_state, _, metrics = optim.step(
            optimizer, loss_fn, network_params, opt_state, minibatch, config
        )
        return (network_params, opt_state), metrics

    def epoch(carry, epoch_key):
        return jax.lax.scan(
            minibatch_step, carry, onpolicy.shuffled_minibatches(epoch_key, rows, config.num_minibatches)
        )

    carry = (state.params["network"], state.opt_state)
    (network_params, opt_state), metrics = jax.lax.scan(epoch, carry, jax.random.split(key, config.num_epochs))
    state = state.replace(params={**state.params, "network": network_params}, opt_state=opt_state)
    return state, jax.tree.map(jnp.mean, metrics)


def step(state: State, key: jax.Array, config: Config):
    """One iteration: :func:`collect` then :func:`update`. Metrics: the update's, the
    finished episodes', ``epsilon`` (the collecting one), ``learning_rate`` (the last
    update's) and ``timesteps``."""
    collect_key, update_key = jax.random.split(key)
    lane_epsilon = epsilon(state.timesteps, config)
    state, trajectory = collect(state, collect_key, config)
    state, metrics = update(state, trajectory, update_key, config)
    metrics.update(
        rollout.episode_metrics(trajectory),
        epsilon=jnp.mean(lane_epsilon),
        learning_rate=onpolicy.current_learning_rate(state.opt_state),
        timesteps=state.timesteps,
    )
    return state, metrics


def evaluate(params: dict, key: jax.Array, config: Config) -> evaluation.EvalResult:
    """Greedy returns of ``eval_episodes`` episodes."""
    return evaluation.evaluate_config(act, initial_carry, params, key, config)


def program(config: Config) -> loop.Program:
    """The run as a :class:`jaxrl.loop.Program`: ``init``, then ``num_iterations`` of
    :func:`step`, evaluated greedily at ``num_evals`` points."""
    return loop.config_program(
        config,
        init,
        step,
        evaluate,
        resumable=not envs.steps_on_host(config.env_id),
        restart_envs=lambda state, key: rollout.restart(state, *make_env(config), key, config.num_envs),
    )


algorithm = Algorithm(
    "pqn",
    Config,
    init,
    act,
    initial_carry,
    update,
    step,
    program=program,
    evaluate=evaluate,
    presets=PRESETS,
    summary="Parallelised Q-learning: Q(lambda) on vectorised envs with LayerNorm, no replay, no target network",
)
__getattr__ = algorithm.module_getattr(__name__)  # pqn.train, pqn.preset: the record's
