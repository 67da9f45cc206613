"""Tests for ``jaxrl.distributions`` against float64 NumPy formulas written here.

Statistical tests use fixed keys and a tolerance of 4 standard errors (computed from
the reference distribution), so they fail with probability well below 1e-3 for a
correct implementation and are deterministic for a given JAX version.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import distributions as D

LOG_2PI = math.log(2 * math.pi)


# --------------------------------------------------------------------------------------
# NumPy references (float64).


def np_log_softmax(logits):
    x = np.asarray(logits, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_normal_log_prob(x, loc, scale):
    x, loc, scale = (np.asarray(v, np.float64) for v in (x, loc, scale))
    return np.sum(-0.5 * ((x - loc) / scale) ** 2 - np.log(scale) - 0.5 * LOG_2PI, axis=-1)


def np_normal_entropy(scale):
    return np.sum(0.5 * np.log(2 * np.pi * np.e * np.asarray(scale, np.float64) ** 2), axis=-1)


def np_log_one_minus_tanh_sq(u):
    """log(1 - tanh(u)^2) = log(sech(u)^2), in float64 (exact for |u| up to ~350)."""
    u = np.abs(np.asarray(u, np.float64))
    return 2.0 * (np.log(2.0) - u - np.log1p(np.exp(-2.0 * u)))


def np_tanh_normal_log_prob_from_u(u, loc, scale):
    return np_normal_log_prob(u, loc, scale) - np.sum(np_log_one_minus_tanh_sq(u), axis=-1)


def np_tanh_normal_log_prob_naive(u, loc, scale):
    """The textbook change of variables, literally (fine in float64 for moderate u)."""
    u = np.asarray(u, np.float64)
    return np_normal_log_prob(u, loc, scale) - np.sum(np.log(1.0 - np.tanh(u) ** 2), axis=-1)


RNG = np.random.default_rng(0)
B, K, A = 6, 5, 3


# --------------------------------------------------------------------------------------
# Categorical


@pytest.fixture(scope="module")
def logits():
    x = RNG.normal(scale=2.0, size=(B, K)).astype(np.float32)
    x[0] = [0.0, 0.0, 0.0, 0.0, 0.0]  # uniform row
    x[1, 2] += 30.0  # nearly deterministic row
    return x


def test_categorical_log_prob(logits):
    d = D.Categorical(jnp.asarray(logits))
    ref = np_log_softmax(logits)
    for k in range(K):
        a = np.full(B, k, np.int32)
        np.testing.assert_allclose(d.log_prob(jnp.asarray(a)), ref[:, k], rtol=1e-5, atol=1e-5)
    a = RNG.integers(0, K, size=B)
    np.testing.assert_allclose(d.log_prob(jnp.asarray(a)), ref[np.arange(B), a], rtol=1e-5, atol=1e-5)
    assert d.log_prob(jnp.asarray(a)).shape == (B,)
    np.testing.assert_allclose(d.log_prob(jnp.zeros(B, jnp.int32))[0], -np.log(K), rtol=1e-6)


def test_categorical_entropy_mode_probs(logits):
    d = D.Categorical(jnp.asarray(logits))
    logp = np_log_softmax(logits)
    p = np.exp(logp)
    np.testing.assert_allclose(d.entropy(), -(p * logp).sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.entropy()[0], np.log(K), rtol=1e-6)
    assert float(d.entropy()[1]) < 1e-6
    np.testing.assert_array_equal(d.mode(), np.argmax(logits, -1))
    assert d.mode().dtype == jnp.int32
    np.testing.assert_allclose(d.probs(), p, rtol=1e-5, atol=1e-7)


def test_categorical_batch_dims():
    x = RNG.normal(size=(2, 3, K)).astype(np.float32)
    d = D.Categorical(jnp.asarray(x))
    a = RNG.integers(0, K, size=(2, 3))
    ref = np.take_along_axis(np_log_softmax(x), a[..., None], -1)[..., 0]
    np.testing.assert_allclose(d.log_prob(jnp.asarray(a)), ref, rtol=1e-5, atol=1e-5)
    assert d.entropy().shape == (2, 3) and d.mode().shape == (2, 3)
    assert d.sample(jax.random.key(0)).shape == (2, 3)


def test_categorical_sampling_frequencies(logits):
    n = 20_000
    d = D.Categorical(jnp.asarray(logits))
    samples = jax.jit(jax.vmap(d.sample))(jax.random.split(jax.random.key(1), n))
    assert samples.shape == (n, B) and samples.dtype == jnp.int32
    samples = np.asarray(samples)
    assert samples.min() >= 0 and samples.max() < K
    p = np.exp(np_log_softmax(logits))
    freq = np.stack([(samples == k).mean(0) for k in range(K)], axis=-1)  # [B, K]
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) <= 4 * se + 1e-4), np.abs(freq - p) / (se + 1e-12)
    # Different keys give different samples.
    s1 = d.sample(jax.random.key(2))
    np.testing.assert_array_equal(s1, d.sample(jax.random.key(2)))  # deterministic per key
    assert s1.shape == (B,)


def test_categorical_jit_pytree(logits):
    d = D.Categorical(jnp.asarray(logits))
    a = jnp.asarray(RNG.integers(0, K, size=B), jnp.int32)
    f = jax.jit(lambda dist, act: (dist.log_prob(act), dist.entropy()))
    lp, ent = f(d, a)
    np.testing.assert_allclose(lp, d.log_prob(a), rtol=1e-6)
    np.testing.assert_allclose(ent, d.entropy(), rtol=1e-6)
    # Gradient of log_prob w.r.t. logits: onehot(a) - softmax(logits).
    g = jax.grad(lambda lg: D.Categorical(lg).log_prob(a).sum())(jnp.asarray(logits))
    ref = np.eye(K)[np.asarray(a)] - np.exp(np_log_softmax(logits))
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------
# MultiCategorical (factored over MultiDiscrete choices)

NVEC = (3, 1, 5)  # unequal, with a single-valued choice (log-prob 0, entropy 0)


def np_split(logits, nvec):
    """Each choice's logits ``[..., n_i]``, cut from ``logits [..., sum(nvec)]``."""
    return np.split(np.asarray(logits, np.float64), np.cumsum(nvec)[:-1], axis=-1)


