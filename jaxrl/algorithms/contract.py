"""The algorithm contract in code: :class:`Algorithm`, the record every algorithm module
builds and :func:`jaxrl.algorithms.get` returns.

The runner, the command line, the benchmarks and the docs know an algorithm only through
its record: its ``Config`` class, its pure functions and its presets. An algorithm module
builds one record from its family's parts; a variant (TD3 beside DDPG, MAPPO beside IPPO)
is its base's record with its own ``Config`` and presets (:meth:`Algorithm.variant`)::

    algorithm = ddpg.algorithm.variant("td3", Config, PRESETS)

and ``td3.train``, ``td3.preset`` ... are the record's (:meth:`Algorithm.module_getattr`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from jaxrl import evaluation, loop

# The functions of the contract, in the order the docs list them.
FUNCTIONS = ("init", "act", "initial_carry", "update", "step", "evaluate", "train", "program")


@dataclasses.dataclass(frozen=True, eq=False)
class Algorithm:
    """An algorithm: its settings, its pure functions and its presets.

    Attributes:
      name: the registry and command-line name (``"ppo"``).
      Config: the frozen settings dataclass; its static fields fix the compiled program,
        the others are traced (vmappable) hyper-parameters.
      init: ``init(key, config) -> state`` (behaviour cloning: ``init(key, config,
        dataset)``), everything a run needs as one pytree; ``state.params`` is all
        ``act`` needs.
      act: ``act(params, obs, carry, key, config, deterministic=False) -> (action, carry)``.
      initial_carry: ``initial_carry(config, batch_size)``, the policy's state before an
        episode (its memory; ``()`` without one).
      update: ``update(state, batch, key, config) -> (state, metrics)``, one learner
        update from given data.
      step: ``step(state, key, config) -> (state, metrics)``, one iteration (collect,
        store, update).
      program: ``program(config) -> jaxrl.loop.Program``, the run in the pieces the
        chunked runner drives; by default :func:`jaxrl.loop.config_program` of ``init``,
        ``step`` and ``evaluate``.
      evaluate: ``evaluate(params, key, config) -> jaxrl.evaluation.EvalResult``; by
        default ``config.eval_episodes`` deterministic episodes of ``act``.
      train: ``train(key, config) -> TrainOutput``, ``init`` then every iteration of
        :attr:`program` in one scan; by default built from :attr:`program`.
      presets: ``{env_id: {field: value}}``, settings tuned for a task (each with a
        comment naming its source where it is defined).
      variants: ``{name: {field: value}}``, named settings (DQN's ``"rainbow"``), the
        command line's ``--variant``.
      summary: one line for the command line's help and the docs.
      actor_learner: the parts of a run whose actors and learner run apart
        (:class:`ActorLearner`), for envs stepped on the host; None where the
        algorithm has none. Such a run is not one compiled program (no ``train``
        under ``jit`` / ``vmap``): :func:`jaxrl.workflow.actor_learner.run` drives it.
    """

    name: str
    Config: type
    init: Callable
    act: Callable
    initial_carry: Callable
    update: Callable
    step: Callable
    program: Callable | None = None
    evaluate: Callable | None = None
    train: Callable | None = None
    presets: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    variants: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    summary: str = ""
    actor_learner: ActorLearner | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"an algorithm's name must be a Python identifier, got {self.name!r}")
        for name in FUNCTIONS:
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{self.name}: {name} must be callable, got {value!r}")
        # Built once per record, so jax.jit(record.train) meets the same function every time.
        if self.evaluate is None:
            object.__setattr__(
                self, "evaluate", functools.partial(evaluation.evaluate_config, self.act, self.initial_carry)
            )
        if self.program is None:
            object.__setattr__(self, "program", config_program(self.init, self.step, self.evaluate))
        if self.train is None:
            object.__setattr__(self, "train", train_from_program(self.program))
        object.__setattr__(self, "presets", MappingProxyType(dict(self.presets)))
        object.__setattr__(self, "variants", MappingProxyType(dict(self.variants)))

    def preset(self, env_id: str, **overrides):
        """A Config with the settings tuned for ``env_id`` (the defaults where none are
        known), then ``overrides``."""
        return self.Config(env_id=env_id, **{**self.presets.get(env_id, {}), **overrides})

    def variant(self, name: str, Config: type, presets: Mapping | None = None, **changes) -> Algorithm:
        """This algorithm under another name with its own ``Config`` (a subclass whose
        defaults, or constants, make the variant) and presets; ``changes`` replace
        functions that differ. ``train`` and ``evaluate`` are built again from a changed
        ``program`` or ``act`` / ``initial_carry`` unless ``changes`` gives them too."""
        if "program" in changes:
            changes.setdefault("train", None)
        if {"act", "initial_carry"} & changes.keys():
            changes.setdefault("evaluate", None)
        return dataclasses.replace(self, name=name, Config=Config, presets=presets or {}, **changes)

    def module_getattr(self, module: str) -> Callable[[str], Any]:
        """A module ``__getattr__`` that serves this record's attributes, so that a
        module which defines only what differs still reads as the contract
        (``td3.train``, ``td3.preset``)."""

        def __getattr__(name: str):
            if name in _RECORD_ATTRIBUTES:
                return getattr(self, name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")

        return __getattr__

    def __repr__(self) -> str:
        return f"Algorithm({self.name!r}, Config={self.Config.__module__}.{self.Config.__qualname__})"


_RECORD_ATTRIBUTES = frozenset(FUNCTIONS) | {"preset", "presets", "variants", "summary", "name", "actor_learner"}


class ActorLearner(NamedTuple):
    """An algorithm's parts for a run whose actors and learner run at the same time and
    talk through a queue of blocks and a store of versioned parameters
    (:func:`jaxrl.workflow.actor_learner.run`). An actor steps its envs with
    :attr:`policy` for ``num_steps`` steps (in a compiled scan for envs in JAX, from
    Python for host envs), and :attr:`finish` turns the rollout into the block the
    learner's :attr:`learn` takes: the lock-step algorithm's update, fed a real block.

    Attributes:
      prepare: ``prepare(config) -> config``, the settings such a run uses (IMPALA's
        emulated ``policy_lag`` is 0: the lag is real).
      learner_init: ``learner_init(key, config) -> state``, the learner's state: no envs.
      published: ``published(state) -> params``, what actors act with (IMPALA: the
        params; Ape-X: with the target network's, for the actors' priorities).
      make_env: ``make_env(config) -> (env, env_params)``, an actor's env as the
        lock-step rollout wraps it (episode statistics, action clipping).
      initial_carry: ``initial_carry(config, num_envs)``, the policy's memory.
      initial_tail: ``initial_tail(config)``, what an actor carries from one block to
        the next besides its envs (Ape-X: the steps whose n-step windows are not complete).
      policy: ``policy(params, obs, carry, key, config, actor, num_actors, timesteps)
        -> (action, carry, extras)``, one step of actor ``actor`` (an int32 scalar) of
        ``num_actors`` after ``timesteps`` of its env steps.
      finish: ``finish(tail, trajectory, params, key, config) -> (tail, block)``, the
        block of a rollout ``[num_steps, num_envs]`` (a :class:`jaxrl.types.Trajectory`).
      learn: ``learn(state, block, key, config) -> (state, metrics)``, one learner
        iteration on a block; metrics include ``timesteps`` (env steps learned from).
      block_steps: ``block_steps(config) -> int``, the env steps one block holds.
      num_iterations: ``num_iterations(config) -> int``, the blocks a run learns from.
    """

    prepare: Callable
    learner_init: Callable
    published: Callable
    make_env: Callable
    initial_carry: Callable
    initial_tail: Callable
    policy: Callable
    finish: Callable
    learn: Callable
    block_steps: Callable
    num_iterations: Callable


def config_program(init: Callable, step: Callable, evaluate: Callable) -> Callable:
    """``program(config)``: :func:`jaxrl.loop.config_program` of these functions."""

    def program(config) -> loop.Program:
        """The run as a :class:`jaxrl.loop.Program`: ``init``, then ``config.num_iterations``
        of ``step``, evaluated at ``config.num_evals`` points."""
        return loop.config_program(config, init, step, evaluate)

    return program


def train_from_program(program: Callable) -> Callable:
    """``train(key, config, inputs=None)``: ``program(config)``'s init and all its
    iterations fused into one scan (:func:`jaxrl.loop.train`). ``inputs``: the program's
    input data (a dataset), default what its ``inputs()`` reads."""

    def train(key, config, inputs=None):
        """``init``, then every iteration in one ``lax.scan``. Metric leaves are
        ``[num_iterations]``, with ``eval_return`` / ``eval_length`` NaN except at the
        ``num_evals`` evaluation points."""
        return loop.train(program(config), key, inputs)

    return train
