"""Flax linen networks: MLP, MinAtar CNN and pixel CNN (Nature DQN, IMPALA) torsos, a
user's own torso (:func:`resolve_torso`), actor-critic and Q heads, noisy layers."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Sequence
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.config import import_reference, part, require_choice, static
from jaxrl.envs.spec import OneHot  # an observation layout: the spec says what each leaf is

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "elu": nn.elu, "silu": nn.silu}


def activation_fn(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


# Columns orthonormalised one at a time within a block; whole blocks against the ones
# before, for matrices of more than BLOCKED_FROM elements (a Q beyond the cache, which the
# column-by-column passes would read from memory once per column).
ORTHONORMAL_BLOCK = 32
BLOCKED_FROM = 2**18


def _orthonormalize_within(block: jax.Array, q: jax.Array) -> jax.Array:
    """``block [m, b]``'s columns in turn, each made orthogonal to ``q``'s (zero columns
    where not yet filled) and then normalised: classical Gram-Schmidt with a second pass,
    which restores the orthogonality lost to rounding."""

    def orthonormalize(k, q):
        column = jax.lax.dynamic_index_in_dim(block, k, axis=1, keepdims=False)
        column = column - q @ (q.T @ column)
        column = column - q @ (q.T @ column)
        return jax.lax.dynamic_update_index_in_dim(q, column / jnp.linalg.norm(column), k, axis=1)

    return jax.lax.fori_loop(0, block.shape[1], orthonormalize, q)


@jax.jit  # traced once per shape: a network initialises many layers of few shapes
def orthonormal_columns(matrix: jax.Array) -> jax.Array:
    """The Q of ``matrix [m, n]``'s QR factorisation (``m >= n``, R's diagonal positive):
    ``[m, n]`` with orthonormal columns, by Gram-Schmidt with a second pass; above
    :data:`BLOCKED_FROM` elements in blocks of :data:`ORTHONORMAL_BLOCK` columns, each
    block projected on the columns before it by a matrix product, so that a large Q is
    read once per block rather than once per column (benchmarks/RESULTS.md, "Five
    seconds of init per seed").

    Written with matrix products rather than ``jnp.linalg.qr``: under ``vmap`` that is a
    batched LAPACK call which fans out into XLA:CPU's thread pool from one of its
    workers, and two of them running at once on a 2-core machine deadlock
    (``benchmarks/investigations/xla_cpu_qr_deadlock``)."""
    rows, columns = matrix.shape
    if rows * columns <= BLOCKED_FROM or columns <= ORTHONORMAL_BLOCK:
        return _orthonormalize_within(matrix, jnp.zeros_like(matrix))

    def orthonormalize_block(block, q):
        empty = jnp.zeros_like(block)
        for _ in range(2):  # block Gram-Schmidt with a second pass (BCGS2)
            block = _orthonormalize_within(block - q @ (q.T @ block), empty)
        return block

    def next_full_block(k, q):
        block = jax.lax.dynamic_slice_in_dim(matrix, k * ORTHONORMAL_BLOCK, ORTHONORMAL_BLOCK, axis=1)
        return jax.lax.dynamic_update_slice_in_dim(q, orthonormalize_block(block, q), k * ORTHONORMAL_BLOCK, axis=1)

    full_blocks, remainder = divmod(columns, ORTHONORMAL_BLOCK)
    q = jax.lax.fori_loop(0, full_blocks, next_full_block, jnp.zeros_like(matrix))
    if remainder:  # the last, narrower block: its width is static, so no padding columns
        q = q.at[:, columns - remainder :].set(orthonormalize_block(matrix[:, columns - remainder :], q))
    return q


def orthogonal(scale: float = np.sqrt(2.0)):
    """An initializer like ``flax.linen.initializers.orthogonal(scale)`` (Haar-distributed
    orthogonal rows or columns, whichever are fewer, over the last axis; Saxe et al.,
    2014), built on :func:`orthonormal_columns`."""

    def init(key, shape, dtype=jnp.float32):
        columns = shape[-1]
        rows = math.prod(shape) // columns
        gaussian = jax.random.normal(key, (max(rows, columns), min(rows, columns)), jnp.float32)
        q = orthonormal_columns(gaussian)
        q = q if rows >= columns else q.T
        return (scale * q).reshape(shape).astype(dtype)

    return init


def obs_leaves(obs, obs_ndim) -> list[tuple[jax.Array, int | OneHot]]:
    """``(leaf, layout)`` pairs of an observation: an array with ``obs_ndim`` (an int:
    its trailing observation dims, or :class:`OneHot`), or a pytree's leaves in
    ``jax.tree.leaves`` order with ``obs_ndim`` a tuple of one layout per leaf."""
    if isinstance(obs_ndim, tuple):
        return list(zip(jax.tree.leaves(obs), obs_ndim, strict=True))
    return [(obs, obs_ndim)]


def _ndim(layout: int | OneHot) -> int:
    return 0 if isinstance(layout, OneHot) else layout


def leading_shape(obs, obs_ndim) -> tuple:
    """The batch dims ``[...]`` in front of an observation (see :func:`obs_leaves` for
    ``obs_ndim``)."""
    leaf, layout = obs_leaves(obs, obs_ndim)[0]
    return leaf.shape[: leaf.ndim - _ndim(layout)]


def leaf_features(x: jax.Array, layout: int | OneHot) -> jax.Array:
    """One observation leaf as float32 features ``[..., F]``: its trailing ``layout``
    dims flattened, or (:class:`OneHot`) its category one-hot, ``F = num_classes``."""
    if isinstance(layout, OneHot):
        return jax.nn.one_hot(x, layout.num_classes, dtype=jnp.float32)
    return x.reshape(x.shape[: x.ndim - layout] + (-1,)).astype(jnp.float32)


def flatten_observation(obs, obs_ndim) -> jax.Array:
    """An observation as float32 features ``[..., D]``: each leaf through
    :func:`leaf_features`, concatenated in leaf order (see :func:`obs_leaves`)."""
    parts = [leaf_features(x, layout) for x, layout in obs_leaves(obs, obs_ndim)]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


class MLP(nn.Module):
    """Dense layers ``hidden_sizes`` with ``activation`` (with ``layer_norm``, each
    layer's output normalised before it); input ``[..., D]``, or any observation
    :func:`flatten_observation` takes (``obs_ndim`` trailing dims, per leaf for a
    pytree), output ``[..., hidden_sizes[-1]]``."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int | OneHot | tuple = 1  # trailing observation dims to flatten (a tuple: one per leaf)
    layer_norm: bool = False  # a LayerNorm between each dense layer and its activation (PQN's)

    @nn.compact
    def __call__(self, x):
        x = flatten_observation(x, self.obs_ndim)
        act = activation_fn(self.activation)
        for size in self.hidden_sizes:
            x = nn.Dense(size, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x)
            x = act(nn.LayerNorm()(x) if self.layer_norm else x)
        return x


class Conv(nn.Module):
    """A 2-D convolution with :class:`flax.linen.Conv`'s parameters and numbers (``kernel
    [kh, kw, C, features]``, ``bias [features]``, the same names, so saved parameters
    load either way): ``[..., H, W, C] -> [..., H', W', features]`` (any leading dims),
    padding ``"VALID"`` or ``"SAME"``.

    On CPU it is one matrix product of the input's patches (``kh * kw`` strided slices
    side by side) with the kernel: XLA:CPU rewrites a convolution into its fast form only
    outside loops, so inside ``lax.scan`` (every training loop) the weight gradient of
    ``lax.conv_general_dilated`` runs as a naive loop, several times slower than this
    product (benchmarks/RESULTS.md, "Pixels"). Elsewhere it is ``lax.conv_general_dilated``."""

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: str = "VALID"
    kernel_init: Any = orthogonal()

    @nn.compact
    def __call__(self, x):
        if self.padding not in ("VALID", "SAME"):
            raise ValueError(f"Conv padding must be 'VALID' or 'SAME', got {self.padding!r}")
        if x.ndim < 3:
            raise ValueError(f"Conv needs images [..., H, W, C], got an input of shape {x.shape}")
        kernel = self.param("kernel", self.kernel_init, (*self.kernel_size, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        leading = x.shape[:-3]
        x = jnp.asarray(x, kernel.dtype).reshape((-1,) + x.shape[-3:])
        pads = jax.lax.padtype_to_pads(x.shape[1:3], self.kernel_size, self.strides, self.padding)

        def convolution(x, kernel):
            return jax.lax.conv_general_dilated(
                x, kernel, self.strides, pads, dimension_numbers=("NHWC", "HWIO", "NHWC")
            )

        def patches_product(x, kernel):
            x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
            (kh, kw), (sh, sw) = self.kernel_size, self.strides
            oh, ow = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
            patches = jnp.concatenate(
                [
                    x[:, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
                    for i in range(kh)
                    for j in range(kw)
                ],
                axis=-1,
            )
            return patches @ kernel.reshape(-1, self.features)

        y = jax.lax.platform_dependent(x, kernel, cpu=patches_product, default=convolution) + bias
        return y.reshape(leading + y.shape[1:])


class MinAtarCNN(nn.Module):
    """The MinAtar torso (Young & Tian, 2019): one 3x3 conv with 16 channels then dense
    layers. Input ``[..., H, W, C]``, or a pytree whose image leaves (3 observation dims)
    each get their own conv and whose other leaves are flattened beside them (``obs_ndim``
    a tuple, one per leaf); output ``[..., hidden_sizes[-1]]``."""

    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 3
    layer_norm: bool = False  # after the convolution and each dense layer, before the activation

    @nn.compact
    def __call__(self, obs):
        conv = minatar_conv(self.activation, self.layer_norm)
        features = image_features(obs, self.obs_ndim, conv, scale_uint8=False)
        return MLP(self.hidden_sizes, self.activation, layer_norm=self.layer_norm)(features)


def minatar_conv(activation: str, layer_norm: bool = False):
    """MinAtar's image layer as a function for :func:`image_features`: a 3x3 convolution
    with 16 filters, unpadded, then (with ``layer_norm``) a LayerNorm over its output and
    ``activation`` (built inside the calling module)."""
    act = activation_fn(activation)

    def conv(x):
        x = Conv(16, (3, 3))(x)
        return act(nn.LayerNorm()(x) if layer_norm else x)  # over channels, as purejaxql's MinAtar PQN

    return conv


def image_features(obs, obs_ndim: int | OneHot | tuple, encode_image, scale_uint8: bool = True) -> jax.Array:
    """Features ``[..., F]`` of an observation: each image leaf (3 observation dims,
    ``[..., H, W, C]``) through ``encode_image([N, H, W, C] float32) -> [N, ...]`` (uint8
    images scaled to ``[0, 1]`` if ``scale_uint8``), every other leaf flattened beside
    it (:func:`leaf_features`: one-hot for a :class:`OneHot` leaf), concatenated in
    ``jax.tree.leaves`` order. Call it inside a compact module: the
    layers ``encode_image`` builds belong to that module."""
    batch_shape = leading_shape(obs, obs_ndim)
    features = []
    for x, layout in obs_leaves(obs, obs_ndim):
        if layout == 3:
            image = x.reshape((-1,) + x.shape[-3:]).astype(jnp.float32)
            x = encode_image(image / 255.0 if scale_uint8 and x.dtype == jnp.uint8 else image)
            features.append(x.reshape(batch_shape + (-1,)))
        else:
            features.append(leaf_features(x, layout))
    return features[0] if len(features) == 1 else jnp.concatenate(features, axis=-1)


class NatureEncoder(nn.Module):
    """The convolutions of the Nature DQN network (Mnih et al., 2015): 32 filters 8x8
    stride 4, 64 filters 4x4 stride 2, 64 filters 3x3 stride 1, each unpadded and
    followed by a ReLU. ``[N, H, W, C] -> [N, H3 * W3 * 64]``; images of at least 36x36
    (84x84 in the paper: 7x7x64 = 3136 features)."""

    LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (filters, kernel, stride)

    @nn.compact
    def __call__(self, x):
        size = x.shape[-3:-1]
        for features, kernel, stride in self.LAYERS:
            if min(x.shape[-3:-1]) < kernel:
                raise ValueError(f"network='nature_cnn' needs images of at least 36x36, got {size[0]}x{size[1]}")
            x = Conv(features, (kernel, kernel), (stride, stride))(x)
            x = nn.relu(x)
        return x.reshape(x.shape[0], -1)


class ImpalaResidualBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))``, both convolutions 3x3 stride 1 with
    ``channels`` filters and same padding."""

    channels: int

    @nn.compact
    def __call__(self, x):
        y = Conv(self.channels, (3, 3), padding="SAME")(nn.relu(x))
        y = Conv(self.channels, (3, 3), padding="SAME")(nn.relu(y))
        return x + y


class ImpalaStack(nn.Module):
    """One stack of the IMPALA network: a 3x3 convolution with ``channels`` filters (same
    padding), a 3x3 max-pool of stride 2 (same padding: ``[H, W] -> [ceil(H / 2),
    ceil(W / 2)]``), two :class:`ImpalaResidualBlock` s."""

    channels: int

    @nn.compact
    def __call__(self, x):
        x = Conv(self.channels, (3, 3), padding="SAME")(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        x = ImpalaResidualBlock(self.channels)(x)
        return ImpalaResidualBlock(self.channels)(x)


class ImpalaEncoder(nn.Module):
    """The convolutions of the IMPALA network (Espeholt et al., 2018): three stacks of a
    3x3 convolution (``channels`` 16, 32, 32; same padding), a 3x3 max-pool of stride 2
    (same padding) and two :class:`ImpalaResidualBlock` s (:class:`ImpalaStack`), then a
    ReLU.
    ``[N, H, W, C] -> [N, ceil(H / 8) * ceil(W / 8) * 32]``."""

    channels: Sequence[int] = (16, 32, 32)

    @nn.compact
    def __call__(self, x):
        for channels in self.channels:
            x = ImpalaStack(channels)(x)
        x = nn.relu(x)
        return x.reshape(x.shape[0], -1)


PIXEL_ENCODERS = {"nature_cnn": NatureEncoder, "impala_cnn": ImpalaEncoder}


class ObservationEncoder(nn.Module):
    """An observation's features before any dense layer (``kind`` a network choice):
    ``"mlp"`` flattens every leaf (:func:`flatten_observation`); ``"cnn"`` runs each
    image leaf through a MinAtar convolution (16 filters 3x3, ``activation``);
    ``"nature_cnn"`` / ``"impala_cnn"`` through its own :class:`NatureEncoder` /
    :class:`ImpalaEncoder` (uint8 images scaled to ``[0, 1]``); other leaves are
    flattened beside the images (:func:`image_features`). Output ``[..., F]``."""

    kind: str = "mlp"
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1

    @nn.compact
    def __call__(self, obs):
        if self.kind == "mlp":
            return flatten_observation(obs, self.obs_ndim)
        if self.kind == "cnn":  # MinAtar grids are not pixel intensities: no uint8 scaling
            return image_features(obs, self.obs_ndim, minatar_conv(self.activation), scale_uint8=False)
        return image_features(obs, self.obs_ndim, lambda image: PIXEL_ENCODERS[self.kind]()(image))


class PixelCNN(nn.Module):
    """A pixel torso: :class:`ObservationEncoder` of ``kind`` (``"nature_cnn"`` or
    ``"impala_cnn"``: one encoder per image leaf, other leaves flattened beside) then
    dense layers ``hidden_sizes`` with ``activation``. ``hidden_sizes=(512,)`` with
    ``"relu"`` is the Nature DQN torso, ``(256,)`` the IMPALA one. Output ``[...,
    hidden_sizes[-1]]``."""

    kind: str = "nature_cnn"
    hidden_sizes: Sequence[int] = (512,)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 3
    layer_norm: bool = False  # in the dense layers (the convolutions stay as published)

    @nn.compact
    def __call__(self, obs):
        features = ObservationEncoder(self.kind, self.activation, self.obs_ndim, name="encoder")(obs)
        return MLP(self.hidden_sizes, self.activation, layer_norm=self.layer_norm)(features)


NETWORKS = ("mlp", "cnn", "nature_cnn", "impala_cnn")


def require_image_leaf(kind: str, obs_ndim: int | OneHot | tuple, where: str = "observations") -> None:
    """ValueError unless ``kind`` is a network choice and, for a CNN, the observation
    (``obs_ndim``: see :func:`obs_leaves`) has an image leaf ``[H, W, C]``."""
    if kind not in NETWORKS:
        raise ValueError(f"network must be one of {NETWORKS}, got {kind!r}")
    if kind != "mlp" and 3 not in (obs_ndim if isinstance(obs_ndim, tuple) else (obs_ndim,)):
        raise ValueError(f"network={kind!r} needs image observations [H, W, C], {where} have {obs_ndim} dims")


@dataclasses.dataclass(frozen=True)
class CustomTorso:
    """A user's torso, resolved for one env (:func:`resolve_torso`): the flax ``module``
    and the size ``features`` of the ``[..., F]`` features it returns. Not a flax module
    itself, so a network holding it as a field does not adopt it: each place a torso
    goes takes its own copy (:func:`torso`), with its own weights."""

    module: nn.Module
    features: int


# A torso is probed on observations with these leading dims: torsos meet any batch shape
# ([B] acting, [T, B] sequences, [B, agents]), so they must map over all leading dims.
PROBE_DIMS = (2, 3)


def resolve_torso(network: Any, spec, observation: Any = None) -> str | CustomTorso:
    """A Config's ``network`` made ready to build, checked against the env.

    ``network`` is one of :data:`NETWORKS` (returned as it is, the algorithm builds that
    torso from ``hidden_sizes`` and ``activation``) or a user's torso: a flax linen
    module (instance, or a class built without arguments), a factory called with the
    env's :class:`~jaxrl.envs.spec.EnvSpec` that returns one, or a
    ``"package.module:name"`` string naming either (imported). A torso takes the
    observation (``observation``, default ``spec.observation``: an array or a pytree of
    them, raw, with any leading dims) and returns float features ``[..., F]``; the
    algorithm adds its heads (and its recurrent core, with memory) after it. It must be
    hashable (a Config's static field): a module whose fields are hashable (tuples, not
    lists), a module-level function. Anything else is a ValueError naming the field."""
    if isinstance(network, str) and ":" not in network:
        require_image_leaf(network, spec.obs_ndim, "the env's observations")
        return network
    module = user_module(network, spec)
    observation = spec.observation if observation is None else observation
    return CustomTorso(module, _probe_features(module, abstract_key(observation)))


def user_module(network: Any, spec) -> nn.Module:
    """The flax module ``network`` names, builds or is (see :func:`resolve_torso`), hashable."""
    given = network
    if isinstance(network, str):
        network = import_reference(network, "network")
    if isinstance(network, type) and issubclass(network, nn.Module):
        network = network()
    elif callable(network) and not isinstance(network, nn.Module):
        try:
            network = network(spec)
        except Exception as error:  # the user's code: any failure is a bad network
            raise ValueError(
                f"network: the factory {given!r}, called with the env's spec, raised {type(error).__name__}: {error}"
            ) from error
        if not isinstance(network, nn.Module):
            raise ValueError(f"network: the factory {given!r} must return a flax linen module, got {network!r}")
    if not isinstance(network, nn.Module):
        raise ValueError(
            f"network must be one of {NETWORKS}, a flax linen module, a factory of one (called with the env's "
            f"spec) or 'package.module:name', got {given!r}"
        )
    try:
        hash(network)
    except TypeError:
        raise ValueError(
            f"network: {type(network).__name__} is not hashable: a Config's network is static, so the module's "
            "fields must be hashable (a tuple, not a list)"
        ) from None
    return network


@part
class Whole:
    """A whole network of the user's, heads included, in place of the algorithm's
    (``Config(network=Whole(...))``) where docs/guide/networks.md gives the call it must
    answer: the on-policy family (PPO, A2C, ...; ``network`` as
    :class:`ActorCritic` is called), DQN (``network(obs) -> q``) and DDPG, TD3, SAC
    (``network`` the actor, ``critic`` one critic, which the algorithm ensembles). Each
    is a module, class, factory or ``"package.module:name"``, as :func:`resolve_torso`
    takes a torso. Feed-forward only: the heads' extras (memory, gSDE, noisy or dueling
    Q heads) are the network's own business."""

    network: Any = static(None)
    critic: Any = static(None)


def refuse_head_options(options: dict) -> None:
    """ValueError naming the options (``{name: whether it is on}``) that change the
    built-in heads, which a whole network (:class:`Whole`) brings itself, feed-forward."""
    on = [name for name, value in options.items() if value]
    if on:
        raise ValueError(f"network: a whole network (jaxrl.networks.Whole) brings its own heads; turn off {on}")


def check_call(module: nn.Module, inputs: tuple, expected: Sequence, call: str) -> None:
    """ValueError naming ``network`` unless ``module`` called on ``inputs`` (abstract
    arrays, ``None`` or ``()``) returns outputs whose shapes (a pytree of shape tuples)
    are one of ``expected``; ``call`` describes the call and what it must return."""
    try:
        out, _ = jax.eval_shape(lambda *args: module.init_with_output(jax.random.key(0), *args), *inputs)
    except Exception as error:  # the user's code: any failure is a bad network
        raise ValueError(
            f"network: {type(module).__name__} cannot be called as {call}: {type(error).__name__}: {error}"
        ) from error
    shapes = jax.tree.map(lambda x: tuple(x.shape), out)
    if shapes not in list(expected):
        raise ValueError(f"network: {type(module).__name__} must be called as {call}; it returned shapes {shapes}")


def probe_batch(observation):
    """Abstract observations with :data:`PROBE_DIMS` leading dims."""
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(PROBE_DIMS + tuple(s.shape), s.dtype), observation)


class WholeQ(nn.Module):
    """A user's whole Q-network ``module(obs) -> q`` behind :class:`QNetwork`'s call."""

    module: nn.Module

    def __call__(self, obs, deterministic: bool = False, noise: jax.Array | None = None):
        return self.module(obs)


def abstract_key(observation) -> tuple:
    """A hashable stand-in for an abstract observation: its tree and leaves' shapes and
    dtypes (:func:`from_abstract_key` inverts it)."""
    leaves, tree = jax.tree.flatten(observation)
    return tree, tuple((tuple(leaf.shape), np.dtype(leaf.dtype)) for leaf in leaves)


def from_abstract_key(key: tuple):
    """The abstract observation :func:`abstract_key` stands in for."""
    tree, leaves = key
    return jax.tree.unflatten(tree, [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in leaves])


@functools.lru_cache(maxsize=64)
def _probe_features(module: nn.Module, observation_key: tuple) -> int:
    """``F`` of the ``[..., F]`` features ``module`` returns on the observation, checked
    without computing (``jax.eval_shape``)."""
    batch = probe_batch(from_abstract_key(observation_key))
    described = jax.tree.map(lambda leaf: f"{leaf.dtype}{list(leaf.shape)}", batch)
    try:
        out, _ = jax.eval_shape(lambda obs: module.init_with_output(jax.random.key(0), obs), batch)
    except Exception as error:  # the user's code: any failure is a bad network
        raise ValueError(
            f"network: {type(module).__name__} cannot take the env's observation {described}: "
            f"{type(error).__name__}: {error}"
        ) from error
    shape = getattr(out, "shape", None)
    if shape is None or len(shape) != len(PROBE_DIMS) + 1 or shape[:-1] != PROBE_DIMS:
        got = jax.tree.map(lambda x: list(x.shape), out)
        raise ValueError(
            f"network: a torso returns features [..., F] with the observation's leading dims; "
            f"{type(module).__name__} returned {got} for observations {described} "
            f"(expected [{', '.join(map(str, PROBE_DIMS))}, F])"
        )
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise ValueError(f"network: a torso returns float features, {type(module).__name__} returned {out.dtype}")
    return int(shape[-1])


def require_network(config, spec, whole=None) -> None:
    """Check the ``network`` / ``hidden_sizes`` / ``activation`` fields an algorithm's
    networks are built from, against the env's :class:`~jaxrl.envs.spec.EnvSpec`: a
    shorthand against its observation dims, a user's torso by building it on its
    observation (:func:`jaxrl.networks.resolve_torso`), a whole network
    (:class:`jaxrl.networks.Whole`) by ``whole(config, spec)``, the algorithm's check of
    its call (None: the algorithm takes none)."""
    sizes = config.hidden_sizes
    if not sizes or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in sizes):
        raise ValueError(f"hidden_sizes must be a non-empty tuple of positive ints, got {sizes!r}")
    require_choice(config, "activation", ACTIVATIONS)
    if not isinstance(config.network, Whole):
        resolve_torso(config.network, spec)
    elif whole is None:
        algorithm = type(config).__module__.rpartition(".")[2]
        raise ValueError(
            f"network: {algorithm} takes a torso, not a whole network (jaxrl.networks.Whole: the on-policy "
            "family's, DQN's, DDPG's, TD3's and SAC's)"
        )
    else:
        whole(config, spec)


