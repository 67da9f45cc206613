"""Scale-out over devices and hosts with JAX's own SPMD machinery (``Mesh``,
``NamedSharding``, ``with_sharding_constraint``) and distributed runtime
(``jax.distributed``).

Two ways to use many devices, both compiling one program over a
:class:`jax.sharding.Mesh`:

* **Lanes** (seeds, sweep settings, PBT members): :func:`lanes_split` runs a vmapped
  function with the lane axis split over the devices (``shard_map``). Lanes are
  independent, so the devices never talk during training. The runner's chunk loop
  (:func:`jaxrl.workflow.runner.run`, and so :func:`jaxrl.workflow.sweep.run` and
  :func:`jaxrl.workflow.pbt.train`, given ``RunOptions(mesh=...)``) splits its lanes so,
  :func:`check_lanes` requiring that they divide over the devices; :func:`train_seeds` /
  :func:`train_lanes` train whole runs in one program, padding a lane count the devices
  do not divide with copies of lane 0 and cutting them off again (at most
  ``devices - 1`` wasted lanes).
* **One run, data parallel**: :func:`train_data_parallel` (or :func:`data_parallel` on
  any :class:`jaxrl.loop.Program`) keeps every state field but the env batch
  (``state.env_state`` / ``state.obs``, leading ``[num_envs]``) replicated and shards
  the env batch over the devices, so each device steps and acts for its own envs. The
  learner's split is the partitioner's choice: an update on the whole ``[T, N]`` batch
  (A2C) runs on each device's share, the gradients all-reduced into their mean; PPO's
  minibatches (a global shuffle) and replay samples (from the replicated buffer) are
  gathered, and every device computes the same update. Either way every device ends
  each iteration with the same params, equal to the single-device run's to float
  tolerance.

Multi-host: call :func:`initialize` first in every process (it wraps
``jax.distributed.initialize`` and selects CPU collectives); :func:`make_mesh` then
spans every process's devices and the functions above run unchanged, every process
executing the same program on its share. Replicated outputs (params, metrics of a data
parallel run) are readable on every process; lane-sharded ones through :func:`to_host`. ::

    from jaxrl.workflow import distributed
    from jaxrl.algorithms import ppo

    distributed.initialize()                   # joins a cluster JAX detects (SLURM, ...); else no-op
    out = distributed.train_seeds("ppo", ppo.Config(), jax.random.split(jax.random.key(0), 8))
    out = distributed.train_data_parallel("ppo", ppo.Config(num_envs=64), jax.random.key(0))
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from jaxrl import loop
from jaxrl.config import sweep_axes
from jaxrl.types import TrainOutput

AXIS = "devices"
# The state fields holding the env batch: every algorithm that steps envs has both.
ENV_FIELDS = ("env_state", "obs")


# ----------------------------------------------------------------------------- meshes and hosts


def initialize(
    coordinator_address: str | None = None, num_processes: int | None = None, process_id: int | None = None, **kwargs
) -> None:
    """Join this process to a multi-process JAX run (``jax.distributed.initialize``),
    so that ``jax.devices()`` and :func:`make_mesh` span every process's devices.

    Call it before anything starts JAX's backends: before any JAX computation and before
    importing ``jaxrl.algorithms`` or ``jaxrl.envs`` (gymnax computes on import). It
    does nothing for ``num_processes=1``, or without arguments where JAX would find no
    cluster (no ``JAX_COORDINATOR_ADDRESS``, SLURM, Open MPI, Kubernetes or Cloud TPU
    environment), so one script serves one process or many. On CPU the processes
    exchange data through gloo.

    Args:
      coordinator_address: ``"host:port"`` of process 0, the same in every process.
      num_processes / process_id: how many processes, and this one's index.
      kwargs: passed on (``local_device_ids``, ``initialization_timeout``, ...).
    """
    if num_processes == 1:
        return
    # CPU devices of different processes exchange data only through a collectives
    # implementation. JAX 0.10 picks gloo by default; older releases picked none, with
    # which the first cross-process collective fails.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id, **kwargs)
    except RuntimeError as error:  # JAX's backends are up: too late to join
        raise RuntimeError(
            "distributed.initialize must run before JAX starts its backends: call it before any JAX computation "
            f"and before importing jaxrl.algorithms or jaxrl.envs (gymnax computes on import) ({error})"
        ) from error
    except ValueError:
        if coordinator_address is None and num_processes is None and process_id is None:
            return  # no arguments and no cluster for JAX to detect: one process
        raise


def make_mesh(devices=None) -> Mesh:
    """A one-axis mesh (axis ``"devices"``) over ``devices``: by default ``jax.devices()``,
    every device of every process."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("devices must name at least one device")
    return Mesh(np.asarray(devices), (AXIS,), axis_types=(AxisType.Auto,))


