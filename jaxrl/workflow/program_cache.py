"""Traced programs kept on disk beside JAX's persistent compilation cache, so that a
rerun skips tracing and lowering as well as XLA's compile.

JAX's persistent cache is keyed by the lowered program, so every process still traces
and lowers each program in Python before it can look the executable up, a large part
of a short rerun (the warm cells of ``benchmarks/time_to_solve.py``). While the
persistent cache is on (``jax_compilation_cache_dir`` set, as ``python -m jaxrl train``
does), :func:`prepare` saves each program it is given as a serialized
``jax.export.Exported`` in ``<cache dir>/jaxrl-programs/``; a later process loads that
instead of tracing, and compiling it finds XLA's executable in JAX's cache.

An entry is found only by a key that covers everything the trace depends on: the
caller's ``identity`` of the program (for the runner: the algorithm and every field of
its config), the static arguments, the inputs' tree structure, shapes, dtypes and weak
types, jaxrl's source (a hash of every module, taken when this module is imported),
the versions of jaxrl and of the packages traced through, Python's version, the backend
and the current value of every JAX setting but ``jax_compilation_cache_max_size``.
Programs with host callbacks cannot be serialized and are traced every time, as are
programs with inputs committed to a device, and everything while the persistent cache
is off or remote. Each entry is written whole or not at all (a temporary file renamed)
and carries a SHA-256 of its contents, checked before it is read: an entry cut short or
changed is traced again and written anew, never loaded. Entries are pickles: the
directory must be as trusted as JAX's cache of executables beside it. Deleting the
directory is safe.

The directory keeps to ``jax_compilation_cache_max_size`` on its own (JAX's cache counts
only its own files, so the two together may take twice the limit): at 0 nothing is saved
or loaded, above 0 the least recently used entries are deleted after a save until the
entries take at most that many bytes (an entry larger than that is not kept), and at -1
(JAX's default) nothing is evicted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import pickle
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

FORMAT = 3  # of an entry; part of the key
PACKAGES = ("jaxrl", "jax", "jaxlib", "flax", "optax", "chex", "gymnax", "numpy")
NOT_SERIALIZABLE = "not serializable"
DIGEST_BYTES = 32  # an entry file is the SHA-256 of its pickle, then the pickle

log = logging.getLogger(__name__)


def _source_digest() -> bytes | None:
    """A hash of jaxrl's modules, or None where they are not available as ``.py`` files."""
    digest = hashlib.sha256()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the jaxrl package
    found = False
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read() + b"\0")
                found = True
    return digest.digest() if found else None


# Taken when the runner first imports this module, as near to jaxrl's own import as
# nothing else needs: later edits to the files then disable the cache (see directory).
SOURCE = _source_digest()


def directory() -> str | None:
    """Where entries are kept, or None: while JAX's persistent cache is off or on a
    remote file system, without jaxrl's ``.py`` sources or once they differ from the
    imported ones (edited since: a module reloaded in a notebook would run code the
    hash does not describe), or without ``jax.export``'s serializer (``flatbuffers``)."""
    cache_dir = jax.config.jax_compilation_cache_dir
    if not (jax.config.jax_enable_compilation_cache and cache_dir) or "://" in str(cache_dir) or SOURCE is None:
        return None
    if _source_digest() != SOURCE or importlib.util.find_spec("flatbuffers") is None:
        return None
    return os.path.join(cache_dir, "jaxrl-programs")


@functools.lru_cache(maxsize=1)
def _versions() -> bytes:
    from importlib.metadata import PackageNotFoundError, version

    def of(package):
        try:
            return version(package)
        except PackageNotFoundError:
            return "-"

    return repr([(package, of(package)) for package in PACKAGES] + [("python", sys.version)]).encode()