class NormalizedTorso(nn.Module):
    """A user's torso with a LayerNorm over the features it returns (``layer_norm`` for
    a torso whose layers jaxrl cannot reach)."""

    torso: nn.Module

    @nn.compact
    def __call__(self, obs):
        return nn.LayerNorm()(self.torso(obs))


def torso(
    kind: str | CustomTorso,
    hidden_sizes,
    activation: str,
    obs_ndim: int | OneHot | tuple,
    layer_norm: bool = False,
) -> nn.Module:
    """The torso of a network choice (:data:`NETWORKS`): ``"mlp"`` (:class:`MLP`),
    ``"cnn"`` (:class:`MinAtarCNN`), ``"nature_cnn"`` / ``"impala_cnn"``
    (:class:`PixelCNN`), each ending with dense layers ``hidden_sizes`` (output ``[...,
    hidden_sizes[-1]]``); or a copy of a user's :class:`CustomTorso` (output ``[...,
    features]``), made inside the calling module. ``layer_norm`` puts a LayerNorm before
    each activation of a built-in torso (the MinAtar convolution's too; the pixel
    encoders' convolutions stay as published) and after a user's torso
    (:class:`NormalizedTorso`)."""
    if isinstance(kind, CustomTorso):
        return NormalizedTorso(kind.module.copy()) if layer_norm else kind.module.copy()
    require_image_leaf(kind, obs_ndim)
    if kind == "mlp":
        return MLP(tuple(hidden_sizes), activation, obs_ndim, layer_norm)
    if kind == "cnn":
        return MinAtarCNN(tuple(hidden_sizes), activation, obs_ndim, layer_norm)
    return PixelCNN(kind, tuple(hidden_sizes), activation, obs_ndim, layer_norm)