def _auto(mesh: Mesh | None) -> Mesh:
    """``mesh`` (default :func:`make_mesh`) with automatic axes: the functions here leave
    the partitioning to XLA (GSPMD), which explicit-axis meshes (``jax.make_mesh``'s
    default) would turn into sharding-in-types checks."""
    if mesh is None:
        return make_mesh()
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def _split(mesh: Mesh) -> PartitionSpec:
    """One array axis split over all the mesh's axes (``mesh.size`` shards)."""
    return PartitionSpec(tuple(mesh.axis_names))


def lanes_split(function, mesh: Mesh | None):
    """``function``, which treats the lanes (the leading axis of every input and output
    that has one) independently, with the lanes split over ``mesh``'s devices: each
    device runs ``function`` on its own share with no communication (``shard_map``);
    inputs without an axis (scalars) go whole to every device. ``function`` itself
    where ``mesh`` is None.

    ``shard_map`` rather than a sharded ``vmap``: the partitioner would all-reduce the
    stop condition of every batched while loop (evaluation episodes) across devices."""
    if mesh is None:
        return function
    mesh = _auto(mesh)
    split = _split(mesh)

    def per_device(*args):
        # No replication checks (check_vma): every value in here is its device's own.
        in_specs = jax.tree.map(lambda leaf: split if np.ndim(leaf) else PartitionSpec(), args)
        return jax.shard_map(function, mesh=mesh, in_specs=in_specs, out_specs=split, check_vma=False)(*args)

    return per_device


def constrain_lanes(tree, mesh: Mesh | None):
    """Inside ``jit``: ``tree``'s leaves with a leading (lane) axis split over ``mesh``'s
    devices, scalars replicated; ``tree`` itself where ``mesh`` is None."""
    if mesh is None:
        return tree
    mesh = _auto(mesh)
    split, whole = NamedSharding(mesh, _split(mesh)), NamedSharding(mesh, PartitionSpec())
    return jax.lax.with_sharding_constraint(tree, jax.tree.map(lambda x: split if np.ndim(x) else whole, tree))


def check_lanes(lanes: int, mesh: Mesh | None, what: str) -> None:
    """A ValueError unless ``lanes`` (``what`` they are) divide over ``mesh``'s devices."""
    if mesh is not None and lanes % mesh.size:
        raise ValueError(
            f"{what}: {lanes} lanes do not divide over the mesh's {mesh.size} devices "
            f"(each device trains as many lanes): choose a multiple of {mesh.size}, or a mesh of fewer devices"
        )


def place(tree, mesh: Mesh | None):
    """Host values (the same in every process) as inputs of a program over ``mesh``
    (:func:`replicate`); ``tree`` itself where ``mesh`` is None."""
    return tree if mesh is None else replicate(tree, _auto(mesh))


def replicate(tree, mesh: Mesh):
    """Put host values (the same in every process) on every device of ``mesh``.

    Typed PRNG keys become their raw ``uint32`` data (wrap them again inside the
    program) and Python numbers weakly typed arrays, as ``jit`` would make them: across
    processes ``device_put`` spreads only plain arrays, after checking that every
    process passed the same (and the check mistakes a Python float for its float32)."""

    def plain(leaf):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(leaf)
        return jax.device_put(leaf)  # no compilation, unlike jnp.asarray

    return jax.device_put(jax.tree.map(plain, tree), NamedSharding(mesh, PartitionSpec()))