@pytest.fixture(scope="module")
def multi_logits():
    x = RNG.normal(scale=2.0, size=(B, sum(NVEC))).astype(np.float32)
    x[1, 4 + 2] += 30.0  # choice 2 nearly deterministic in row 1
    return x


def test_multi_categorical_log_prob_entropy_mode(multi_logits):
    d = D.MultiCategorical(jnp.asarray(multi_logits), NVEC)
    parts = np_split(multi_logits, NVEC)
    action = np.stack([RNG.integers(0, n, size=B) for n in NVEC], axis=-1)  # [B, k]
    ref_log_prob = sum(np_log_softmax(part)[np.arange(B), action[:, i]] for i, part in enumerate(parts))
    ref_entropy = sum(-(np.exp(np_log_softmax(part)) * np_log_softmax(part)).sum(-1) for part in parts)
    log_prob, entropy, mode = d.log_prob(jnp.asarray(action, jnp.int32)), d.entropy(), d.mode()
    assert log_prob.shape == entropy.shape == (B,) and mode.shape == (B, len(NVEC)) and mode.dtype == jnp.int32
    np.testing.assert_allclose(log_prob, ref_log_prob, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy, ref_entropy, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mode, np.stack([part.argmax(-1) for part in parts], axis=-1))
    # Gradient of log_prob: onehot(a_i) - softmax(logits_i) within each choice's slice.
    g = jax.grad(lambda lg: D.MultiCategorical(lg, NVEC).log_prob(jnp.asarray(action, jnp.int32)).sum())(
        jnp.asarray(multi_logits)
    )
    ref_g = np.concatenate(
        [np.eye(n)[action[:, i]] - np.exp(np_log_softmax(part)) for i, (n, part) in enumerate(zip(NVEC, parts))], -1
    )
    np.testing.assert_allclose(g, ref_g, rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(jax.grad(lambda lg: D.MultiCategorical(lg, NVEC).entropy().sum())(multi_logits)))