def torso_features(kind: str | CustomTorso, hidden_sizes) -> int:
    """The size of the features :func:`torso` returns."""
    return kind.features if isinstance(kind, CustomTorso) else hidden_sizes[-1]


MEMORY_KINDS = ("none", "gru", "lstm")


def require_memory(kind: str) -> None:
    if kind not in MEMORY_KINDS:
        raise ValueError(f"memory must be one of {MEMORY_KINDS}, got {kind!r}")


def initial_carry(kind: str, size: int, batch_size: int):
    """The carry of a recurrent core of ``kind`` before an episode's first step: zeros,
    ``[batch_size, size]`` for a GRU, a ``(cell, hidden)`` pair of those for an LSTM,
    ``()`` for ``"none"`` (a feed-forward network)."""
    require_memory(kind)
    if kind == "none":
        return ()
    zeros = jnp.zeros((batch_size, size), jnp.float32)
    return (zeros, zeros) if kind == "lstm" else zeros


def reset_carry(carry, done: jax.Array):
    """``carry`` (leaves ``[*B, ...]``) with the rows where ``done [*B]`` is True set back
    to the initial (zero) carry: the reset at an episode's end. ``B`` may be several
    batch axes (envs and agents). Each leaf keeps its dtype (a step counter stays an
    integer)."""

    def reset(c):
        return jnp.where(done.reshape(done.shape + (1,) * (c.ndim - done.ndim)), jnp.zeros((), c.dtype), c)

    return jax.tree.map(reset, carry)