def to_host(tree):
    """NumPy copies of a pytree's arrays, gathering shards held by other processes."""

    def one(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
        return np.asarray(leaf)

    return jax.tree.map(one, tree)


def _module(algorithm):
    """The algorithm given by name (its record), or anything with ``train(key, config)``
    (a record, an algorithm module, a stand-in)."""
    from jaxrl import algorithms

    return algorithms.get(algorithm) if isinstance(algorithm, str) else algorithm


# ----------------------------------------------------------------------------- lanes


class LanesResult(NamedTuple):
    """What :func:`train_lanes` returns: ``output`` (a ``TrainOutput``, left on the
    devices), and the seconds spent compiling and running."""

    output: TrainOutput
    compile_seconds: float
    run_seconds: float


def train_lanes(algorithm, keys: jax.Array, configs, mesh: Mesh | None = None) -> LanesResult:
    """Every (setting, seed) lane of ``algorithm``'s ``train`` in one compiled ``vmap``,
    the lanes split over ``mesh`` (default: every device of every process).

    Args:
      keys: ``[S]`` typed keys; seed ``s`` of every setting trains from ``keys[s]``.
      configs: the config, with its swept leaves ``[C]`` (from
        :func:`jaxrl.workflow.sweep.swept_config`) or none swept.

    The ``C * S`` lanes are flattened (lane ``l`` is setting ``l // S``, seed
    ``l % S``), padded with copies of lane 0 to a multiple of ``mesh.size`` so that every
    device trains as many, trained, and the padding cut off. Output leaves are
    ``[C, S, ...]``, or ``[S, ...]`` when nothing is swept. Lane ``(c, s)`` equals
    ``train(keys[s], setting c)`` to float tolerance (batched kernels may round
    differently).
    """
    _check_keys(keys)
    mesh = _auto(mesh)
    module = _module(algorithm)
    swept = [leaf for leaf in jax.tree.leaves(configs) if np.ndim(leaf)]
    num_settings = swept[0].shape[0] if swept else None
    num_seeds = keys.shape[0]
    count = (num_settings or 1) * num_seeds
    padded = -(-count // mesh.size) * mesh.size
    pick = np.concatenate([np.arange(count), np.zeros(padded - count, int)])
    impl = jax.random.key_impl(keys)

    def run(key_data, configs):
        keys = jax.random.wrap_key_data(key_data, impl=impl)
        flat_keys = keys[pick % num_seeds]
        flat_configs = jax.tree.map(lambda leaf: leaf[pick // num_seeds] if np.ndim(leaf) else leaf, configs)
        out = lanes_split(jax.vmap(module.train, in_axes=(0, sweep_axes(configs))), mesh)(flat_keys, flat_configs)
        shape = (num_seeds,) if num_settings is None else (num_settings, num_seeds)
        return jax.tree.map(lambda x: x[:count].reshape(shape + x.shape[1:]), out)

    inputs = replicate((keys, configs), mesh)
    start = time.perf_counter()
    compiled = jax.jit(run).lower(*inputs).compile()
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    output = jax.block_until_ready(compiled(*inputs))
    return LanesResult(output, compile_seconds, time.perf_counter() - start)


def train_seeds(algorithm, config, keys: jax.Array, mesh: Mesh | None = None) -> TrainOutput:
    """``jax.vmap(train, in_axes=(0, None))(keys, config)`` with the seeds ``[S]``
    split over ``mesh`` (default: every device of every process; see
    :func:`train_lanes`). Output leaves ``[S, ...]``, left on the devices."""
    if any(np.ndim(leaf) for leaf in jax.tree.leaves(config)):
        raise ValueError("config has array leaves (a sweep): use jaxrl.workflow.sweep.run(..., mesh=mesh)")
    return train_lanes(algorithm, keys, config, mesh).output


def _check_keys(keys) -> None:
    if not (isinstance(keys, jax.Array) and jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) and keys.ndim == 1):
        raise ValueError(
            f"keys must be a 1-D array of typed keys, e.g. jax.random.split(jax.random.key(0), 8); "
            f"got {getattr(keys, 'dtype', type(keys).__name__)} of shape {np.shape(keys)}"
        )


# ----------------------------------------------------------------------------- data parallel


def data_parallel(program: loop.Program, mesh: Mesh | None = None) -> loop.Program:
    """``program`` with its env batch sharded over ``mesh`` and the rest replicated.

    After ``init`` and around every iteration the state is constrained: leaves of
    ``state.env_state`` and ``state.obs`` with the leading ``[num_envs]`` axis are split
    over the mesh, every other leaf (params, optimiser state, replay buffer, counters)
    and the metrics replicated. Under ``jit`` the SPMD partitioner steps each device's
    envs where they live and all-reduces whatever the update reduces over the batch, so
    every device applies the same averaged gradients. Raises ``ValueError`` (at trace
    time) if the state has no env batch or ``mesh.size`` does not divide ``num_envs``.
    """
    mesh = _auto(mesh)
    replicated = NamedSharding(mesh, PartitionSpec())
    batch = NamedSharding(mesh, _split(mesh))

    def constrain(state):
        if not all(hasattr(state, field) for field in ENV_FIELDS):
            raise ValueError(
                f"data parallelism shards the env batch, but {type(state).__qualname__} has no "
                f"{' / '.join(ENV_FIELDS)} (an algorithm that learns from a dataset?)"
            )
        num_envs = jax.tree.leaves(state.obs)[0].shape[0]
        if num_envs % mesh.size:
            raise ValueError(
                f"num_envs={num_envs} must be a multiple of the mesh's {mesh.size} devices "
                f"(each device steps num_envs / {mesh.size} envs)"
            )
        shardings = jax.tree.map(lambda _: replicated, state)
        shardings = shardings.replace(
            **{
                field: jax.tree.map(
                    lambda x: batch if np.ndim(x) and x.shape[0] == num_envs else replicated, getattr(state, field)
                )
                for field in ENV_FIELDS
            }
        )
        return jax.lax.with_sharding_constraint(state, shardings)

    def iteration(state, key, index):
        state, metrics = program.iteration(constrain(state), key, index)
        return constrain(state), jax.lax.with_sharding_constraint(metrics, replicated)

    return program._replace(init=lambda key, inputs: constrain(program.init(key, inputs)), iteration=iteration)


def train_data_parallel(algorithm, config, key: jax.Array, mesh: Mesh | None = None) -> TrainOutput:
    """One run of ``algorithm`` on ``config`` (``train(key, config)``), its
    ``config.num_envs`` envs split over ``mesh`` (default: every device, of every
    process) and its updates data parallel (see :func:`data_parallel`).

    Params and metrics come back replicated (readable on every process); the env
    fields stay split. Metric leaves are ``[num_iterations]`` as for ``train``.
    """
    if not (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.ndim == 0):
        raise ValueError(
            f"key must be one typed key, e.g. jax.random.key(0); got "
            f"{getattr(key, 'dtype', type(key).__name__)} of shape {np.shape(key)}"
        )
    mesh = _auto(mesh)
    module = _module(algorithm)
    num_envs = getattr(config, "num_envs", None)
    if num_envs is None:
        raise ValueError(f"{type(config).__qualname__} has no num_envs: data parallelism splits the env batch")
    if num_envs % mesh.size:
        raise ValueError(
            f"num_envs={num_envs} must be a multiple of the mesh's {mesh.size} devices "
            f"(each device steps num_envs / {mesh.size} envs)"
        )
    program = data_parallel(module.program(config), mesh)
    impl = jax.random.key_impl(key)
    train = jax.jit(lambda key_data: loop.train(program, jax.random.wrap_key_data(key_data, impl=impl)))
    return train(replicate(key, mesh))