def _environment() -> bytes:
    """What besides the program itself a trace depends on. JAX's settings are read on
    every call, so one changed between two runs in a process gives another key."""
    # getattr sees thread-local values (``with jax.numpy_rank_promotion(...)``) too.
    settings = sorted(
        (name, repr(getattr(jax.config, name, value)))
        for name, value in jax.config.values.items()
        if name != "jax_compilation_cache_max_size"
    )  # bounds the caches, not the trace
    # The memory a replay buffer may take is checked while tracing (buffers.memory_limit).
    from jaxrl.buffers.replay import memory_limit

    machine = (FORMAT, jax.default_backend(), memory_limit())
    return SOURCE + _versions() + repr(settings).encode() + repr(machine).encode()


def _abstract(leaf) -> jax.ShapeDtypeStruct | None:
    """``leaf``'s shape, dtype and weak type; None for a leaf the cache does not take
    (an array committed to a device, a Python scalar)."""
    if isinstance(leaf, jax.Array) and leaf.committed:
        return None
    if not isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)):
        return None
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, weak_type=getattr(leaf, "weak_type", False))


def prepare(
    jitted, args: tuple, static: tuple = (), *, identity: str | None = None, donate_argnums: Sequence[int] = ()
) -> tuple[Any, Callable[[], Callable]]:
    """Trace ``jitted(*args, *static)``, or load its trace from the cache, ahead of
    compiling it.

    Args:
      jitted: a ``jax.jit`` function; ``static`` are its static arguments, last.
      args: its other arguments (arrays or ``jax.ShapeDtypeStruct`` pytrees).
      identity: a string that, with the inputs' types and jaxrl's source, determines
        the program; None to never cache it.
      donate_argnums: positions in ``args`` whose buffers the program may reuse (as
        ``jitted`` donates them).

    Returns ``(out_info, compile)``: the outputs' ``ShapeDtypeStruct`` pytree, and a
    function that compiles the program (it may run in another thread) and returns a
    callable taking ``*args``'s pytrees.
    """
    max_bytes = jax.config.jax_compilation_cache_max_size
    root = directory() if identity is not None and max_bytes != 0 else None
    leaves, in_tree = jax.tree.flatten(args)
    infos = [_abstract(leaf) for leaf in leaves]
    if root is None or any(info is None for info in infos) or " at 0x" in str(in_tree):  # not cached
        return _traced(jitted.trace(*args, *static))
    digest = hashlib.sha256(_environment())
    for part in (identity, repr(static), str(in_tree), repr(infos)):
        digest.update(part.encode() + b"\0")
    path = os.path.join(root, digest.hexdigest() + ".program")

    loaded, traced = _load(path), None
    if loaded is not None and max_bytes > 0:
        with contextlib.suppress(OSError):
            os.utime(path)  # used: the last to be evicted
    if loaded is None:
        traced = jitted.trace(*args, *static)
        entry = _export(traced, jitted, in_tree, infos, static, identity)
        _save(path, entry)
        if max_bytes > 0:
            _evict(root, max_bytes, keep=path)
        # Compile what a later process will load, so that XLA's executable is cached for it.
        loaded = _load_entry(entry)
    if loaded is NOT_SERIALIZABLE:
        return _traced(traced or jitted.trace(*args, *static))
    exported, out_info = loaded
    out_tree = jax.tree.structure(out_info)
    arg_infos = jax.tree.unflatten(in_tree, infos)

    def compile_exported():
        call = jax.jit(
            lambda *call_args: jax.tree.unflatten(out_tree, exported.call(*jax.tree.leaves(call_args))),
            donate_argnums=tuple(donate_argnums),
        )
        try:
            return call.lower(*arg_infos).compile()
        except Exception as error:  # noqa: BLE001 - a loaded program XLA refuses: drop it, trace
            log.warning("jaxrl.workflow.program_cache: dropping %s, which did not compile (%s)", path, error)
            with contextlib.suppress(OSError):
                os.remove(path)
            return jitted.trace(*args, *static).lower().compile()

    return out_info, compile_exported