def _gate_blocks(gates: int):
    """An initializer for a ``[H, gates * H]`` recurrent kernel: an orthogonal ``[H, H]``
    block per gate, as a cell with one recurrent matrix per gate starts."""

    def init(key, shape, dtype=jnp.float32):
        size = shape[0]
        return jnp.concatenate([orthogonal(1.0)(k, (size, size), dtype) for k in jax.random.split(key, gates)], axis=1)

    return init


class RecurrentCore(nn.Module):
    """A GRU or LSTM (``kind``, ``size`` units) run over a sequence, its carry reset to
    zeros before every step that starts a new episode.

    ``__call__(carry, x [T, B, F], reset [T, B]) -> (carry, y [T, B, size])``: ``carry``
    is the state entering step 0 (as :func:`initial_carry` builds it: ``h [B, size]``
    for a GRU, ``(c, h)`` for an LSTM), ``reset[t]`` True where step ``t`` begins a new
    episode; returns the carry after the last step and the hidden state at every step.

    The cells compute ``flax.linen.GRUCell``'s and ``OptimizedLSTMCell``'s equations
    with their initialisation (lecun-normal input kernels, an orthogonal recurrent block
    per gate, zero biases), laid out for a sequence: the input's share of every gate is
    one ``[T * B, F] @ [F, gates * size]`` product before the loop, and each step
    multiplies the hidden state by one ``[size, gates * size]`` kernel. Parameters:
    ``input`` (a dense layer), ``hidden_kernel`` and, for a GRU, ``hidden_bias`` (the
    candidate's recurrent bias). Gate order: GRU ``r, z, n``; LSTM ``i, f, g, o``.
    """

    kind: str
    size: int

    @nn.compact
    def __call__(self, carry, x, reset):
        gates = 3 if self.kind == "gru" else 4
        # Outside the loop: the loop then carries one small product per step, not one per gate.
        projected = nn.Dense(gates * self.size, name="input")(x.astype(jnp.float32))
        kernel = self.param("hidden_kernel", _gate_blocks(gates), (self.size, gates * self.size))
        if self.kind == "gru":
            bias = self.param("hidden_bias", nn.initializers.zeros_init(), (self.size,))

            def cell(h, projected_t):
                x_r, x_z, x_n = jnp.split(projected_t, 3, axis=-1)
                h_r, h_z, h_n = jnp.split(h @ kernel, 3, axis=-1)
                r, z = jax.nn.sigmoid(x_r + h_r), jax.nn.sigmoid(x_z + h_z)
                n = jnp.tanh(x_n + r * (h_n + bias))
                h = (1.0 - z) * n + z * h
                return h, h

        else:

            def cell(carry, projected_t):
                c, h = carry
                i, f, g, o = jnp.split(projected_t + h @ kernel, 4, axis=-1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (c, h), h

        def step(carry, inputs):
            projected_t, reset_t = inputs
            return cell(reset_carry(carry, reset_t), projected_t)

        return jax.lax.scan(step, carry, (projected, reset))


class ActorCritic(nn.Module):
    """An actor-critic: a policy head and a scalar value head.

    Feed-forward (``memory="none"``): separate actor and critic torsos; ``obs`` has any
    leading dims ``[...]``. Recurrent (``"gru"`` / ``"lstm"``): a torso, then a
    :class:`RecurrentCore` of ``memory_size`` units, one shared by both heads (``carry``
    the core's state) or, without ``shared_memory``, one of each for the actor and the
    critic (``carry`` a dict of both cores' states, keys ``"actor"`` and ``"critic"``);
    ``obs`` is a sequence ``[T, B, *obs_shape]``, ``carry`` the state entering it and
    ``reset [T, B]`` marks the steps that begin an episode.

    An asymmetric actor-critic (MAPPO's centralised critic) gives the critic its own
    input: ``critic_obs`` (laid out as ``critic_obs_ndim``; it then needs its own torso
    and, with memory, ``shared_memory=False``) with the same leading dims as ``obs``.

    ``__call__(obs, carry=(), reset=None, critic_obs=None) -> (policy_out, value [...], carry)``, with
    ``policy_out`` the logits ``[..., action_dim]`` (``discrete``: one categorical's, or
    a MultiDiscrete space's choices' one after another, which the caller splits) or
    ``(mean [..., A], log_std [A])`` with a state-independent learned ``log_std``
    (continuous). With ``state_dependent_std`` (gSDE, continuous) it is ``(mean [...,
    A], features [..., F], sde_log_std [F, A])``: the actor's last hidden features
    (``F``: ``memory_size`` with memory, else ``hidden_sizes[-1]``) and a learned
    parameter, zeros until the algorithm sets it (:func:`fill_param`), for
    :class:`jaxrl.distributions.StateDependentNoise`.
    """

    action_dim: int
    discrete: bool
    network: str | CustomTorso = "mlp"
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int | OneHot | tuple = 1
    critic_obs_ndim: int | OneHot | tuple | None = None  # the critic's own input's layout; None: it reads obs
    critic_network: str | CustomTorso | None = None  # the torso of the critic's own input; None: ``network``
    log_std_init: float = 0.0
    memory: str = "none"
    memory_size: int = 128
    shared_memory: bool = True
    state_dependent_std: bool = False

    def setup(self):
        require_memory(self.memory)
        make_torso = lambda kind, ndim: torso(kind, self.hidden_sizes, self.activation, ndim)  # noqa: E731
        if self.memory != "none" and self.shared_memory:
            if self.critic_obs_ndim is not None:
                raise ValueError("a critic with its own input (critic_obs_ndim) needs shared_memory=False")
            self.torso = make_torso(self.network, self.obs_ndim)
            self.core = RecurrentCore(self.memory, self.memory_size)
        else:
            critic_ndim = self.obs_ndim if self.critic_obs_ndim is None else self.critic_obs_ndim
            critic_kind = self.network if self.critic_network is None else self.critic_network
            self.actor_torso = make_torso(self.network, self.obs_ndim)
            self.critic_torso = make_torso(critic_kind, critic_ndim)
        if self.memory != "none" and not self.shared_memory:
            self.actor_core = RecurrentCore(self.memory, self.memory_size)
            self.critic_core = RecurrentCore(self.memory, self.memory_size)
        self.policy_head = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))
        self.value_head = nn.Dense(1, kernel_init=orthogonal(1.0))
        if self.discrete:
            return
        if self.state_dependent_std:
            features = self.memory_size if self.memory != "none" else torso_features(self.network, self.hidden_sizes)
            self.sde_log_std = self.param(SDE_LOG_STD, nn.initializers.zeros, (features, self.action_dim))
        else:
            self.log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (self.action_dim,))

    def __call__(self, obs, carry=(), reset=None, critic_obs=None):
        critic_obs = obs if critic_obs is None else critic_obs
        if self.memory == "none":
            actor_features, critic_features = self.actor_torso(obs), self.critic_torso(critic_obs)
        elif self.shared_memory:
            reset = jnp.zeros(leading_shape(obs, self.obs_ndim), bool) if reset is None else reset
            carry, actor_features = self.core(carry, self.torso(obs), reset)
            critic_features = actor_features
        else:
            reset = jnp.zeros(leading_shape(obs, self.obs_ndim), bool) if reset is None else reset
            actor_carry, actor_features = self.actor_core(carry["actor"], self.actor_torso(obs), reset)
            critic_carry, critic_features = self.critic_core(carry["critic"], self.critic_torso(critic_obs), reset)
            carry = {"actor": actor_carry, "critic": critic_carry}
        out = self.policy_head(actor_features)
        value = self.value_head(critic_features)[..., 0]
        if self.discrete:
            return out, value, carry
        if self.state_dependent_std:
            return (out, actor_features, self.sde_log_std), value, carry
        return (out, self.log_std), value, carry


