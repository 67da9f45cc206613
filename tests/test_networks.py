"""Network shapes and initialisation (the orthogonal initializer against NumPy's QR),
and forward-mode derivatives of every network against finite differences.

Compiles dominate on a 2-core CPU: shape checks trace with ``jax.eval_shape`` (nothing
compiles). The forward-mode and the uint8 checks stay op by op: one jitted program of
a CNN's or a recurrent core's init and jvp compiles slower than its ops one by one.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import networks
from jaxrl.networks import MLP, ActorCritic, MinAtarCNN


@pytest.mark.slow
def test_mlp_flattens_observation_dims():
    net = MLP((32, 16), "relu", obs_ndim=2)
    x = jnp.ones((5, 3, 4))
    params = jax.eval_shape(net.init, jax.random.key(0), x)
    assert jax.eval_shape(net.apply, params, x).shape == (5, 16)


@pytest.mark.slow
def test_minatar_cnn_shapes():
    net = MinAtarCNN((64,))
    x = jnp.ones((2, 7, 10, 10, 4))  # extra leading batch dims are kept
    params = jax.eval_shape(net.init, jax.random.key(0), x)
    assert jax.eval_shape(net.apply, params, x).shape == (2, 7, 64)


@pytest.mark.slow
@pytest.mark.parametrize("network, obs_shape", [("mlp", (4,)), ("cnn", (10, 10, 4))])
def test_actor_critic_discrete(network, obs_shape):
    net = ActorCritic(action_dim=3, discrete=True, network=network, hidden_sizes=(32,), obs_ndim=len(obs_shape))
    obs = jax.random.normal(jax.random.key(1), (6,) + obs_shape)
    logits, value, carry = jax.jit(lambda key, obs: net.apply(net.init(key, obs), obs))(jax.random.key(0), obs)
    assert carry == ()
    assert logits.shape == (6, 3) and value.shape == (6,)
    # A small policy head: the initial policy is close to uniform.
    probs = jax.nn.softmax(logits)
    assert np.allclose(probs, 1 / 3, atol=0.05)


def test_actor_critic_continuous_has_state_independent_log_std():
    net = ActorCritic(action_dim=2, discrete=False, hidden_sizes=(16, 16), log_std_init=-0.5)
    obs = jax.random.normal(jax.random.key(1), (4, 3))
    (mean, log_std), value, _ = jax.jit(lambda key, obs: net.apply(net.init(key, obs), obs))(jax.random.key(0), obs)
    assert mean.shape == (4, 2) and log_std.shape == (2,) and value.shape == (4,)
    np.testing.assert_allclose(log_std, -0.5)


def test_unknown_network_or_activation_is_a_clear_error():
    obs = jnp.ones((1, 4))
    with pytest.raises(ValueError, match="activation"):
        MLP((8,), "swishy").init(jax.random.key(0), obs)
    with pytest.raises(ValueError, match="network"):
        ActorCritic(action_dim=2, discrete=True, network="transformer").init(jax.random.key(0), obs)
    with pytest.raises(ValueError, match="cnn"):
        ActorCritic(action_dim=2, discrete=True, network="cnn").init(jax.random.key(0), obs)


# ----------------------------------------------------------------------------- pixel encoders


def conv_out(size: int, kernel: int, stride: int, padding: str) -> int:
    """A convolution's or pool's output size along one axis (TensorFlow / Flax rules)."""
    return -(-size // stride) if padding == "SAME" else (size - kernel) // stride + 1


def nature_layout(h, w, c):
    """The Nature DQN torso's parameter shapes for an image ``[h, w, c]``, by the layer
    arithmetic: conv 32 8x8 /4, conv 64 4x4 /2, conv 64 3x3 /1 (unpadded), dense."""
    shapes, channels = {}, c
    for i, (filters, k, stride) in enumerate(((32, 8, 4), (64, 4, 2), (64, 3, 1))):
        shapes[f"Conv_{i}"] = (k, k, channels, filters)
        h, w, channels = conv_out(h, k, stride, "VALID"), conv_out(w, k, stride, "VALID"), filters
    return shapes, h * w * channels


def impala_layout(h, w, c):
    """The IMPALA torso's conv shapes and its flattened features for ``[h, w, c]``: per
    stack a 3x3 conv, a 3x3 /2 same max-pool, two residual blocks of two 3x3 convs."""
    shapes, channels = {}, c
    for i, filters in enumerate((16, 32, 32)):
        shapes[f"ImpalaStack_{i}/Conv_0"] = (3, 3, channels, filters)
        for j in range(2):
            for k in range(2):
                shapes[f"ImpalaStack_{i}/ImpalaResidualBlock_{j}/Conv_{k}"] = (3, 3, filters, filters)
        h, w, channels = conv_out(h, 3, 2, "SAME"), conv_out(w, 3, 2, "SAME"), filters
    return shapes, h * w * channels


def kernel_shapes(tree, prefix=""):
    """``{"path/to/module": kernel shape}`` of every kernel in a params tree."""
    out = {}
    for name, sub in tree.items():
        if name == "kernel":
            out[prefix.rstrip("/")] = sub.shape
        elif isinstance(sub, dict):
            out.update(kernel_shapes(sub, f"{prefix}{name}/"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("image", [(84, 84, 4), (36, 36, 3), (40, 52, 2)])
def test_nature_cnn_shapes_follow_the_layer_arithmetic(image):
    torso = networks.torso("nature_cnn", (512,), "relu", 3)
    obs = jnp.zeros((2, 5) + image, jnp.uint8)  # extra leading batch dims are kept
    params = jax.eval_shape(torso.init, jax.random.key(0), obs)
    convs, features = nature_layout(*image)
    assert features == 3136 or image != (84, 84, 4)  # the paper's 7 x 7 x 64 from 84 x 84
    expected = {f"encoder/NatureEncoder_0/{name}": shape for name, shape in convs.items()}
    expected["MLP_0/Dense_0"] = (features, 512)
    assert kernel_shapes(params["params"]) == expected
    assert jax.eval_shape(torso.apply, params, obs).shape == (2, 5, 512)


@pytest.mark.slow
@pytest.mark.parametrize("image", [(64, 64, 3), (36, 36, 3), (21, 10, 1)])
def test_impala_cnn_shapes_follow_the_layer_arithmetic(image):
    torso = networks.torso("impala_cnn", (256,), "relu", 3)
    obs = jnp.zeros((4,) + image, jnp.float32)
    params = jax.eval_shape(torso.init, jax.random.key(0), obs)
    convs, features = impala_layout(*image)
    expected = {f"encoder/ImpalaEncoder_0/{name}": shape for name, shape in convs.items()}
    expected["MLP_0/Dense_0"] = (features, 256)
    assert kernel_shapes(params["params"]) == expected
    assert len(convs) == 15 and jax.eval_shape(torso.apply, params, obs).shape == (4, 256)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["nature_cnn", "impala_cnn"])
def test_pixel_cnn_encodes_each_image_leaf_and_flattens_the_rest(kind):
    # {"image": [36, 36, 3] uint8, "pixels": [36, 36, 1], "vector": [5]}: leaves in
    # jax.tree.leaves order (image, pixels, vector), obs_ndim (3, 3, 1).
    obs = {
        "vector": jnp.ones((3, 5)),
        "image": jnp.zeros((3, 36, 36, 3), jnp.uint8),
        "pixels": jnp.zeros((3, 36, 36, 1)),
    }
    torso = networks.torso(kind, (32, 16), "tanh", (3, 3, 1))
    params = jax.eval_shape(torso.init, jax.random.key(0), obs)
    layout = nature_layout if kind == "nature_cnn" else impala_layout
    (image_convs, image_features), (pixel_convs, pixel_features) = layout(36, 36, 3), layout(36, 36, 1)
    encoder = "NatureEncoder" if kind == "nature_cnn" else "ImpalaEncoder"
    expected = {f"encoder/{encoder}_0/{name}": shape for name, shape in image_convs.items()}
    expected.update({f"encoder/{encoder}_1/{name}": shape for name, shape in pixel_convs.items()})
    expected["MLP_0/Dense_0"] = (image_features + pixel_features + 5, 32)
    expected["MLP_0/Dense_1"] = (32, 16)
    assert kernel_shapes(params["params"]) == expected
    assert jax.eval_shape(torso.apply, params, obs).shape == (3, 16)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["nature_cnn", "impala_cnn"])
def test_pixel_cnn_scales_uint8_images_to_the_unit_interval(kind):
    torso = networks.torso(kind, (8,), "relu", 3)
    pixels = jax.random.randint(jax.random.key(1), (2, 36, 36, 3), 0, 256).astype(jnp.uint8)
    params = torso.init(jax.random.key(0), pixels)
    scaled = torso.apply(params, pixels.astype(jnp.float32) / 255.0)
    np.testing.assert_allclose(torso.apply(params, pixels), scaled, rtol=1e-6, atol=1e-6)
    assert not np.allclose(torso.apply(params, pixels.astype(jnp.float32)), scaled)  # floats are not scaled


def test_pixel_cnn_errors():
    with pytest.raises(ValueError, match="'nature_cnn' needs image observations"):
        networks.torso("nature_cnn", (8,), "relu", (1, 1))
    with pytest.raises(ValueError, match="at least 36x36"):
        networks.torso("nature_cnn", (8,), "relu", 3).init(jax.random.key(0), jnp.zeros((1, 35, 40, 3)))
    with pytest.raises(ValueError, match="network must be one of"):
        networks.torso("resnet", (8,), "relu", 3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cnn", "nature_cnn"])
def test_continuous_q_encodes_images_then_concatenates_the_action(kind):
    q = networks.ensemble(networks.ContinuousQ, 2)((16,), "relu", (3, 1), kind)
    obs = {"image": jnp.zeros((4, 36, 36, 3)), "vector": jnp.zeros((4, 2))}
    params = jax.eval_shape(q.init, jax.random.key(0), obs, jnp.zeros((4, 3)))
    shapes = kernel_shapes(params["params"])
    features = 34 * 34 * 16 if kind == "cnn" else nature_layout(36, 36, 3)[1]
    assert shapes["MLP_0/Dense_0"] == (2, features + 2 + 3, 16)  # image features, vector, action
    assert jax.eval_shape(q.apply, params, obs, jnp.zeros((4, 3))).shape == (2, 4)


@pytest.mark.parametrize("shape", [(7, 7), (12, 5), (40, 3), (600, 450)])  # the last in blocks, the last block narrower
def test_orthonormal_columns_equal_numpy_qr_with_a_positive_diagonal(shape):
    matrix = np.random.default_rng(sum(shape)).normal(size=shape)
    q, r = np.linalg.qr(matrix)
    expected = q * np.sign(np.diag(r))  # the unique QR with R's diagonal positive
    np.testing.assert_allclose(networks.orthonormal_columns(jnp.asarray(matrix, jnp.float32)), expected, atol=2e-5)


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 2), (3, 3, 4, 16)])
def test_orthogonal_initializer_gives_scaled_orthogonal_rows_or_columns(shape):
    weights = np.asarray(networks.orthogonal(0.5)(jax.random.key(0), shape), np.float64).reshape(-1, shape[-1])
    gram = weights.T @ weights if weights.shape[0] >= weights.shape[1] else weights @ weights.T
    np.testing.assert_allclose(gram, 0.25 * np.eye(len(gram)), atol=1e-5)


def test_orthogonal_initializer_is_haar_distributed():
    """Over many keys, 3x3 draws have E[w_ij] = 0 and E[w_ij^2] = 1/3, and determinant
    +1 and -1 equally often (a sign convention left out of the QR would fix it)."""
    draws = np.asarray(
        jax.vmap(lambda key: networks.orthogonal(1.0)(key, (3, 3)))(jax.random.split(jax.random.key(1), 4000)),
        np.float64,
    )
    np.testing.assert_allclose(draws.mean(axis=0), 0.0, atol=0.05)
    np.testing.assert_allclose((draws**2).mean(axis=0), 1 / 3, atol=0.03)
    assert abs(np.mean(np.linalg.det(draws) > 0) - 0.5) < 0.04


def _networks():
    """(module, inputs) for every network the algorithms build, with smooth activations
    (finite differences across a ReLU's kink would not be a derivative)."""
    obs, image = jnp.ones((5, 4)), jnp.ones((5, 10, 10, 2))
    action = jnp.ones((5, 2))
    return {
        "mlp": (MLP((8, 6)), (obs,)),
        "minatar_cnn": (MinAtarCNN((8,), "silu"), (image,)),
        "actor_critic_discrete": (ActorCritic(3, True, hidden_sizes=(8,)), (obs,)),
        "actor_critic_continuous": (ActorCritic(2, False, hidden_sizes=(8,)), (obs,)),
        "actor_critic_cnn": (ActorCritic(3, True, "cnn", (8,), obs_ndim=3), (image,)),
        **{
            f"actor_critic_{kind}": (
                ActorCritic(3, True, hidden_sizes=(8,), memory=kind, memory_size=6),
                (
                    jnp.ones((3, 5, 4)),
                    networks.initial_carry(kind, 6, 5),
                    jnp.array([[0] * 5, [1, 0, 0, 1, 0], [0] * 5], bool),
                ),
            )
            for kind in ("gru", "lstm")
        },
        "q_network": (networks.QNetwork(3, hidden_sizes=(8,), activation="silu"), (obs,)),
        "rainbow_q_network": (
            networks.QNetwork(3, hidden_sizes=(8,), activation="silu", dueling=True, noisy=True, num_atoms=5),
            (obs, False, jnp.linspace(-1.0, 1.0, (8 + 3 * 5) + (8 + 5))),
        ),  # noise_size()
        "gaussian_actor": (networks.Actor(2, "gaussian", hidden_sizes=(8,), activation="silu"), (obs,)),
        "deterministic_actor": (networks.Actor(2, "deterministic", hidden_sizes=(8,), activation="silu"), (obs,)),
        "twin_continuous_q": (networks.ensemble(networks.ContinuousQ, 2)((8,), "silu"), (obs, action)),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_networks()))