def test_multi_categorical_sampling_frequencies(multi_logits):
    n = 20_000
    d = D.MultiCategorical(jnp.asarray(multi_logits), NVEC)
    samples = jax.jit(jax.vmap(d.sample))(jax.random.split(jax.random.key(3), n))
    assert samples.shape == (n, B, len(NVEC)) and samples.dtype == jnp.int32
    samples = np.asarray(samples)
    for i, (k, part) in enumerate(zip(NVEC, np_split(multi_logits, NVEC))):
        assert samples[..., i].min() >= 0 and samples[..., i].max() < k
        p = np.exp(np_log_softmax(part))  # [B, k]
        freq = np.stack([(samples[..., i] == a).mean(0) for a in range(k)], axis=-1)
        se = np.sqrt(p * (1 - p) / n)
        assert np.all(np.abs(freq - p) <= 4 * se + 1e-4), np.abs(freq - p) / (se + 1e-12)
    # Choices are independent: the joint frequency of two choices is the product.
    p0, p2 = (np.exp(np_log_softmax(part)) for part in np_split(multi_logits, NVEC)[::2])
    joint = ((samples[..., 0] == 0) & (samples[..., 2] == 0)).mean(0)
    expected = p0[:, 0] * p2[:, 0]
    assert np.all(np.abs(joint - expected) <= 4 * np.sqrt(expected * (1 - expected) / n) + 1e-4)


def test_multi_categorical_batch_dims_and_pytree():
    x = RNG.normal(size=(2, 3, sum(NVEC))).astype(np.float32)
    d = D.MultiCategorical(jnp.asarray(x), NVEC)
    assert d.sample(jax.random.key(0)).shape == (2, 3, 3) and d.entropy().shape == (2, 3)
    assert jax.tree.leaves(d) == [d.logits]  # nvec is static: tree maps and vmaps see the logits only
    first = jax.tree.map(lambda leaf: leaf[0], d)
    np.testing.assert_allclose(jax.jit(lambda dist: dist.entropy())(first), d.entropy()[0], rtol=1e-6)
    with pytest.raises(ValueError, match=r"logits \[\.\.\., 9\] for nvec \[3, 1, 5\]"):
        D.MultiCategorical(jnp.zeros((2, 8)), NVEC).entropy()


# --------------------------------------------------------------------------------------
# Normal


@pytest.fixture(scope="module")
def normal_params():
    loc = RNG.normal(size=(B, A)).astype(np.float32)
    scale = RNG.uniform(0.1, 2.0, size=(B, A)).astype(np.float32)
    return loc, scale