class NoisyDense(nn.Module):
    """Dense layer with factorised Gaussian parameter noise (Fortunato et al., 2018,
    arXiv:1706.10295): ``y = x (mu_W + sigma_W * eps_W) + mu_b + sigma_b * eps_b`` with
    ``eps_W = f(eps_in) f(eps_out)^T``, ``eps_b = f(eps_out)``, ``f(e) = sign(e) sqrt|e|``.

    ``noise``: the standard normal draws ``[fan_in + features]`` (``eps_in`` then
    ``eps_out``) of one noise sample; None draws them from the ``"noise"`` rng stream.
    ``deterministic=True`` uses the means."""

    features: int
    sigma_init: float = 0.5

    @nn.compact
    def __call__(self, x, deterministic: bool = False, noise: jax.Array | None = None):
        fan_in = x.shape[-1]
        bound = 1.0 / np.sqrt(fan_in)
        uniform = lambda key, shape: jax.random.uniform(key, shape, jnp.float32, -bound, bound)  # noqa: E731
        sigma = nn.initializers.constant(self.sigma_init / np.sqrt(fan_in))
        w_mu = self.param("w_mu", uniform, (fan_in, self.features))
        b_mu = self.param("b_mu", uniform, (self.features,))
        w_sigma = self.param("w_sigma", sigma, (fan_in, self.features))
        b_sigma = self.param("b_sigma", sigma, (self.features,))
        if deterministic:
            return x @ w_mu + b_mu
        if noise is None:
            noise = jax.random.normal(self.make_rng("noise"), (fan_in + self.features,))
        scaled = jnp.sign(noise) * jnp.sqrt(jnp.abs(noise))
        eps_in, eps_out = scaled[:fan_in], scaled[fan_in:]
        bias = b_mu + b_sigma * eps_out
        # Two equal forms; take the one whose noise meets fewer elements. Forming the
        # noisy weights takes fan_in * features elementwise ops and saves a second
        # product; scaling that second product's input and output takes rows * (fan_in
        # + features). The count matters beyond the arithmetic: XLA fuses a draw made in
        # the same loop body (acting draws once per env step) into those elementwise ops
        # and recomputes it for each element.
        rows = int(np.prod(x.shape[:-1]))
        if rows * (fan_in + self.features) >= fan_in * self.features:
            return x @ (w_mu + w_sigma * jnp.outer(eps_in, eps_out)) + bias
        return x @ w_mu + ((x * eps_in) @ w_sigma) * eps_out + bias