def test_forward_mode_through_every_network_matches_finite_differences(name):
    """``jax.jvp`` (and ``jax.jacfwd``'s machinery) through the network's parameters and
    its float inputs, against a central difference along the same random direction."""
    module, inputs = _networks()[name]
    rng = np.random.default_rng(0)
    inputs = tuple(
        jnp.asarray(rng.normal(size=x.shape), jnp.float32) if isinstance(x, jax.Array) and x.ndim > 1 else x
        for x in inputs
    )
    params = module.init(jax.random.key(0), *inputs)
    floats = (params, inputs[0])
    tangent = jax.tree.map(lambda x: jnp.asarray(0.1 * rng.normal(size=x.shape), jnp.float32), floats)

    def output(params, obs):
        return jax.tree.leaves(module.apply(params, obs, *inputs[1:]))

    _, forward = jax.jvp(output, floats, tangent)
    eps = 1e-2
    shifted = [jax.tree.map(lambda x, t, sign=sign: x + sign * eps * t, floats, tangent) for sign in (1, -1)]
    for jvp_leaf, plus, minus in zip(forward, output(*shifted[0]), output(*shifted[1])):
        np.testing.assert_allclose(jvp_leaf, (plus - minus) / (2 * eps), rtol=2e-2, atol=2e-3)


