"""A saved run's policies: rebuild the run from its directory, then evaluate its
policies, record datasets with them or render their episodes.

A run directory written by :func:`jaxrl.workflow.runner.run` (``--logdir``) holds ``run.json``
(the algorithm, its config's fields, seeds) and, where it was trained with
``checkpoint_every``, ``checkpoints/``. :func:`load` rebuilds the algorithm's Config
from ``run.json`` and restores a checkpoint's state, leaves ``[lanes, ...]`` (one lane
per seed, per setting and seed for a sweep, per member for :func:`jaxrl.workflow.pbt.train`)::

    from jaxrl.workflow import saved

    run = saved.load("runs/ppo-cartpole")                 # the latest checkpoint
    result = saved.evaluate(run, run.eval_keys())         # the run's final evaluation, again
    result.returns.mean(axis=1)                           # [lanes]
    dataset = saved.record(run, jax.random.key(0), num_steps=10_000, num_envs=10)
    expert = saved.part(run, 0.7, num_envs=10)                        # a mixture's part
    mixed = data.collect_mixture([expert, data.random_part(run.env_id, 0.3)], run.env_id, key, 10_000, 10)
    frames, episode_return, fps = saved.render_episode(run, lane=0)     # Gymnasium envs

Errors a user can make (no ``run.json``, no checkpoints, an unknown step) are
``ValueError`` / ``FileNotFoundError`` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import data, envs, evaluation, loop
from jaxrl.config import from_json
from jaxrl.workflow import rundir

if TYPE_CHECKING:  # importing the algorithms starts JAX's backends (see jaxrl/__init__.py)
    from jaxrl.algorithms import Algorithm


@dataclasses.dataclass
class SavedRun:
    """A run restored from its directory by :func:`load`.

    Attributes:
      logdir: the run's directory.
      algorithm / record: the algorithm's name and record (:func:`jaxrl.algorithms.get`).
      config: its Config, rebuilt from ``run.json``.
      meta: ``run.json``'s contents.
      lanes: the leading axis of ``state``: ``seeds`` (times the settings of a sweep;
        the members of a population-based training run).
      step: the checkpoint's step, the iterations the run had completed.
      state: the training state at that step, leaves ``[lanes, ...]``.
      run_keys: ``[lanes]`` keys iteration ``i`` drew its keys from (``fold_in(run_key, i)``).
      history: ``{metric: [lanes, rows]}`` logged up to the checkpoint (``iteration``
        included), or ``{}``.
    """

    logdir: str
    algorithm: str
    record: Algorithm
    config: Any
    meta: dict
    lanes: int
    step: int
    state: Any
    run_keys: jax.Array
    history: dict

    @property
    def env_id(self) -> str:
        return self.config.env_id

    def params(self, lane: int):
        """Lane ``lane``'s policy parameters (``state.params`` without the lane axis)."""
        if not 0 <= lane < self.lanes:
            raise ValueError(f"the run has {self.lanes} policies (0 to {self.lanes - 1}), got {lane}")
        return jax.tree.map(lambda x: x[lane], self.state.params)

    def evaluated_at_step(self) -> bool:
        """Whether the run evaluated after the checkpoint's last iteration (``step - 1``),
        the policy the checkpoint holds: always at the end of a run that evaluates."""
        program = self.record.program(self.config)
        return bool(program.num_evals) and bool(
            loop.is_checkpoint(self.step - 1, program.num_iterations, program.num_evals)
        )

    def eval_keys(self) -> jax.Array:
        """``[lanes]`` keys of an evaluation after the checkpoint's last iteration, as
        :func:`jaxrl.loop.iterate` draws them: where the run evaluated there
        (:meth:`evaluated_at_step`), the keys of that evaluation."""
        index = self.step - 1
        return jax.vmap(lambda key: jax.random.split(jax.random.fold_in(key, index))[1])(self.run_keys)

    def logged_eval_return(self) -> np.ndarray:
        """``[lanes]`` each lane's latest finite ``eval_return`` in the history (NaN if none)."""
        from jaxrl.workflow.metrics import latest_finite

        if "eval_return" not in self.history:
            return np.full(self.lanes, np.nan)
        return latest_finite(self.history["eval_return"])


# ----------------------------------------------------------------------------- loading