class QuantileEmbedding(nn.Module):
    """IQN's embedding of quantile fractions (Dabney et al., 2018, arXiv:1806.06923, eq.
    4): ``phi(tau) = ReLU(Dense(cos(pi i tau), i = 0..embedding_dim-1))`` of ``features``
    units. Takes ``taus [..., N]``, returns ``[..., N, features]``."""

    embedding_dim: int
    features: int

    @nn.compact
    def __call__(self, taus):
        cosines = jnp.cos(jnp.pi * jnp.arange(self.embedding_dim, dtype=jnp.float32) * taus[..., None])
        return nn.relu(nn.Dense(self.features, kernel_init=orthogonal(), name="dense")(cosines))


class QNetwork(nn.Module):
    """Action values for discrete actions, with the DQN-family variants as fields.

    Returns ``[..., num_actions]`` Q-values, or with ``num_atoms > 1`` (C51) the logits
    ``[..., num_actions, num_atoms]`` of each action's return distribution.
    ``dueling`` splits the head into a state value and mean-centred advantages
    (Wang et al., 2016), combined per atom; ``noisy`` makes the head layers
    :class:`NoisyDense` (the torso stays deterministic).

    ``noise``: with ``noisy``, the standard normal draws ``[noise_size()]`` of one noise
    sample for all head layers (each layer takes its slice in order: the advantage or
    ``q`` layer, then the value layer); None draws them from the ``"noise"`` rng stream
    in one call.

    Recurrent (``memory="gru"`` / ``"lstm"``): a :class:`RecurrentCore` of
    ``memory_size`` units between the torso and the head(s); ``obs`` is a sequence
    ``[T, B, *obs_shape]`` entered with ``carry`` (leaves ``[B, ...]``), ``reset [T, B]``
    (default none) marks the steps that begin an episode, and the call returns
    ``(out [T, B, ...], carry)`` with the carry after the last step.

    Implicit quantiles (IQN; ``quantile_embedding = n > 0``, ``num_atoms`` 1): the call
    takes quantile fractions ``taus [..., N]`` whose leading dims broadcast against the
    observations' batch dims (``[N]`` shared by the batch, or one set per row); their
    :class:`QuantileEmbedding` of ``n`` cosines multiplies the torso's (or the recurrent
    core's) features elementwise, the head(s) map each product, and the output is the
    pair ``(quantiles [..., num_actions, N], taus)`` that
    :class:`jaxrl.value_heads.ImplicitQuantile` reads.
    """

    num_actions: int
    network: str | CustomTorso = "mlp"
    hidden_sizes: Sequence[int] = (128, 128)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1
    dueling: bool = False
    noisy: bool = False
    num_atoms: int = 1
    noisy_sigma: float = 0.5
    memory: str = "none"
    memory_size: int = 128
    layer_norm: bool = False  # in the torso (:func:`torso`): PQN's
    quantile_embedding: int = 0  # IQN's cosine terms: the call takes taus (0: no quantile input)

    def _heads(self) -> list[tuple[str, int]]:
        """``(name, features)`` of the head layers, in noise order."""
        first = ("advantage" if self.dueling else "q", self.num_actions * self.num_atoms)
        return [first, ("value", self.num_atoms)] if self.dueling else [first]

    def _noise_sizes(self) -> list[int]:
        """``fan_in + features`` of each head layer (the torso's last layer, or the
        recurrent core, feeds each)."""
        fan_in = torso_features(self.network, self.hidden_sizes) if self.memory == "none" else self.memory_size
        return [fan_in + features for _, features in self._heads()]

    def noise_size(self) -> int:
        """Standard normals one noise sample takes."""
        return sum(self._noise_sizes())

    @nn.compact
    def __call__(
        self, obs, deterministic: bool = False, noise: jax.Array | None = None, carry=(), reset=None, taus=None
    ):
        require_memory(self.memory)
        if (taus is None) != (self.quantile_embedding == 0) or (taus is not None and self.num_atoms != 1):
            raise ValueError(
                "QNetwork takes quantile fractions taus exactly when quantile_embedding > 0 (with num_atoms 1); "
                f"quantile_embedding={self.quantile_embedding}, num_atoms={self.num_atoms}, "
                f"taus given: {taus is not None}"
            )
        x = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim, self.layer_norm)(obs)
        if self.memory != "none":
            reset = jnp.zeros(x.shape[:2], bool) if reset is None else reset
            carry, x = RecurrentCore(self.memory, self.memory_size, name="core")(carry, x, reset)
        if taus is not None:  # [..., F] times phi(tau) [..., N, F]: the features at each fraction
            embedding = QuantileEmbedding(self.quantile_embedding, x.shape[-1], name="quantile_embedding")
            x = x[..., None, :] * embedding(taus)
        heads = self._heads()
        noise_slices = [None] * len(heads)
        if self.noisy and not deterministic:
            if noise is None:
                noise = jax.random.normal(self.make_rng("noise"), (self.noise_size(),))
            noise_slices = jnp.split(noise, np.cumsum(self._noise_sizes())[:-1])

        def head(index):
            name, features = heads[index]
            if self.noisy:
                return NoisyDense(features, self.noisy_sigma, name=name)(x, deterministic, noise_slices[index])
            return nn.Dense(features, kernel_init=orthogonal(1.0), name=name)(x)

        shape = x.shape[:-1] + (self.num_actions, self.num_atoms)
        out = head(0).reshape(shape)
        if self.dueling:
            value = head(1).reshape(x.shape[:-1] + (1, self.num_atoms))
            out = value + out - out.mean(axis=-2, keepdims=True)
        out = out if self.num_atoms > 1 else out[..., 0]
        if taus is not None:  # [..., N, A] -> the pair ([..., A, N], taus)
            out = (jnp.moveaxis(out, -2, -1), taus)
        return out if self.memory == "none" else (out, carry)