def same_pads(shape, kernel_size, stride):
    """XLA's "SAME" padding per spatial dim: the odd row or column goes after."""
    pads = []
    for size, k in zip(shape, kernel_size):
        total = max((-(-size // stride) - 1) * stride + k - size, 0)
        pads.append((total // 2, total - total // 2))
    return pads


def numpy_convolution(x, kernel, stride, padding, g):
    """A cross-correlation ``[N, H, W, C] * [kh, kw, C, O] -> [N, H', W', O]`` one kernel
    offset at a time, and for the loss ``sum(y * g)`` the gradients of the kernel and
    of ``x``. Returns ``(y, kernel_grad, x_grad)``."""
    kh, kw = kernel.shape[:2]
    pads = same_pads(x.shape[1:3], (kh, kw), stride) if padding == "SAME" else [(0, 0), (0, 0)]
    xp = np.pad(x.astype(np.float64), ((0, 0), *pads, (0, 0)))
    rows, cols = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    y = np.zeros((x.shape[0], rows, cols, kernel.shape[3]))
    kernel_grad, xp_grad = np.zeros(kernel.shape), np.zeros(xp.shape)
    for i in range(kh):
        for j in range(kw):
            window = (
                slice(None),
                slice(i, i + stride * (rows - 1) + 1, stride),
                slice(j, j + stride * (cols - 1) + 1, stride),
            )
            y += xp[window] @ kernel[i, j]
            kernel_grad[i, j] = np.einsum("nhwc,nhwo->co", xp[window], g)
            xp_grad[window] += g @ kernel[i, j].T
    (top, _), (left, _) = pads
    return y, kernel_grad, xp_grad[:, top : top + x.shape[1], left : left + x.shape[2]]


CONV_CASES = [
    ((3, 3), 1, "VALID", (2, 10, 10, 4)),
    ((8, 8), 4, "VALID", (2, 20, 20, 3)),
    ((3, 3), 1, "SAME", (2, 9, 7, 5)),
    ((4, 4), 2, "SAME", (1, 9, 8, 3)),
]


@pytest.mark.parametrize("kernel_size, stride, padding, shape", CONV_CASES)
def test_conv_and_its_gradients_equal_a_numpy_convolution(kernel_size, stride, padding, shape):
    """``networks.Conv`` has ``nn.Conv``'s parameters (names, shapes, initial values) and
    its output, kernel gradient and input gradient are a NumPy loop's, on random inputs."""
    import flax.linen as nn

    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    conv = networks.Conv(6, kernel_size, (stride, stride), padding)
    params = conv.init(jax.random.key(1), x)
    flax_conv = nn.Conv(6, kernel_size, (stride, stride), padding=padding, kernel_init=networks.orthogonal())
    assert jax.tree.all(jax.tree.map(np.array_equal, params, flax_conv.init(jax.random.key(1), x)))
    params = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
    kernel, bias = (np.asarray(params["params"][name], np.float64) for name in ("kernel", "bias"))

    g = rng.normal(size=conv.apply(params, x).shape)
    y, kernel_grad, x_grad = numpy_convolution(x, kernel, stride, padding, g)
    np.testing.assert_allclose(conv.apply(params, x), y + bias, rtol=1e-4, atol=1e-4)
    grads = jax.grad(lambda p, x: jnp.sum(conv.apply(p, x) * g), argnums=(0, 1))(params, x)
    np.testing.assert_allclose(grads[0]["params"]["kernel"], kernel_grad, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads[0]["params"]["bias"], g.sum(axis=(0, 1, 2)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads[1], x_grad, rtol=1e-4, atol=1e-3)


def test_conv_keeps_leading_dims_and_refuses_bad_input():
    conv = networks.Conv(5, (3, 3))
    x = jnp.ones((2, 3, 6, 6, 4), jnp.uint8)  # two leading dims, integer pixels
    params = jax.eval_shape(conv.init, jax.random.key(0), x)
    assert jax.eval_shape(conv.apply, params, x).shape == (2, 3, 4, 4, 5)
    assert jax.eval_shape(conv.apply, params, x[0, 0]).shape == (4, 4, 5)  # one image
    with pytest.raises(ValueError, match="padding must be 'VALID' or 'SAME'"):
        jax.eval_shape(networks.Conv(5, (3, 3), padding="CIRCULAR").init, jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"images \[..., H, W, C\]"):
        jax.eval_shape(conv.init, jax.random.key(0), jnp.ones((6, 4)))


def test_conv_in_a_scan_has_no_xla_convolution_on_cpu_and_keeps_it_elsewhere():
    """Inside ``lax.scan`` XLA:CPU leaves a convolution's weight gradient a naive loop, so
    on CPU the convolution is a product of patches; CUDA and TPU keep XLA's convolution."""
    conv = networks.Conv(4, (3, 3))
    x = jnp.ones((2, 6, 6, 3))
    params = jax.eval_shape(conv.init, jax.random.key(0), x)

    def training_loop(params, x):
        def sgd(params, _):
            grads = jax.grad(lambda p: jnp.sum(conv.apply(p, x) ** 2))(params)
            return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), None

        return jax.lax.scan(sgd, params, None, length=3)[0]

    def convolutions(platform):
        exported = jax.export.export(jax.jit(training_loop), platforms=[platform])(params, x)
        return exported.mlir_module().count("stablehlo.convolution")

    assert convolutions("cpu") == 0 and convolutions("cuda") >= 2 and convolutions("tpu") >= 2