def test_normal_log_prob_entropy_mode(normal_params):
    loc, scale = normal_params
    d = D.Normal(jnp.asarray(loc), jnp.asarray(scale))
    x = (loc + scale * RNG.normal(size=(B, A)) * 2).astype(np.float32)
    lp = d.log_prob(jnp.asarray(x))
    assert lp.shape == (B,)
    np.testing.assert_allclose(lp, np_normal_log_prob(x, loc, scale), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.log_prob(jnp.asarray(loc)), np_normal_log_prob(loc, loc, scale), rtol=1e-5, atol=1e-5)
    assert d.entropy().shape == (B,)
    np.testing.assert_allclose(d.entropy(), np_normal_entropy(scale), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(d.mode(), loc)


def test_normal_entropy_broadcast_scale():
    # A shared scale [A] with batched loc [B, A] (state-independent log std).
    loc = jnp.zeros((4, 2))
    scale = jnp.array([0.5, 3.0])
    d = D.Normal(loc, scale)
    assert d.entropy().shape == (4,)  # batch dims follow loc
    np.testing.assert_allclose(d.entropy(), np.full(4, np_normal_entropy([0.5, 3.0])), rtol=1e-6)
    x = RNG.normal(size=(4, 2)).astype(np.float32)
    np.testing.assert_allclose(
        d.log_prob(jnp.asarray(x)), np_normal_log_prob(x, np.zeros((4, 2)), np.array([0.5, 3.0])), rtol=1e-5, atol=1e-5
    )


def test_normal_sampling_moments(normal_params):
    loc, scale = normal_params
    n = 20_000
    d = D.Normal(jnp.asarray(loc), jnp.asarray(scale))
    s = np.asarray(jax.jit(jax.vmap(d.sample))(jax.random.split(jax.random.key(0), n)), np.float64)
    assert s.shape == (n, B, A)
    se_mean = scale / np.sqrt(n)
    assert np.all(np.abs(s.mean(0) - loc) <= 4 * se_mean)
    se_std = scale / np.sqrt(2 * n)
    assert np.all(np.abs(s.std(0) - scale) <= 4 * se_std)
    # Dimensions are independent: correlation of two action dims ~ 0.
    z = (s - loc) / scale
    corr = (z[:, :, 0] * z[:, :, 1]).mean(0)
    assert np.all(np.abs(corr) <= 4 / np.sqrt(n))


# --------------------------------------------------------------------------------------
# TanhNormal


def test_tanh_normal_log_prob_moderate(normal_params):
    loc, scale = normal_params
    d = D.TanhNormal(jnp.asarray(loc), jnp.asarray(scale))
    u = RNG.uniform(-2.5, 2.5, size=(B, A))
    a = np.tanh(u).astype(np.float32)
    u32 = np.arctanh(a.astype(np.float64))  # the pre-image of the float32 action
    lp = d.log_prob(jnp.asarray(a))
    assert lp.shape == (B,)
    ref = np_tanh_normal_log_prob_naive(u32, loc, scale)
    np.testing.assert_allclose(lp, ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ref, np_tanh_normal_log_prob_from_u(u32, loc, scale), rtol=1e-10)


def test_tanh_normal_log_prob_at_boundary_is_finite():
    d = D.TanhNormal(jnp.zeros((2, 2)), jnp.ones((2, 2)))
    lp = d.log_prob(jnp.array([[1.0, -1.0], [0.0, 1.0]]))
    assert np.all(np.isfinite(lp))
    # Clipped to 1 - eps: equal to the density at arctanh(1 - eps).
    eps = 1e-6
    u = np.arctanh(np.float32(1.0 - eps).astype(np.float64))
    ref = np_tanh_normal_log_prob_from_u(np.array([u, -u]), np.zeros(2), np.ones(2))
    np.testing.assert_allclose(lp[0], ref, rtol=1e-3)


def test_tanh_normal_sample_and_log_prob_consistent(normal_params):
    loc, scale = normal_params
    d = D.TanhNormal(jnp.asarray(loc) * 0.5, jnp.asarray(scale) * 0.5)
    keys = jax.random.split(jax.random.key(3), 200)
    a, lp = jax.jit(jax.vmap(d.sample_and_log_prob))(keys)
    assert a.shape == (200, B, A) and lp.shape == (200, B)
    a, lp = np.asarray(a), np.asarray(lp)
    assert np.all(np.abs(a) < 1)
    inside = np.all(np.abs(a) < 0.99, axis=-1)  # away from the boundary
    assert inside.mean() > 0.5
    lp_of_sample = np.asarray(jax.jit(jax.vmap(d.log_prob))(jnp.asarray(a)))
    np.testing.assert_allclose(lp[inside], lp_of_sample[inside], rtol=1e-3, atol=2e-3)
    # And both match the float64 formula at the float64 pre-image of the action.
    u = np.arctanh(a.astype(np.float64))
    ref = np_tanh_normal_log_prob_naive(u, np.asarray(d.loc, np.float64), np.asarray(d.scale, np.float64))
    np.testing.assert_allclose(lp[inside], ref[inside], rtol=1e-3, atol=2e-3)
    # sample() draws from the same distribution as sample_and_log_prob (same key).
    np.testing.assert_allclose(jax.jit(jax.vmap(d.sample))(keys), a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loc", [8.0, -8.0, 12.0])
def test_tanh_normal_stable_for_large_u(loc):
    # In float32, 1 - tanh(u)^2 loses most digits at |u| ~ 8 and is exactly 0 from
    # |u| ~ 9.1; the log-prob from the pre-squash value must stay finite and accurate.
    locs = jnp.full((4, A), loc, jnp.float32)
    scales = jnp.full((4, A), 0.1, jnp.float32)
    d = D.TanhNormal(locs, scales)
    key = jax.random.key(7)
    a, lp = d.sample_and_log_prob(key)
    assert np.all(np.isfinite(lp))
    assert np.all(np.abs(a) <= 1.0)
    # The pre-squash sample: TanhNormal(loc, scale) samples tanh of Normal(loc, scale)
    # with the same key (checked above away from the boundary).
    u = np.asarray(D.Normal(locs, scales).sample(key), np.float64)
    np.testing.assert_allclose(np.tanh(u), a, atol=1e-6)
    ref = np_tanh_normal_log_prob_from_u(u, np.full((4, A), loc), np.full((4, A), 0.1))
    np.testing.assert_allclose(lp, ref, rtol=1e-5, atol=1e-3)
    # The density of a near-saturated action is huge: log_prob ~ +2|u| per dim.
    assert np.all(lp > 0)


def test_tanh_normal_naive_formula_fails_in_float32():
    # Sanity check of the premise of the test above.
    with np.errstate(divide="ignore"):
        assert not np.isfinite(np.log(np.float32(1) - np.tanh(np.float32(12.0)) ** 2))
    naive8 = np.log(np.float32(1) - np.tanh(np.float32(8.0)) ** 2)
    assert abs(naive8 - np_log_one_minus_tanh_sq(8.0)) > 1e-3


def test_tanh_normal_mode_and_sample_range(normal_params):
    loc, scale = normal_params
    d = D.TanhNormal(jnp.asarray(loc), jnp.asarray(scale))
    np.testing.assert_allclose(d.mode(), np.tanh(loc.astype(np.float64)), rtol=1e-6, atol=1e-7)
    s = d.sample(jax.random.key(0))
    assert s.shape == (B, A)
    assert np.all(np.abs(s) <= 1.0)


def test_tanh_normal_entropy_monte_carlo():
    # -E[log p(a)] = H(Normal) + E[sum log(1 - tanh(u)^2)], by Gauss-Hermite quadrature.
    loc = np.array([[0.0, 1.5], [-0.5, 0.3]], np.float32)
    scale = np.array([[1.0, 0.5], [2.0, 0.2]], np.float32)
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)  # weight exp(-x^2 / 2)
    weights = weights / weights.sum()
    u = loc[..., None].astype(np.float64) + scale[..., None] * nodes  # [2, 2, 80]
    e_jac = (np_log_one_minus_tanh_sq(u) * weights).sum(-1)  # [2, 2]
    ref = np_normal_entropy(scale) + e_jac.sum(-1)
    # Standard deviation of -log p(a), for the Monte-Carlo tolerance.
    z = (u - loc[..., None]) / scale[..., None]
    per = (0.5 * z**2 + np.log(scale[..., None]) + 0.5 * LOG_2PI) + np_log_one_minus_tanh_sq(u)
    # Action dims are independent, so the variances of their terms add.
    var = ((per**2 * weights).sum(-1) - (per * weights).sum(-1) ** 2).sum(-1)
    n = 20_000
    d = D.TanhNormal(jnp.asarray(loc), jnp.asarray(scale))
    est = jax.jit(lambda k: d.entropy(k, num_samples=n))(jax.random.key(5))
    assert est.shape == (2,)
    np.testing.assert_array_less(np.abs(np.asarray(est) - ref), 4 * np.sqrt(var / n) + 1e-4)


def test_categorical_entropy_ignores_masked_actions():
    dist = D.Categorical(jnp.array([[0.0, -jnp.inf, 0.0]]))
    np.testing.assert_allclose(dist.entropy(), [np.log(2.0)], rtol=1e-6)
