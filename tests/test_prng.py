"""jaxrl.prng: JAX's default threefry numbers, bit for bit, from straight-line code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import prng

DRAWS = {
    "split": lambda k: jax.random.key_data(jax.random.split(k, 5)),
    "split 2-d": lambda k: jax.random.key_data(jax.random.split(k, (3, 4))),
    "fold_in": lambda k: jax.random.key_data(jax.random.fold_in(k, 4_000_000_123)),
    "bits 8": lambda k: jax.random.bits(k, (7,), jnp.uint8),
    "bits 16": lambda k: jax.random.bits(k, (3, 5), jnp.uint16),
    "bits 32": lambda k: jax.random.bits(k, (2, 3, 4), jnp.uint32),
    "uniform": lambda k: jax.random.uniform(k, (9,)),
    "normal": lambda k: jax.random.normal(k, (4, 2)),
    "randint": lambda k: jax.random.randint(k, (6,), 0, 1_000_003),
    "permutation": lambda k: jax.random.permutation(k, 33),
    "categorical": lambda k: jax.random.categorical(k, jnp.linspace(-1.0, 1.0, 24).reshape(4, 6)),
}


@pytest.mark.parametrize("seed", [0, 7, 2**31 + 5])
def test_straight_keys_draw_what_default_keys_draw(seed):
    key = jax.random.key(seed)
    straight = prng.straight(key)
    assert straight.dtype == jax.random.wrap_key_data(jnp.zeros(2, jnp.uint32), impl=prng.THREEFRY_STRAIGHT).dtype
    for name, draw in DRAWS.items():
        expected = np.asarray(draw(key))
        np.testing.assert_array_equal(np.asarray(draw(straight)), expected, err_msg=name)
        np.testing.assert_array_equal(np.asarray(jax.jit(draw)(straight)), expected, err_msg=f"{name} under jit")


def test_straight_under_vmap_and_for_raw_keys():
    keys = jax.random.split(jax.random.key(3), 4)

    def draws(key):
        sub = jax.random.fold_in(jax.random.split(key)[1], 11)
        return jax.random.uniform(sub, (3,)), jax.random.randint(sub, (2,), 0, 10)

    expected = jax.vmap(draws)(keys)
    got = jax.jit(jax.vmap(lambda k: draws(prng.straight(k))))(keys)
    jax.tree.map(np.testing.assert_array_equal, got, expected)
    raw = jax.random.key_data(keys)  # legacy uint32 [..., 2] keys
    jax.tree.map(np.testing.assert_array_equal, jax.vmap(lambda k: draws(prng.straight(k)))(raw), expected)

    # batched in other places: the data folded in, two levels of keys, a key on axis 1
    key, data = jax.random.key(8), jnp.arange(5, dtype=jnp.uint32)
    fold = lambda k, d: jax.random.key_data(jax.random.fold_in(k, d))  # noqa: E731
    np.testing.assert_array_equal(
        jax.jit(jax.vmap(fold, in_axes=(None, 0)))(prng.straight(key), data),
        jax.vmap(fold, in_axes=(None, 0))(key, data),
    )
    grid = jax.random.split(jax.random.key(9), (3, 2))
    normal = lambda k: jax.random.normal(k, (2, 3))  # noqa: E731
    for axes in ((0, 0), (1, 0)):
        twice = lambda f: jax.vmap(jax.vmap(f, in_axes=axes[1]), in_axes=axes[0])  # noqa: E731
        np.testing.assert_array_equal(
            jax.jit(twice(lambda k: normal(prng.straight(k))))(grid), twice(normal)(grid), err_msg=str(axes)
        )


def test_rolled_returns_a_default_key_of_the_same_data():
    key = jax.random.key(5)
    back = prng.rolled(prng.straight(key))
    assert back.dtype == key.dtype
    np.testing.assert_array_equal(jax.random.key_data(back), jax.random.key_data(key))
    assert prng.rolled(key) is key


def test_other_keys_pass_through():
    rbg = jax.random.key(0, impl="unsafe_rbg")
    assert prng.straight(rbg) is rbg
    straight = prng.straight(jax.random.key(0))
    assert prng.straight(straight) is straight
    not_a_key = jnp.zeros(3, jnp.float32)
    assert prng.straight(not_a_key) is not_a_key


def test_on_cpu_a_draw_read_many_times_is_hashed_once():
    def read_by(consumers):
        def f(key):
            u = jax.random.uniform(prng.straight(key), (2,))
            return [jnp.sin(u[0] * c) + u[1] ** c for c in range(1, consumers + 1)]

        return jax.jit(f).lower(jax.random.key(0)).compile().as_text().count(" xor(")

    once, many = read_by(1), read_by(6)
    assert once >= 20  # the twenty rounds are there
    assert many < 2 * once, (once, many)  # not a copy of the hash per reader


def test_the_hash_is_made_a_kernel_of_its_own_only_for_cpu():
    def draws(key):
        key = prng.straight(key)
        return jax.random.uniform(key, (3,)), jax.random.key_data(jax.random.split(key, 4))

    def divisions(platform):
        exported = jax.export.export(jax.jit(draws), platforms=[platform])(jax.random.key(0))
        return exported.mlir_module().count("stablehlo.divide")

    assert divisions("cpu") == 2 and divisions("cuda") == 0 and divisions("tpu") == 0
