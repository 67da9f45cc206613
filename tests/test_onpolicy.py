"""Tests for ``jaxrl.algorithms.onpolicy.shuffled_minibatches`` (PPO's minibatch shuffling).

The checks: every row lands in exactly one minibatch slot, all leaves share one order,
and over many keys each row is equally likely at each position (a chi-square test
against the uniform distribution, computed here with NumPy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algorithms import onpolicy


@pytest.mark.parametrize("batch_size, num_minibatches", [(512, 4), (1000, 8), (70_000, 2)])
def test_every_row_once_and_leaves_share_the_order(batch_size, num_minibatches):
    rows = np.arange(batch_size)
    batch = {"index": jnp.asarray(rows), "pair": jnp.asarray(np.stack([rows, -rows], axis=1), jnp.float32)}
    minibatches = jax.jit(onpolicy.shuffled_minibatches, static_argnums=2)(jax.random.key(3), batch, num_minibatches)
    index = np.asarray(minibatches["index"])
    assert index.shape == (num_minibatches, batch_size // num_minibatches)
    assert minibatches["pair"].shape == (num_minibatches, batch_size // num_minibatches, 2)
    np.testing.assert_array_equal(np.sort(index.ravel()), rows)
    np.testing.assert_array_equal(np.asarray(minibatches["pair"])[..., 0], index)
    np.testing.assert_array_equal(np.asarray(minibatches["pair"])[..., 1], -index)
    assert not np.array_equal(index.ravel(), rows)  # shuffled, not the identity


@pytest.mark.parametrize("batch_size", [8, 512])
def test_each_row_is_equally_likely_at_each_position(batch_size):
    num_keys = 4000
    shuffle = jax.vmap(lambda key: onpolicy.shuffled_minibatches(key, jnp.arange(batch_size), 1)[0])
    orders = np.asarray(jax.jit(shuffle)(jax.random.split(jax.random.key(0), num_keys)))
    # Counts of (row, position bin) over the keys, for 8 rows and 8 equal position bins.
    rows = np.linspace(0, batch_size - 1, 8).astype(int)
    positions = np.stack([np.argmax(orders == row, axis=1) for row in rows])  # [8, num_keys]
    counts = np.stack([np.bincount(p * 8 // batch_size, minlength=8) for p in positions])
    expected = num_keys / 8
    chi_square = ((counts - expected) ** 2 / expected).sum()
    # 8 x 8 cells, 49 degrees of freedom: P(chi2 > 100) is about 2e-5 under uniformity.
    assert chi_square < 100, counts
    # Neighbouring rows come out in either order equally often (ties keep index order).
    first_before_second = np.mean(np.argmax(orders == 0, axis=1) < np.argmax(orders == 1, axis=1))
    assert abs(first_before_second - 0.5) < 0.04
