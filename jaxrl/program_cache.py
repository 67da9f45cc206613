"""Traced programs kept on disk beside JAX's persistent compilation cache, so that a
rerun skips tracing and lowering as well as XLA's compile.

JAX's persistent cache is keyed by the lowered program, so every process still traces
and lowers each program in Python before it can look the executable up: for DQN's
training chunk on CartPole that is about 2 s of a 7 s rerun on 2 cores. While the
persistent cache is on (``jax_compilation_cache_dir`` set, as ``python -m jaxrl train``
does), :func:`prepare` saves each program it is given as a serialized
``jax.export.Exported`` in ``<cache dir>/jaxrl-programs/``; a later process loads that
instead of tracing, and compiling it finds XLA's executable in JAX's cache.

An entry is found only by a key that covers everything the trace depends on: the
caller's ``identity`` of the program (for the runner: the algorithm and its whole
config), the static arguments, the inputs' shapes and dtypes, jaxrl's own source (a
hash of every module), the versions of the packages traced through, the JAX settings
that change a trace, and the backend. Programs with host callbacks (progress reports,
Gymnasium envs) cannot be serialized and are traced every time, as is everything while
the persistent cache is off. A damaged entry is ignored and written again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import pickle
import uuid
from typing import Any, Callable, Sequence

import jax

FORMAT = 1  # of an entry; part of the key
PACKAGES = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "numpy")
JAX_SETTINGS = ("jax_enable_x64", "jax_default_prng_impl", "jax_threefry_partitionable",
                "jax_default_matmul_precision", "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion")


def directory() -> str | None:
    """Where entries are kept, or None while JAX's persistent cache is off (or
    ``jax.export``'s serializer, the ``flatbuffers`` package, is missing)."""
    cache_dir = jax.config.jax_compilation_cache_dir
    if not (jax.config.jax_enable_compilation_cache and cache_dir):
        return None
    if importlib.util.find_spec("flatbuffers") is None:  # pragma: no cover - a declared dependency
        return None
    return os.path.join(cache_dir, "jaxrl-programs")


@functools.lru_cache(maxsize=1)
def _environment() -> bytes:
    """Everything besides the program itself that a trace depends on, hashed once."""
    from importlib.metadata import PackageNotFoundError, version

    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    root = os.path.dirname(os.path.abspath(__file__))
    for folder, subfolders, files in sorted(os.walk(root)):
        subfolders.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read() + b"\0")
    for package in PACKAGES:
        try:
            digest.update(f"{package} {version(package)}\n".encode())
        except PackageNotFoundError:
            digest.update(f"{package} -\n".encode())
    for setting in JAX_SETTINGS:
        digest.update(f"{setting} {getattr(jax.config, setting, None)}\n".encode())
    digest.update(f"backend {jax.default_backend()}\n".encode())
    digest.update(f"JAXRL_NO_XLA_SETTINGS {os.environ.get('JAXRL_NO_XLA_SETTINGS', '')}\n".encode())
    return digest.digest()


def _entry_path(root: str, identity: str, static: tuple, leaves: Sequence) -> str:
    digest = hashlib.sha256(_environment())
    digest.update(identity.encode() + b"\0" + repr(static).encode() + b"\0")
    digest.update(repr([(tuple(leaf.shape), str(leaf.dtype)) for leaf in leaves]).encode())
    return os.path.join(root, digest.hexdigest() + ".program")


def prepare(jitted, args: tuple, static: tuple = (), *, identity: str | None = None,
            donate_argnums: Sequence[int] = ()) -> tuple[Any, Callable[[], Callable]]:
    """Trace ``jitted(*args, *static)``, or load its trace from the cache, ahead of
    compiling it.

    Args:
      jitted: a ``jax.jit`` function; ``static`` are its static arguments, last.
      args: its other arguments (arrays or ``jax.ShapeDtypeStruct`` pytrees).
      identity: a string that, with the inputs' shapes and dtypes and jaxrl's source,
        determines the program; None to never cache it.
      donate_argnums: positions in ``args`` whose buffers the program may reuse (as
        ``jitted`` donates them).

    Returns ``(out_info, compile)``: the outputs' ``ShapeDtypeStruct`` pytree, and a
    function that compiles the program (it may run in another thread) and returns a
    callable taking ``*args``'s pytrees.
    """
    root = directory() if identity is not None else None
    if root is None:
        return _traced(jitted.trace(*args, *static))
    leaves, in_tree = jax.tree.flatten(args)
    infos = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves]
    path = _entry_path(root, identity, static, infos)
    entry = _load(path, in_tree)
    if entry is not None and entry["exported"] is None:  # known not to serialize
        return _traced(jitted.trace(*args, *static))
    if entry is None:
        traced = jitted.trace(*args, *static)
        out_tree = jax.tree.structure(traced.out_info)
        entry = {"in_tree": in_tree, "out_tree": out_tree, "exported": None}
        try:
            pickle.dumps((in_tree, out_tree))
            if traced.jaxpr.effects:
                raise ValueError(f"host callbacks or other effects: {traced.jaxpr.effects}")

            def flat(*flat_args):
                # Reuses the trace above (same function and input types).
                return jax.tree.leaves(jitted(*jax.tree.unflatten(in_tree, flat_args), *static))

            entry["exported"] = jax.export.export(jax.jit(flat))(*infos).serialize()
        except Exception:  # anything that cannot be serialized is traced every time
            _save(path, entry)
            return _traced(traced)
        _save(path, entry)
    exported = jax.export.deserialize(entry["exported"])
    out_tree = entry["out_tree"]
    out_info = jax.tree.unflatten(out_tree, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.out_avals])
    sizes = [len(jax.tree.leaves(arg)) for arg in args]
    donated = tuple(i for position in donate_argnums
                    for i in range(sum(sizes[:position]), sum(sizes[:position + 1])))

    def compile_exported():
        compiled = jax.jit(exported.call, donate_argnums=donated).lower(*infos).compile()
        return lambda *call_args: jax.tree.unflatten(out_tree, compiled(*jax.tree.leaves(call_args)))

    return out_info, compile_exported


def _traced(traced) -> tuple[Any, Callable[[], Callable]]:
    return traced.out_info, lambda: traced.lower().compile()


def _load(path: str, in_tree) -> dict | None:
    """The entry at ``path`` if there is a readable one for inputs ``in_tree``."""
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
        if entry["in_tree"] != in_tree:
            return None
        if entry["exported"] is not None:
            entry["exported"] = bytearray(entry["exported"])
        return entry
    except Exception:  # missing, damaged, or from code that no longer unpickles
        return None


def _save(path: str, entry: dict) -> None:
    """Write ``entry`` atomically (a reader sees the old file or the new one, whole);
    best effort: a cache that cannot be written is only slower."""
    temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "xb") as f:
            pickle.dump({**entry, "exported": None if entry["exported"] is None else bytes(entry["exported"])}, f)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