def ensemble(module: type[nn.Module], size: int) -> type[nn.Module]:
    """``size`` independently initialised copies of ``module`` evaluated as one batched
    network on the same inputs: outputs gain a leading ``[size]`` axis (twin critics in
    one matrix product per layer instead of two)."""
    return nn.vmap(
        module, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None, out_axes=0, axis_size=size
    )


class ContinuousQ(nn.Module):
    """``Q(s, a)`` for continuous actions: the observation's features (flattened for
    ``network="mlp"``; with a CNN choice, each image leaf through its convolutions, as
    :class:`ObservationEncoder`; a user's :class:`CustomTorso` as it is) concatenated
    with the action ``[..., A]``, then an MLP of ``hidden_sizes`` and a linear output.
    Returns ``[...]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1
    network: str | CustomTorso = "mlp"

    @nn.compact
    def __call__(self, obs, action):
        if self.network == "mlp":  # no encoder module: the MLP critic's parameters as they always were
            obs = flatten_observation(obs, self.obs_ndim)
        elif isinstance(self.network, CustomTorso):
            obs = self.network.module.copy(name="encoder")(obs)
        else:
            obs = ObservationEncoder(self.network, self.activation, self.obs_ndim, name="encoder")(obs)
        x = MLP(self.hidden_sizes, self.activation)(jnp.concatenate([obs, action.astype(jnp.float32)], axis=-1))
        return nn.Dense(1, kernel_init=orthogonal(1.0))(x)[..., 0]


class StateValue(nn.Module):
    """``V(s)``: the ``network`` torso (:func:`torso`: ``hidden_sizes`` dense layers for
    ``"mlp"``, convolutions then dense layers for a CNN choice, a user's torso as it is)
    on the observation, then a linear output. Returns ``[...]``."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1
    network: str | CustomTorso = "mlp"

    @nn.compact
    def __call__(self, obs):
        x = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)(obs)
        return nn.Dense(1, kernel_init=orthogonal(1.0))(x)[..., 0]


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
SDE_LOG_STD = "sde_log_std"  # the gSDE log-std parameter's name in every network that has one