def read_run(logdir: str | os.PathLike) -> tuple[Algorithm, Any, dict]:
    """``(record, config, meta)`` of the run in ``logdir``, from its ``run.json``."""
    from jaxrl import algorithms

    logdir = os.fspath(logdir)
    if not os.path.isdir(logdir):
        raise FileNotFoundError(f"no run directory {logdir!r}")
    path = os.path.join(logdir, "run.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{logdir!r} holds no run: it has no run.json (write runs with --logdir)")
    try:
        with open(path) as f:
            meta = json.load(f)
        name, fields = meta["algorithm"], meta["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a run's run.json: {type(error).__name__}: {error}") from None
    record = algorithms.get(name)
    return record, config_from_fields(record.Config, fields, path), meta


def config_from_fields(config_cls, fields: dict, source: str = "run.json"):
    """A Config from its fields as JSON gave them back (see :func:`jaxrl.workflow.rundir.meta`):
    lists become tuples again (``hidden_sizes``, ``env_kwargs``' pairs), parts are rebuilt
    (:func:`jaxrl.config.from_json`), fields left out of the meta
    (:data:`jaxrl.workflow.rundir.NOT_IN_META`) keep their defaults."""
    known = {field.name for field in dataclasses.fields(config_cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"{source}: config field(s) {unknown} are not fields of {config_cls.__module__}.Config "
            f"(a run saved by another jaxrl version?)"
        )
    try:
        return config_cls(**{name: from_json(value) for name, value in fields.items()})
    except (TypeError, ValueError, ImportError, AttributeError) as error:
        raise ValueError(f"{source}: its config does not build: {error}") from None


def checkpoint_steps(logdir: str | os.PathLike) -> list[int]:
    """The checkpoint steps saved in ``logdir`` (ValueError if there are none)."""
    from jaxrl.workflow.checkpoint import Checkpoints

    directory = os.path.join(os.fspath(logdir), "checkpoints")
    steps = []
    if os.path.isdir(directory):
        with Checkpoints(directory) as checkpoints:
            steps = checkpoints.steps()
    if not steps:
        raise ValueError(f"{os.fspath(logdir)!r} has no checkpoints: train the run with --checkpoint-every")
    return steps


def load(logdir: str | os.PathLike, checkpoint: str | int = "latest") -> SavedRun:
    """The run in ``logdir`` at a checkpoint: ``"latest"``, ``"best"`` (the highest
    evaluation return, mean over lanes) or a step (iterations completed)."""
    from jaxrl.workflow.checkpoint import Checkpoints

    logdir = os.fspath(logdir)
    record, config, meta = read_run(logdir)
    steps = checkpoint_steps(logdir)
    with Checkpoints(os.path.join(logdir, "checkpoints")) as checkpoints:
        if checkpoint == "latest":
            step = None  # the newest that reads whole
        elif checkpoint == "best":
            step = checkpoints.best_step()
            if step is None:
                raise ValueError(f"no checkpoint of {logdir!r} has an evaluation return to rank it by")
        elif isinstance(checkpoint, int) and not isinstance(checkpoint, bool):
            if checkpoint not in steps:
                raise ValueError(f"{logdir!r} has no checkpoint at step {checkpoint}; its steps: {steps}")
            step = checkpoint
        else:
            raise ValueError(f"checkpoint must be 'latest', 'best' or a step (an int), got {checkpoint!r}")
        population = meta.get("pbt")  # a population of jaxrl.workflow.pbt: its members are the lanes
        lanes = population["population"] if population else int(meta.get("seeds", 1)) * _settings(meta)
        template = _template(record, config, lanes)
        if population:  # pbt.train's checkpointed tree, its member states as the runner's lanes
            values = {field: np.zeros(lanes, np.float32) for field in population["bounds"]}
            template = {
                "states": template["state"],
                "values": values,
                "run_keys": template["run_keys"],
                "pbt_key": template["run_keys"][0],
            }
        expect = rundir.meta(meta["algorithm"], config)
        tree, history, saved_meta = checkpoints.restore(template, step, expect_meta=expect)
        step = int(saved_meta["step"])
        if population:
            tree = {"state": tree["states"], "run_keys": tree["run_keys"]}
    history = {k: v for k, v in (history or {}).items() if not k.startswith("pbt_")}
    return SavedRun(
        logdir=logdir,
        algorithm=meta["algorithm"],
        record=record,
        config=config,
        meta=meta,
        lanes=lanes,
        step=step,
        state=tree["state"],
        run_keys=tree["run_keys"],
        history=history,
    )


def _settings(meta: dict) -> int:
    """Settings a sweep run trained (1 for a plain run)."""
    settings = meta.get("settings") or {}
    return len(next(iter(settings.values()))) if settings else 1


def _template(record: Algorithm, config, lanes: int) -> dict:
    """Arrays shaped like the runner's checkpointed tree ``{"state", "run_keys"}``
    (zeros: only their shapes, dtypes and structure matter). Traced, not compiled."""
    program = record.program(config)
    try:
        inputs = program.inputs()
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot rebuild the run's state: its inputs do not load: {error}") from None

    def one(key):
        init_key, run_key = jax.random.split(key)  # as the runner splits it
        return {"state": program.init(init_key, inputs), "run_keys": run_key}

    shapes = jax.eval_shape(jax.vmap(one), jax.random.split(jax.random.key(0), lanes))
    return jax.tree.map(_zeros, shapes)


def _zeros(shape: jax.ShapeDtypeStruct):
    if jax.dtypes.issubdtype(shape.dtype, jax.dtypes.prng_key):
        raw = jax.eval_shape(jax.random.key_data, shape)
        keys = jax.random.wrap_key_data(np.zeros(raw.shape, raw.dtype))
        if keys.dtype != shape.dtype:
            raise ValueError(f"the run's state holds {shape.dtype} keys; this process makes {keys.dtype} keys")
        return keys
    return np.zeros(shape.shape, shape.dtype)


# ----------------------------------------------------------------------------- using


def evaluate(
    run: SavedRun, keys: jax.Array, episodes: int | None = None, deterministic: bool = True
) -> evaluation.EvalResult:
    """Every lane's policy for ``episodes`` episodes (default: the config's
    ``eval_episodes``), lane ``l`` from ``keys[l]``, all lanes in one compiled program.

    Deterministic (the algorithm's own evaluation, ``program(config).evaluate``) unless
    ``deterministic=False`` (sampled actions). With :meth:`SavedRun.eval_keys` and the
    default episodes this repeats the run's evaluation at the checkpoint, where it ran
    one (:meth:`SavedRun.evaluated_at_step`: at least at the end of a run). Returns an
    :class:`jaxrl.evaluation.EvalResult` with leaves ``[lanes, episodes]``.
    """
    config = run.config
    if episodes is not None:
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
            raise ValueError(f"episodes must be an integer >= 1, got {episodes!r}")
        config = config.replace(eval_episodes=episodes)
    keys = jnp.asarray(keys)
    if keys.shape != (run.lanes,):
        raise ValueError(f"keys must be [{run.lanes}] (one per lane), got shape {keys.shape}")
    try:
        evaluate_lanes = _evaluator(run.record, config, deterministic)
    except TypeError:  # an unhashable config: compiled for this call only
        evaluate_lanes = _evaluator.__wrapped__(run.record, config, deterministic)
    return evaluate_lanes(run.state.params, keys)


@functools.lru_cache(maxsize=8)
def _evaluator(record: Algorithm, config, deterministic: bool):
    """``(params [L, ...], keys [L]) -> EvalResult [L, episodes]``, jitted (and kept, so
    evaluating runs of one config again compiles nothing)."""
    if deterministic:
        evaluate_one = record.program(config).evaluate
    else:
        evaluate_one = functools.partial(
            evaluation.evaluate_config, record.act, record.initial_carry, config=config, deterministic=False
        )
    return jax.jit(jax.vmap(evaluate_one))


def record(
    run: SavedRun,
    key: jax.Array,
    num_steps: int,
    num_envs: int = 1,
    lane: int = 0,
    deterministic: bool = True,
) -> data.Dataset:
    """``num_steps`` transitions of lane ``lane``'s policy on the run's env (with its
    ``env_kwargs``), from ``num_envs`` parallel envs: :func:`jaxrl.data.collect_dataset`,
    a dataset :func:`jaxrl.data.save_dataset` writes and behaviour cloning reads.
    Deterministic actions unless ``deterministic=False``."""
    act_fn = functools.partial(run.record.act, config=run.config, deterministic=deterministic)
    return data.collect_dataset(
        act_fn,
        run.params(lane),
        run.env_id,
        key,
        num_steps,
        num_envs,
        env_kwargs=dict(run.config.env_kwargs),
        carry=run.record.initial_carry(run.config, num_envs),
    )


def part(
    run: SavedRun,
    proportion: float,
    num_envs: int = 1,
    lane: int = 0,
    deterministic: bool = True,
    name: str | None = None,
) -> data.Part:
    """Lane ``lane``'s policy as a part of a mixture (:func:`jaxrl.data.collect_mixture`
    on the run's env, ``num_envs`` envs), named ``name`` (default: the run's directory).
    Its ``policy``, stored in the dataset's metadata, says which: ``run_dir``,
    ``algorithm``, ``checkpoint_step`` (iterations done), ``lane``, ``deterministic``, and
    the checkpoint's ``timesteps`` (env steps) / ``updates`` where its state counts them."""
    params = run.params(lane)
    policy = {
        "run_dir": os.path.abspath(run.logdir),
        "algorithm": run.algorithm,
        "checkpoint_step": int(run.step),
        "lane": lane,
        "deterministic": deterministic,
    }
    for counter in ("timesteps", "updates"):
        value = getattr(run.state, counter, None)
        if value is not None and np.ndim(value) == 1:
            policy[counter] = int(np.asarray(value)[lane])
    return data.Part(
        name=run.logdir if name is None else name,
        act_fn=functools.partial(run.record.act, config=run.config, deterministic=deterministic),
        params=params,
        carry=run.record.initial_carry(run.config, num_envs),
        proportion=proportion,
        policy=policy,
    )


def can_render(env_id: str, env_kwargs=()) -> bool:
    """Whether :func:`render_episode` can draw the env: Gymnasium envs
    (``"gymnasium:<id>"``, without jaxrl's frame stacking) whose ``render_modes`` include
    ``"rgb_array"``. gymnax envs have no renderer that works without a display."""
    if not envs.steps_on_host(env_id):
        return False
    from jaxrl.envs.gymnasium import GymnasiumEnv

    env, _ = envs.make(env_id, **dict(env_kwargs))
    return isinstance(env, GymnasiumEnv)


def render_episode(
    run: SavedRun, lane: int = 0, seed: int = 0, deterministic: bool = True
) -> tuple[np.ndarray, float, float]:
    """One episode of lane ``lane``'s policy, started from ``reset(seed=seed)``, as
    ``(frames uint8 [T + 1, H, W, 3], return, fps)`` (``fps``: the env's frame rate). Only Gymnasium envs render
    (:func:`can_render`; a ValueError naming the env otherwise); the policy's memory is
    threaded through the episode, its action keys drawn from ``key(seed)``."""
    config = run.config
    if not can_render(config.env_id, config.env_kwargs):
        raise ValueError(
            f"env {config.env_id!r} cannot render: only rendering envs support video, Gymnasium envs "
            f"('gymnasium:<id>') with an rgb_array render mode"
        )
    env, _ = envs.make(config.env_id, **dict(config.env_kwargs))
    act = jax.jit(functools.partial(run.record.act, config=config, deterministic=deterministic))
    params = run.params(lane)
    memory = {"carry": run.record.initial_carry(config, 1), "t": 0}
    key = jax.random.key(seed)

    def policy(obs):
        batch = jax.tree.map(lambda leaf: leaf[None], obs)  # obs may be a dict / tuple of arrays
        action, memory["carry"] = act(params, batch, memory["carry"], jax.random.fold_in(key, memory["t"]))
        memory["t"] += 1
        return np.asarray(action)[0]

    return env.render_episode(policy, seed)


def save_frames(frames: np.ndarray, path: str | os.PathLike, fps: float = 30.0) -> list[str]:
    """Write uint8 frames ``[T, H, W, 3]`` as ``path + ".npz"`` (compressed, array
    ``frames``) and, where Pillow is installed, ``path + ".gif"``. Returns the files written."""
    path = os.fspath(path)
    frames = np.asarray(frames)
    written = [f"{path}.npz"]
    np.savez_compressed(written[0], frames=frames)
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        return written
    images = [Image.fromarray(frame) for frame in frames]
    images[0].save(f"{path}.gif", save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)), loop=0)
    written.append(f"{path}.gif")
    return written