def _traced(traced) -> tuple[Any, Callable[[], Callable]]:
    return traced.out_info, lambda: traced.lower().compile()


def _export(traced, jitted, in_tree, infos, static, identity) -> dict:
    """The entry for a traced program: its serialized export, or a marker that it has
    none (host callbacks, or anything else ``jax.export`` refuses)."""
    if traced.jaxpr.effects:  # host callbacks: nothing to serialize them as
        return {"exported": None}
    out_leaves, out_tree = jax.tree.flatten(traced.out_info)

    def flat(*flat_args):  # the same function on leaves (same input types: reuses the trace)
        return jax.tree.leaves(jitted(*jax.tree.unflatten(in_tree, flat_args), *static))

    try:
        blob = bytes(jax.export.export(jax.jit(flat))(*infos).serialize())
    except Exception as error:  # noqa: BLE001 - anything export refuses is traced every time
        log.warning(
            "jaxrl.workflow.program_cache: tracing %.60s... every time: jax.export refused it (%s)", identity, error
        )
        return {"exported": None}
    return {
        "exported": blob,
        "out_tree": out_tree,
        "out_weak": [leaf.weak_type for leaf in out_leaves],
    }


def _load(path: str):
    """``(exported, out_info)`` from the entry at ``path``, ``NOT_SERIALIZABLE``, or
    None where there is no readable entry (missing, damaged, or from code that no
    longer unpickles)."""
    try:
        with open(path, "rb") as f:
            digest, data = f.read(DIGEST_BYTES), f.read()
        if hashlib.sha256(data).digest() != digest:  # cut short or changed: never unpickled
            return None
        return _load_entry(pickle.loads(data))
    except Exception:  # noqa: BLE001 - any unreadable entry is a miss
        return None


def _load_entry(entry: dict):
    if entry["exported"] is None:
        return NOT_SERIALIZABLE
    exported = jax.export.deserialize(entry["exported"])
    # Serialization keeps shapes and dtypes but not weak types: those come from the entry.
    infos = [
        jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=weak)
        for aval, weak in zip(exported.out_avals, entry["out_weak"], strict=True)
    ]
    return exported, jax.tree.unflatten(entry["out_tree"], infos)


def _evict(root: str, max_bytes: int, keep: str) -> None:
    """Delete the least recently used entries in ``root`` (by modification time, which a
    load renews) until they take at most ``max_bytes``, ``keep`` (the entry just saved)
    last. Without a lock, processes saving at once may delete more than needed, which
    only costs them a trace."""
    try:
        keep_size = os.path.getsize(keep)
    except OSError:  # the save failed (a full disk?): make room all the same
        keep_size = 0
    if keep_size > max_bytes:  # larger than the limit on its own: not kept, as in JAX's cache
        with contextlib.suppress(OSError):
            os.remove(keep)
        keep_size = 0
    entries = []
    with contextlib.suppress(OSError), os.scandir(root) as found:
        for item in found:
            with contextlib.suppress(OSError):  # another process may delete it meanwhile
                if item.name.endswith(".program") and item.path != keep:
                    stat = item.stat()
                    entries.append((stat.st_mtime_ns, item.path, stat.st_size))
    total = keep_size + sum(size for _, _, size in entries)
    for _, path, size in sorted(entries):
        if total <= max_bytes:
            break
        with contextlib.suppress(OSError):
            os.remove(path)
        total -= size


def _save(path: str, entry: dict) -> None:
    """Write ``entry`` (or, if its trees do not pickle, the not-serializable marker)
    atomically: a reader sees the old file or the new one, whole. Best effort: a cache
    that cannot be written is only slower."""
    try:
        data = pickle.dumps(entry)
    except Exception:  # noqa: BLE001 - e.g. a pytree node class defined in a function
        data = pickle.dumps({"exported": None})
    temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "xb") as f:
            f.write(hashlib.sha256(data).digest() + data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