def fill_param(params, name: str, value) -> dict:
    """``params`` (a flax variables dict) with every leaf named ``name`` set to ``value``
    (broadcast to its shape). For an initial value that may be traced (a swept
    hyper-parameter): a module's fields are static, so its initializer cannot take it."""
    flat = flax.traverse_util.flatten_dict(params)
    filled = {path: jnp.full_like(leaf, value) if path[-1] == name else leaf for path, leaf in flat.items()}
    return flax.traverse_util.unflatten_dict(filled)


class Actor(nn.Module):
    """A policy network for off-policy actor-critics. ``kind``:

    * ``"deterministic"``: actions ``tanh(.)`` in ``[-1, 1]``, ``[..., action_dim]``;
    * ``"gaussian"``: ``(loc, log_std)``, each ``[..., action_dim]``, with ``log_std``
      squashed smoothly into ``[LOG_STD_MIN, LOG_STD_MAX]`` (for a tanh-normal);
    * ``"categorical"``: logits ``[..., action_dim]``;
    * ``"state_dependent"``: ``(loc [..., action_dim], features [..., F], sde_log_std [F,
      action_dim])`` for gSDE (:class:`jaxrl.distributions.StateDependentNoise`), with
      ``features`` the torso's output and ``sde_log_std`` a learned parameter, zeros
      until the algorithm sets it (:func:`fill_param`).
    """

    action_dim: int
    kind: str = "gaussian"
    network: str | CustomTorso = "mlp"
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1

    @property
    def num_features(self) -> int:
        """The size of the features the head reads (the torso's output)."""
        return torso_features(self.network, self.hidden_sizes)

    @nn.compact
    def __call__(self, obs):
        x = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)(obs)
        out = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(x)
        if self.kind == "deterministic":
            return jnp.tanh(out)
        if self.kind == "categorical":
            return out
        if self.kind == "state_dependent":
            sde_log_std = self.param(SDE_LOG_STD, nn.initializers.zeros, (x.shape[-1], self.action_dim))
            return out, x, sde_log_std
        raw_log_std = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01))(x)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw_log_std) + 1.0)
        return out, log_std


class RecurrentActor(nn.Module):
    """An :class:`Actor` with memory: a torso, a :class:`RecurrentCore` of
    ``memory_size`` units, then :class:`Actor`'s head (of ``kind``) on the core's output.

    ``__call__(obs [T, B, *obs_shape], carry, reset [T, B] = None) -> (out, carry)``,
    ``out`` as :class:`Actor` returns it with leading dims ``[T, B]``. The two halves are
    methods too, as every recurrent network here has them: :meth:`encode` (torso and core:
    features ``[T, B, memory_size]``) and :meth:`from_features` (the head on features
    ``[..., memory_size]``)."""

    action_dim: int
    kind: str = "gaussian"
    network: str | CustomTorso = "mlp"
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1
    memory: str = "gru"
    memory_size: int = 128

    @property
    def num_features(self) -> int:
        """The size of the features the head reads (the core's output)."""
        return self.memory_size

    def setup(self):
        require_memory(self.memory)
        self.torso = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)
        self.core = RecurrentCore(self.memory, self.memory_size)
        self.head = Actor(self.action_dim, self.kind, "mlp", (), self.activation)  # no layers: the head alone

    def encode(self, obs, carry, reset=None):
        """``(features [T, B, memory_size], carry)``: the core's output at every step and
        its carry after the last one."""
        return _encode(self, obs, carry, reset)

    def from_features(self, features):
        """The head's output (as :class:`Actor`'s) on encoder features ``[..., memory_size]``."""
        return self.head(features)

    def policy(self, features):
        """Deprecated name of :meth:`from_features`."""
        _renamed("RecurrentActor.policy", "RecurrentActor.from_features")
        return self.from_features(features)

    def __call__(self, obs, carry, reset=None):
        features, carry = self.encode(obs, carry, reset)
        return self.from_features(features), carry


class RecurrentContinuousQ(nn.Module):
    """``num_critics`` Q-functions for continuous actions over one recurrent encoder: a
    torso and a :class:`RecurrentCore` over observations only, then an
    :func:`ensemble` of :class:`ContinuousQ` heads on ``concat(core output, action)``.

    ``__call__(obs [T, B, *obs_shape], action [T, B, A], carry, reset [T, B] = None) ->
    (q [num_critics, T, B], carry)``. :meth:`encode` runs the encoder alone (features
    ``[T, B, memory_size]``, so the carry advances without an action) and
    :meth:`from_features` the heads on features ``[..., memory_size]`` and actions
    ``[..., A]`` (``[num_critics, ...]``)."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int | OneHot | tuple = 1
    memory: str = "gru"
    memory_size: int = 128
    num_critics: int = 2
    network: str | CustomTorso = "mlp"  # the encoder's torso (:func:`torso`)

    def setup(self):
        require_memory(self.memory)
        self.torso = torso(self.network, self.hidden_sizes, self.activation, self.obs_ndim)
        self.core = RecurrentCore(self.memory, self.memory_size)
        self.heads = ensemble(ContinuousQ, self.num_critics)(self.hidden_sizes, self.activation, 1)

    def encode(self, obs, carry, reset=None):
        """``(features [T, B, memory_size], carry)``, as :meth:`RecurrentActor.encode`."""
        return _encode(self, obs, carry, reset)

    def from_features(self, features, action):
        return self.heads(features, action)

    def values(self, features, action):
        """Deprecated name of :meth:`from_features`."""
        _renamed("RecurrentContinuousQ.values", "RecurrentContinuousQ.from_features")
        return self.from_features(features, action)

    def __call__(self, obs, action, carry, reset=None):
        features, carry = self.encode(obs, carry, reset)
        return self.from_features(features, action), carry


def _encode(module, obs, carry, reset):
    """A recurrent network's torso and core over ``obs [T, B, ...]`` from ``carry``."""
    reset = jnp.zeros(leading_shape(obs, module.obs_ndim), bool) if reset is None else reset
    carry, features = module.core(carry, module.torso(obs), reset)
    return features, carry


def _renamed(old: str, new: str) -> None:
    warnings.warn(f"{old} is renamed {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)
