"""Tests for ``jaxrl.buffers`` against independent plain-Python / NumPy references.

The references below are written from the documented behaviour, not ported from the
JAX code:

* the uniform buffer: one Python-list ring of ``R`` slots per env lane;
* n-step windows: a loop over each lane's full time-ordered history of added steps
  (everything ever added, not just what the ring still holds), stopping at the first
  terminated/truncated step and at the newest step added;
* the sum-tree: float64 leaf sums, and ``np.searchsorted`` over the cumulative sum;
* prioritized replay: ``(|td| + eps) ** alpha`` and the importance-sampling weights in
  float64 NumPy from the tree's leaves.

Every jitted function is defined once at module level and used with fixed shapes (a
buffer of ``R = 7`` rows x ``N = 3`` envs, a few fixed batch sizes), so the module
compiles each of them only once or a few times.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.buffers import prioritized, replay, sumtree

R = 7  # rows
N = 3  # env lanes
CAPACITY = R * N  # 21 transitions
NUM_KEYS = 200  # sampling-frequency tests: NUM_KEYS x FREQ_BATCH = 200k draws
FREQ_BATCH = 1000
# Max |empirical frequency - probability| allowed over 200k draws. For independent
# draws the standard deviation of one frequency is at most sqrt(0.25 / 200_000) =
# 0.00112, so 0.005 is > 4.4 sigma for every slot (stratified sampling only lowers the
# variance); the seeds are fixed, so the tests are deterministic anyway.
FREQ_TOL = 0.005


# --------------------------------------------------------------------------------------
# Jitted once at module level (fixed shapes)
# --------------------------------------------------------------------------------------

_add = jax.jit(replay.add)
_add_sequence = jax.jit(replay.add_sequence)
_sample = jax.jit(replay.sample, static_argnames=("batch_size",))
_n_step = jax.jit(replay.n_step, static_argnames=("n",))


@jax.jit
def _uniform_many(state, keys):
    """Rows and lanes ``[K, 512]`` of uniformly sampled transitions for ``K`` keys."""
    index = jax.vmap(lambda key: replay.sample_index(state, key, 512))(keys)
    return index.row, index.lane


_tree_update = jax.jit(sumtree.update)
_tree_find_values = jax.jit(sumtree.find)


def _tree_find(tree, mass):
    """The leaf indices :func:`sumtree.find` returns, after checking its values are
    those leaves'."""
    found, values = _tree_find_values(tree, mass)
    np.testing.assert_array_equal(np.asarray(values), np.asarray(sumtree.leaves(tree))[np.asarray(found)])
    return found


@jax.jit
def _tree_sample_many(tree, keys):
    return jax.vmap(lambda key: sumtree.stratified_sample(tree, key, FREQ_BATCH)[0])(keys)


@jax.jit
def _tree_sample_four(tree, keys):
    """Batches of 4: each stratum (a quarter of the mass) spans several leaves."""
    return jax.vmap(lambda key: sumtree.stratified_sample(tree, key, 4)[0])(keys)


_p_add = jax.jit(prioritized.add)
_p_sample = jax.jit(prioritized.sample, static_argnames=("batch_size",))
_p_update = jax.jit(prioritized.update_priorities)


@jax.jit
def _p_sample_many(state, keys, beta):
    """[K, FREQ_BATCH] sampled flat slots and IS weights for K keys."""
    index, weights = jax.vmap(lambda key: prioritized.sample_index(state, key, FREQ_BATCH, beta))(keys)
    return index.row * N + index.lane, weights


# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------


def example_transition():
    """One transition: nested dict observations of two dtypes, plus the n-step fields."""
    obs = {"pixels": np.zeros((2, 2), np.uint8), "vec": np.zeros(3, np.float32)}
    return {
        "obs": obs,
        "action": np.zeros((), np.int32),
        "reward": np.zeros((), np.float32),
        "terminated": np.zeros((), bool),
        "truncated": np.zeros((), bool),
        "next_obs": {"pixels": np.zeros((2, 2), np.uint8), "vec": np.zeros(3, np.float32)},
    }


def random_rows(rng, num_rows, p_term=(0.2, 0.1, 0.0), p_trunc=(0.15, 0.1, 0.0)):
    """``num_rows`` rows of ``N`` random transitions, leaves ``[num_rows, N, ...]``.

    Lane ``j`` terminates with probability ``p_term[j]`` and truncates with
    ``p_trunc[j]`` independently (so some steps are both); by default lane 2 never ends."""
    shape = (num_rows, N)

    def obs():
        return {
            "pixels": rng.integers(0, 256, shape + (2, 2)).astype(np.uint8),
            "vec": rng.normal(size=shape + (3,)).astype(np.float32),
        }

    return {
        "obs": obs(),
        "action": rng.integers(-1000, 1000, shape).astype(np.int32),
        "reward": rng.normal(size=shape).astype(np.float32),
        "terminated": rng.random(shape) < np.asarray(p_term),
        "truncated": rng.random(shape) < np.asarray(p_trunc),
        "next_obs": obs(),
    }


def take(tree, *index):
    return jax.tree.map(lambda x: np.asarray(x)[index], tree)


def assert_tree_equal(actual, expected, what=""):
    actual_leaves, actual_def = jax.tree.flatten(actual)
    expected_leaves, expected_def = jax.tree.flatten(expected)
    assert actual_def == expected_def, what
    for a, e in zip(actual_leaves, expected_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e), err_msg=what)


def stack(*trees):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def fill(seed, num_rows, state=None):
    """A buffer with ``num_rows`` random rows added one at a time, and the rows."""
    rng = np.random.default_rng(seed)
    state = replay.init(example_transition(), CAPACITY, N) if state is None else state
    rows = random_rows(rng, num_rows)
    for t in range(num_rows):
        state = _add(state, take(rows, t))
    return state, rows


# --------------------------------------------------------------------------------------
# Reference ring buffer
# --------------------------------------------------------------------------------------


class RingReference:
    """One env lane: a Python list of ``size`` slots written in order, wrapping around."""

    def __init__(self, size):
        self.slots = [None] * size
        self.next = 0
        self.count = 0

    def append(self, item):
        self.slots[self.next] = item
        self.next = (self.next + 1) % len(self.slots)
        self.count = min(self.count + 1, len(self.slots))


# --------------------------------------------------------------------------------------
# 1. Uniform ring buffer contents
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_ring_contents_match_list_reference(seed):
    rng = np.random.default_rng(seed)
    state = replay.init(example_transition(), CAPACITY, N)
    assert (state.num_rows, state.num_envs, state.capacity) == (R, N, CAPACITY)
    zeros = take(state.data, 0, 0)
    lanes = [RingReference(R) for _ in range(N)]
    kinds = rng.choice(["add", "1", "2", "3"], size=25)
    kinds[:4] = ["add", "1", "2", "3"]  # every kind at least once
    total_rows = 0
    for kind in kinds:
        if kind == "add":
            items = random_rows(rng, 1)
            state = _add(state, take(items, 0))
        else:
            items = random_rows(rng, int(kind))
            state = _add_sequence(state, items)
        for t in range(len(items["action"])):
            for lane in range(N):
                lanes[lane].append(take(items, t, lane))
        total_rows += len(items["action"])

        ref = lanes[0]
        assert int(state.cursor) == ref.next
        assert int(state.size) == ref.count
        for lane, ring in enumerate(lanes):
            for row in range(R):
                expected = zeros if ring.slots[row] is None else ring.slots[row]
                assert_tree_equal(take(state.data, row, lane), expected, f"row {row} lane {lane}")
        for min_size in {1, ref.count * N - 1, ref.count * N, ref.count * N + 1, CAPACITY, CAPACITY + 1}:
            assert bool(replay.can_sample(state, min_size)) == (ref.count * N >= min_size), min_size
    assert total_rows > 2 * R  # wrapped around at least twice


def test_capacity_rounds_up_and_oversized_sequence_is_rejected():
    state = replay.init(example_transition(), capacity=19, num_envs=N)  # ceil(19 / 3) = 7 rows
    assert (state.num_rows, state.capacity) == (R, CAPACITY)
    rng = np.random.default_rng(3)
    state = _add_sequence(state, random_rows(rng, R))  # exactly R rows is allowed
    assert (int(state.cursor), int(state.size)) == (0, R)
    with pytest.raises(ValueError):
        replay.add_sequence(state, random_rows(rng, R + 1))


# --------------------------------------------------------------------------------------
# 2. Uniform sampling
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_rows", [3, 10])  # 3: partly filled; 10: wrapped (cursor 3)
def test_uniform_sampling_covers_exactly_the_filled_slots(num_rows):
    state, _ = fill(10 + num_rows, num_rows)
    filled_rows = min(num_rows, R)
    assert int(state.size) == filled_rows

    batch, index = _sample(state, jax.random.key(0), batch_size=64)
    assert_tree_equal(batch, take(state.data, np.asarray(index.row), np.asarray(index.lane)))

    rows, lanes = jax.device_get(_uniform_many(state, jax.random.split(jax.random.key(1), 64)))
    rows, lanes = rows.ravel(), lanes.ravel()
    assert rows.min() >= 0 and rows.max() < filled_rows
    assert lanes.min() >= 0 and lanes.max() < N
    counts = np.bincount(rows * N + lanes, minlength=CAPACITY)
    num_filled = filled_rows * N
    assert counts[num_filled:].sum() == 0
    assert counts[:num_filled].min() > 0
    # 32768 draws: the std of one frequency is <= sqrt(p (1 - p) / n) = 0.0018 (p = 1/9),
    # so a bound of 0.01 is > 5 sigma.
    freq = counts[:num_filled] / counts.sum()
    assert np.abs(freq - 1 / num_filled).max() < 0.01, freq


# --------------------------------------------------------------------------------------
# 3. n-step transitions
# --------------------------------------------------------------------------------------


def n_step_reference(history, t, n, gamma):
    """From step ``t`` of one lane's full ``history`` (list of per-step dicts, oldest
    first, the last one the newest step added): up to ``n`` steps, stopping after a step
    that terminated or truncated, and after the newest step."""
    reward, discount, m = 0.0, 1.0, 0
    for k in range(n):
        s = t + k
        if s >= len(history):
            break
        reward += discount * float(history[s]["reward"])
        discount *= gamma
        m += 1
        if history[s]["terminated"] or history[s]["truncated"]:
            break
    last = history[t + m - 1]
    return dict(
        reward=reward,
        discount=gamma**m,
        n_steps=m,
        next_obs=last["next_obs"],
        terminated=bool(last["terminated"]),
        truncated=bool(last["truncated"]),
        obs=history[t]["obs"],
        action=history[t]["action"],
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("num_rows", [5, 7, 12, 25])  # not wrapped, just full, wrapped, wrapped 3x
@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_matches_loop_reference(n, num_rows, seed):
    rng = np.random.default_rng(100 * seed + num_rows)
    rows = random_rows(rng, num_rows)
    # Lanes 0 and 1 end episodes at random (and lane 2 never); force one termination
    # only, one truncation only and one step that is both, in the newest rows, so they
    # are still stored.
    for step, lane, term, trunc in ((-2, 0, True, False), (-4, 0, False, True), (-3, 1, True, True)):
        rows["terminated"][step, lane], rows["truncated"][step, lane] = term, trunc
    state = replay.init(example_transition(), CAPACITY, N)
    added = 0
    while added < num_rows:  # mixed add / add_sequence with T in {1, 2, 3}
        t = int(min(rng.integers(1, 4), num_rows - added))
        chunk = take(rows, slice(added, added + t))
        state = _add_sequence(state, chunk) if t > 1 else _add(state, take(chunk, 0))
        added += t
    history = [[take(rows, t, lane) for t in range(num_rows)] for lane in range(N)]

    gamma = np.float32(rng.uniform(0.8, 0.999))
    rows, lanes = np.meshgrid(np.arange(R), np.arange(N), indexing="ij")
    index = replay.Index(jnp.asarray(rows.ravel(), jnp.int32), jnp.asarray(lanes.ravel(), jnp.int32))
    out = jax.device_get(_n_step(state, index, n, jnp.float32(gamma)))
    assert set(out) == {"obs", "action", "reward", "terminated", "truncated", "next_obs", "discount", "n_steps"}

    num_stored = min(num_rows, R)
    checked = 0
    for i, (row, lane) in enumerate(zip(rows.ravel(), lanes.ravel())):
        # The step held in `row`: the newest one with t % R == row (rows are written in order).
        candidates = [t for t in range(num_rows - num_stored, num_rows) if t % R == row]
        if not candidates:
            continue  # never written
        (t,) = candidates
        ref = n_step_reference(history[lane], t, n, float(gamma))
        what = f"row {row} lane {lane} (step {t} of {num_rows}), n={n}"
        np.testing.assert_allclose(out["reward"][i], ref["reward"], rtol=1e-5, atol=1e-6, err_msg=what)
        np.testing.assert_allclose(out["discount"][i], ref["discount"], rtol=1e-5, err_msg=what)
        assert int(out["n_steps"][i]) == ref["n_steps"], what
        assert bool(out["terminated"][i]) == ref["terminated"], what
        assert bool(out["truncated"][i]) == ref["truncated"], what
        assert_tree_equal(take(out["next_obs"], i), ref["next_obs"], what)
        assert_tree_equal(take(out["obs"], i), ref["obs"], what)
        assert int(out["action"][i]) == int(ref["action"]), what
        checked += 1
    assert checked == num_stored * N


def test_n_step_rejects_bad_arguments():
    state = replay.init(example_transition(), CAPACITY, N)
    index = replay.Index(jnp.zeros(2, jnp.int32), jnp.zeros(2, jnp.int32))
    for n in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_step"):
            replay.n_step(state, index, n, 0.99)
    no_next = replay.init(
        {"reward": np.zeros((), np.float32), "terminated": np.zeros((), bool), "truncated": np.zeros((), bool)}, 4, 1
    )
    with pytest.raises(ValueError, match="next_obs"):
        replay.n_step(no_next, index, 3, 0.99)


# --------------------------------------------------------------------------------------
# 4. Sum-tree
# --------------------------------------------------------------------------------------

COUNT = 40  # leaves in use (the tree has more: unused leaves stay zero)
UPDATE_K = 48  # indices per update (> COUNT, so every update repeats some index)


def tree_levels(tree):
    """The tree as float64 NumPy levels, root first, and its branching factor ``B``
    (node ``i`` of a level has children ``i * B .. i * B + B - 1`` on the next one).

    Two layouts are understood, so the checks do not depend on which one the library
    uses: a tuple of per-level arrays (root ``[1]`` first), or one flat array ``[2P]``
    of a binary tree (node ``i`` has children ``2i``, ``2i + 1``; root at 1)."""
    if isinstance(tree, (tuple, list)):
        levels = [np.asarray(level, np.float64) for level in tree]
    else:
        flat = np.asarray(tree, np.float64)
        size = len(flat) // 2
        levels = [flat[2**d : 2 ** (d + 1)] for d in range(size.bit_length())]
    assert len(levels[0]) == 1
    branching = len(levels[1]) if len(levels) > 1 else 1  # a one-leaf tree may be just its root
    for d, level in enumerate(levels):
        assert len(level) == branching**d
    return levels, branching


def check_tree(tree, ref_leaves=None):
    """Every internal node is the sum of its children (the float32 sum, up to the order
    of the additions) and the float64 sum of the reference leaves below it; the total
    is the sum of all leaves."""
    levels, branching = tree_levels(tree)
    leaves = levels[-1]
    if ref_leaves is not None:
        np.testing.assert_array_equal(leaves, np.asarray(ref_leaves, np.float32))
    assert np.isfinite(leaves).all() and (leaves >= 0).all()
    for d in range(len(levels) - 1):
        children = levels[d + 1].reshape(-1, branching)
        np.testing.assert_allclose(levels[d], children.sum(axis=1), rtol=2e-6, atol=1e-30, err_msg=f"level {d}")
        below = leaves.reshape(len(levels[d]), -1).sum(axis=1)  # all leaves under each node
        np.testing.assert_allclose(levels[d], below, rtol=1e-5, atol=1e-30, err_msg=f"level {d}")
    np.testing.assert_allclose(float(sumtree.total(tree)), leaves.sum(), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(sumtree.leaves(tree)), leaves.astype(np.float32))


def num_tree_leaves():
    return len(sumtree.leaves(sumtree.init(COUNT)))


def tree_from(leaves):
    """A tree holding ``leaves`` (padded with zeros), built with one ``update``."""
    tree = sumtree.init(len(leaves))
    size = num_tree_leaves()
    padded = np.zeros(size, np.float32)
    padded[: len(leaves)] = leaves
    return _tree_update(tree, jnp.arange(size, dtype=jnp.int32), jnp.asarray(padded))


def test_sumtree_init_has_room_for_every_item():
    for count in (1, 2, 3, 13, 16, 17, COUNT, 300):
        tree = sumtree.init(count)
        leaves = np.asarray(sumtree.leaves(tree))
        assert len(leaves) >= count and (leaves == 0).all()
        assert float(sumtree.total(tree)) == 0.0
        check_tree(tree)
    levels, _ = tree_levels(sumtree.init(COUNT))
    assert len(levels) >= 3  # COUNT is big enough for internal nodes below the root


@pytest.mark.parametrize("seed", [0, 1])
def test_sumtree_updates_keep_every_node_the_sum_of_its_children(seed):
    rng = np.random.default_rng(seed)
    tree = sumtree.init(COUNT)
    ref = np.zeros(num_tree_leaves())
    for _ in range(30):
        index = rng.integers(0, COUNT, UPDATE_K)
        values = rng.uniform(0, 5, UPDATE_K).astype(np.float32)
        values[rng.random(UPDATE_K) < 0.2] = 0.0
        tree = _tree_update(tree, jnp.asarray(index, jnp.int32), jnp.asarray(values))
        leaves = np.asarray(sumtree.leaves(tree))
        for i in np.unique(index):
            # A repeated index keeps one of the values it was given.
            assert leaves[i] in values[index == i], (i, leaves[i], values[index == i])
            ref[i] = leaves[i]
        check_tree(tree, ref)
    assert (ref[COUNT:] == 0).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sumtree_find_matches_cumulative_sum_search(seed):
    rng = np.random.default_rng(seed)
    leaves = rng.uniform(0, 3, COUNT)
    leaves[rng.random(COUNT) < 0.3] = 0.0
    leaves[0] = 0.0  # a zero first leaf
    tree = tree_from(leaves)
    leaves = np.asarray(sumtree.leaves(tree), np.float64)
    cumsum = np.cumsum(leaves)
    mass = rng.uniform(0, cumsum[-1], 2000)
    # Keep masses clear of the boundaries, where float32 tree sums and float64 cumsums
    # may disagree by rounding.
    mass = mass[np.abs(mass[:, None] - cumsum[None, :]).min(axis=1) > 1e-4 * cumsum[-1]]
    assert len(mass) > 1500
    found = np.asarray(_tree_find(tree, jnp.asarray(mass, jnp.float32)))
    np.testing.assert_array_equal(found, np.searchsorted(cumsum, mass, side="right"))
    assert (leaves[found] > 0).all()


def test_sumtree_find_exact_on_integer_priorities():
    # Integers are exact in float32, so masses on the boundaries are too: a mass equal to
    # the cumulative sum through leaf i belongs to the next non-zero leaf.
    rng = np.random.default_rng(4)
    leaves = rng.integers(0, 5, COUNT).astype(np.float64)
    leaves[rng.random(COUNT) < 0.3] = 0.0
    leaves[[0, 1, 17, 18, 19, COUNT - 1]] = 0.0  # leading, inner runs of, and trailing zeros
    tree = tree_from(leaves)
    all_leaves = np.asarray(sumtree.leaves(tree), np.float64)
    cumsum = np.cumsum(all_leaves)
    mass = np.arange(0, cumsum[-1], 0.5)
    found = np.asarray(_tree_find(tree, jnp.asarray(mass, jnp.float32)))
    np.testing.assert_array_equal(found, np.searchsorted(cumsum, mass, side="right"))
    # At or beyond the total: still a non-zero leaf.
    found = np.asarray(_tree_find(tree, jnp.asarray([cumsum[-1], cumsum[-1] + 1, 1e9], jnp.float32)))
    assert (all_leaves[found] > 0).all(), found


def test_sumtree_find_below_zero_gives_first_positive_leaf():
    # Rounding can leave the remaining mass slightly below zero during the descent; such
    # a mass (here given directly) must still land on a non-zero leaf: the first one.
    leaves = np.zeros(COUNT, np.float32)
    leaves[[11, 12, 30]] = [2.0, 1.0, 3.0]
    tree = tree_from(leaves)
    found = np.asarray(_tree_find(tree, jnp.asarray([-1e-30, -1e-6, -1.0, 0.0], jnp.float32)))
    np.testing.assert_array_equal(found, [11, 11, 11, 11])


@pytest.mark.parametrize("seed", [0, 1])
def test_sumtree_stratified_sample_frequencies(seed):
    rng = np.random.default_rng(seed)
    leaves = rng.uniform(0, 1, COUNT) ** 2
    leaves[[2, 7, 12, 16, 17, 31]] = 0.0
    tree = tree_from(leaves)
    leaves = np.asarray(sumtree.leaves(tree), np.float64)
    drawn = np.asarray(_tree_sample_many(tree, jax.random.split(jax.random.key(seed), NUM_KEYS))).ravel()
    assert drawn.size == NUM_KEYS * FREQ_BATCH
    counts = np.bincount(drawn, minlength=len(leaves))
    assert len(counts) == len(leaves)
    assert counts[leaves == 0].sum() == 0
    freq = counts / drawn.size
    np.testing.assert_array_less(np.abs(freq - leaves / leaves.sum()), FREQ_TOL)


def test_sumtree_stratified_sample_one_draw_per_stratum():
    # With 4 draws over 13 leaves, draw j must come from the j-th quarter of the mass, and
    # (each stratum being sampled uniformly) the marginal frequencies are still p_i / sum p.
    rng = np.random.default_rng(5)
    leaves = rng.uniform(0.2, 1, COUNT)
    leaves[[4, 9, 16, 30]] = 0.0
    tree = tree_from(leaves)
    leaves = np.asarray(sumtree.leaves(tree), np.float64)
    cumsum = np.cumsum(leaves)
    total = cumsum[-1]
    drawn = np.asarray(_tree_sample_four(tree, jax.random.split(jax.random.key(5), 50_000)))
    assert drawn.shape == (50_000, 4)
    lo, hi = cumsum[drawn] - leaves[drawn], cumsum[drawn]  # each drawn leaf's mass interval
    stratum = np.arange(4)
    slack = 1e-5 * total
    assert (lo <= (stratum + 1) / 4 * total + slack).all() and (hi >= stratum / 4 * total - slack).all()
    counts = np.bincount(drawn.ravel(), minlength=len(leaves))
    np.testing.assert_array_less(np.abs(counts / drawn.size - leaves / total), FREQ_TOL)


def test_sumtree_never_returns_zero_priority_leaves_under_rounding():
    # Huge dynamic range: tiny leaves (and whole subtrees of tiny leaves) vanish from
    # float32 sums next to big ones; most leaves, the last ones and the padding are zero.
    leaves = np.zeros(COUNT, np.float32)
    spots = [1, 3, 4, 6, 9, 16, 20, 33]
    leaves[spots] = [1e-7, 3e7, 1e-30, 2.5, 1e-7, 1e-20, 5.0, 1e-7]
    tree = tree_from(leaves)
    leaves = np.asarray(sumtree.leaves(tree))
    levels, branching = tree_levels(tree)
    # Masses on and next to every boundary the descent may compare with: node values,
    # running sums of each node's children and of all leaves (in float32), the total,
    # and beyond it.
    running = [np.cumsum(level.astype(np.float32).reshape(-1, branching), axis=1).ravel() for level in levels[1:]]
    edges = np.concatenate([np.concatenate(levels), *running, np.cumsum(leaves), [0.0, 1e-38, 1e38]])
    edges = edges.astype(np.float32)
    mass = np.concatenate([edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(-np.inf))])
    mass = np.clip(mass, 0, None)
    found = np.asarray(_tree_find(tree, jnp.asarray(mass)))
    assert (found >= 0).all() and (found < len(leaves)).all()
    assert (leaves[found] > 0).all(), (mass[leaves[found] == 0], found[leaves[found] == 0])
    drawn = np.asarray(_tree_sample_many(tree, jax.random.split(jax.random.key(0), NUM_KEYS))).ravel()
    assert (leaves[drawn] > 0).all()
    assert set(np.unique(drawn)) <= set(spots)


# --------------------------------------------------------------------------------------
# 5. Prioritized replay
# --------------------------------------------------------------------------------------


def slot_index(slots):
    slots = np.asarray(slots)
    return replay.Index(jnp.asarray(slots // N, jnp.int32), jnp.asarray(slots % N, jnp.int32))


def p_fill(seed, num_rows, state=None):
    rng = np.random.default_rng(seed)
    state = prioritized.init(example_transition(), CAPACITY, N) if state is None else state
    rows = random_rows(rng, num_rows)
    for t in range(num_rows):
        state = _p_add(state, take(rows, t))
    return state


def leaves_of(state):
    return np.asarray(sumtree.leaves(state.tree), np.float64)


PRIORITY_B = 8  # update batch size


def test_prioritized_new_items_get_max_priority():
    rng = np.random.default_rng(0)
    state = p_fill(0, 3)
    leaves = leaves_of(state)
    np.testing.assert_array_equal(leaves[: 3 * N], 1.0)
    assert (leaves[3 * N :] == 0).all()

    max_seen = 1.0
    alpha, eps = np.float32(0.7), np.float32(1e-3)
    num_rows = 3
    for step in range(12):  # wraps around: overwritten slots get the max priority too
        stored = min(num_rows, R) * N
        slots = rng.choice(stored, PRIORITY_B, replace=False)
        td = (rng.normal(size=PRIORITY_B) * (3.0 if step % 3 == 0 else 0.1)).astype(np.float32)
        state = _p_update(state, slot_index(slots), jnp.asarray(td), alpha, eps)
        new = (np.abs(td.astype(np.float64)) + float(eps)) ** float(alpha)
        max_seen = max(max_seen, new.max())
        np.testing.assert_allclose(float(state.max_priority), max_seen, rtol=1e-5)

        written = (num_rows % R) * N + np.arange(N)
        state = p_fill(step, 1, state)
        num_rows += 1
        np.testing.assert_allclose(leaves_of(state)[written], max_seen, rtol=1e-6)
    assert num_rows > R


def test_prioritized_update_sets_priority_from_td_error():
    rng = np.random.default_rng(1)
    state = p_fill(1, 9)  # wrapped
    for _ in range(5):
        alpha, eps = np.float32(rng.uniform(0.3, 1.0)), np.float32(rng.uniform(1e-4, 1e-2))
        slots = rng.choice(CAPACITY, PRIORITY_B, replace=False)
        td = (rng.normal(size=PRIORITY_B) * 4).astype(np.float32)
        before = leaves_of(state)
        state = _p_update(state, slot_index(slots), jnp.asarray(td), alpha, eps)
        expected = before.copy()
        expected[slots] = (np.abs(td.astype(np.float64)) + float(eps)) ** float(alpha)
        np.testing.assert_allclose(leaves_of(state), expected, rtol=1e-5)
        check_tree(state.tree)


def test_prioritized_non_finite_td_keeps_old_priority_and_huge_td_is_clipped():
    state = p_fill(2, R)
    alpha, eps = np.float32(0.6), np.float32(1e-3)
    slots = np.arange(PRIORITY_B) * 2
    td = np.full(PRIORITY_B, 2.0, np.float32)
    state = _p_update(state, slot_index(slots), jnp.asarray(td), alpha, eps)
    before = leaves_of(state)
    max_before = float(state.max_priority)

    td = np.array([np.nan, np.inf, -np.inf, 0.5, -np.nan, np.nan, np.inf, 1.5], np.float32)
    state = _p_update(state, slot_index(slots), jnp.asarray(td), alpha, eps)
    after = leaves_of(state)
    finite = np.isfinite(td)
    np.testing.assert_array_equal(after[slots[~finite]], before[slots[~finite]])
    np.testing.assert_allclose(after[slots[finite]], (np.abs(td[finite].astype(np.float64)) + 1e-3) ** 0.6, rtol=1e-5)
    assert float(state.max_priority) == max_before
    check_tree(state.tree)  # incl. all finite

    huge = np.array([1e30, -1e30, 3.4e38, -3.4e38, 1e7, 1e6, 2.0, 0.0], np.float32)
    state = _p_update(state, slot_index(slots), jnp.asarray(huge), alpha, eps)
    after = leaves_of(state)
    clipped = np.minimum(np.abs(huge.astype(np.float64)), prioritized.MAX_TD_ERROR)
    np.testing.assert_allclose(after[slots], (clipped + 1e-3) ** 0.6, rtol=1e-5)
    assert np.isfinite(float(state.max_priority))
    check_tree(state.tree)
    # Sampling still works and is finite.
    _, index, weights = _p_sample(state, jax.random.key(0), batch_size=64, beta=jnp.float32(0.4))
    assert np.isfinite(np.asarray(weights)).all()


def test_prioritized_alpha_zero_is_uniform():
    rng = np.random.default_rng(3)
    state = p_fill(3, 5)  # 15 of 21 slots stored
    stored = 5 * N
    for _ in range(4):
        slots = rng.choice(stored, PRIORITY_B, replace=False)
        td = (rng.normal(size=PRIORITY_B) * 10).astype(np.float32)
        state = _p_update(state, slot_index(slots), jnp.asarray(td), np.float32(0.0), np.float32(1e-6))
    leaves = leaves_of(state)
    np.testing.assert_array_equal(leaves[:stored], 1.0)
    assert (leaves[stored:] == 0).all()
    slots, weights = jax.device_get(
        _p_sample_many(state, jax.random.split(jax.random.key(3), NUM_KEYS), jnp.float32(0.5))
    )
    np.testing.assert_allclose(weights, 1.0, rtol=1e-6)
    counts = np.bincount(slots.ravel(), minlength=CAPACITY)
    assert counts[stored:].sum() == 0
    np.testing.assert_array_less(np.abs(counts[:stored] / slots.size - 1 / stored), FREQ_TOL)


@pytest.mark.parametrize("num_rows", [4, 10])  # partly filled (M = 12), wrapped (M = 21)
def test_prioritized_importance_weights_and_frequencies(num_rows):
    rng = np.random.default_rng(num_rows)
    state = p_fill(num_rows, num_rows)
    stored = min(num_rows, R) * N
    for _ in range(6):
        slots = rng.choice(stored, PRIORITY_B, replace=False)
        td = (rng.standard_cauchy(PRIORITY_B)).astype(np.float32)
        state = _p_update(state, slot_index(slots), jnp.asarray(td), np.float32(0.8), np.float32(1e-2))
    leaves = leaves_of(state)
    assert (leaves[:stored] > 0).all() and (leaves[stored:] == 0).all()
    assert len(np.unique(leaves[:stored])) > 5  # not uniform

    beta = np.float32(0.4)
    batch, index, weights = jax.device_get(_p_sample(state, jax.random.key(7), batch_size=64, beta=jnp.float32(beta)))
    slot = index.row * N + index.lane
    assert (index.row < min(num_rows, R)).all() and (leaves[slot] > 0).all()
    assert_tree_equal(batch, take(state.replay.data, index.row, index.lane))
    probability = leaves[slot] / leaves.sum()
    expected = (stored * probability) ** -float(beta)
    np.testing.assert_allclose(weights, expected / expected.max(), rtol=1e-5)

    slots, weights = jax.device_get(
        _p_sample_many(state, jax.random.split(jax.random.key(8), NUM_KEYS), jnp.float32(beta))
    )
    counts = np.bincount(slots.ravel(), minlength=CAPACITY)
    assert counts[stored:].sum() == 0
    np.testing.assert_array_less(np.abs(counts / slots.size - leaves[:CAPACITY] / leaves.sum()), FREQ_TOL)


# --------------------------------------------------------------------------------------
# 6. Memory estimate and argument checks
# --------------------------------------------------------------------------------------


def image_transition():
    return {
        "obs": np.zeros((84, 84), np.uint8),
        "action": np.zeros((), np.int32),
        "reward": np.zeros((), np.float32),
        "terminated": np.zeros((), bool),
        "truncated": np.zeros((), bool),
    }


def test_memory_limit_is_checked_before_allocating():
    per_item = 84 * 84 + 4 + 4 + 1 + 1
    assert replay.nbytes(image_transition(), 1) == per_item
    items = 126 * 8  # capacity 1001 over 8 envs: 126 rows
    needed = items * per_item
    with pytest.raises(ValueError, match=f"{needed:,}"):
        replay.init(image_transition(), 1001, 8, max_bytes=needed - 1)
    state = replay.init(image_transition(), 1001, 8, max_bytes=needed)
    assert state.capacity == items

    # Prioritized: the sum-tree counts too (measured from the tree init actually builds).
    tree_bytes = sum(x.nbytes for x in jax.tree.leaves(sumtree.init(items)))
    assert tree_bytes >= items * 4
    with_tree = needed + tree_bytes
    with pytest.raises(ValueError, match=f"{with_tree:,}"):
        prioritized.init(image_transition(), 1001, 8, max_bytes=with_tree - 1)
    prioritized.init(image_transition(), 1001, 8, max_bytes=with_tree)


def test_default_memory_limit_rejects_huge_buffer():
    needed = 10**9 * 84 * 84
    obs = {"obs": np.zeros((84, 84), np.uint8)}
    with pytest.raises(ValueError, match=f"{needed:,}"):
        replay.init(obs, 10**9, 8)
    with pytest.raises(ValueError, match="bytes"):
        prioritized.init(obs, 10**9, 8)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_capacity_or_num_envs_names_the_field(bad):
    obs = {"obs": np.zeros(4, np.float32)}
    for init in (replay.init, prioritized.init):
        with pytest.raises(ValueError, match="capacity"):
            init(obs, bad, 2)
        with pytest.raises(ValueError, match="num_envs"):
            init(obs, 16, bad)


# --------------------------------------------------------------------------------------
# 7. vmap over independent buffers
# --------------------------------------------------------------------------------------


@jax.jit
def _vmapped_uniform(states, items, keys, gamma):
    def one(state, item, key):
        state = replay.add(state, item)
        batch, index = replay.sample(state, key, CAPACITY)  # the n-step tests compiled this shape
        return state, batch, index, replay.n_step(state, index, 3, gamma)

    return jax.vmap(one)(states, items, keys)


@pytest.mark.slow
def test_vmap_uniform_matches_unvmapped():
    rng = np.random.default_rng(5)
    a, _ = fill(20, 3)  # partly filled, cursor 3
    b, _ = fill(21, 12)  # wrapped, cursor 5
    items = [take(random_rows(rng, 1), 0) for _ in range(2)]
    keys = jax.random.split(jax.random.key(5), 2)
    gamma = jnp.float32(0.9)
    v_state, v_batch, v_index, v_nstep = _vmapped_uniform(stack(a, b), stack(*items), keys, gamma)
    for i, state in enumerate((a, b)):
        state = _add(state, items[i])
        batch, index = _sample(state, keys[i], batch_size=CAPACITY)
        nstep = _n_step(state, index, 3, gamma)
        assert_tree_equal(take(v_state, i), state, f"buffer {i}")
        assert_tree_equal(take(v_batch, i), batch, f"buffer {i}")
        assert_tree_equal(take(v_index, i), index, f"buffer {i}")
        nstep_v = take(v_nstep, i)
        for key in ("reward", "discount"):
            np.testing.assert_allclose(nstep_v.pop(key), nstep.pop(key), rtol=1e-6)
        assert_tree_equal(nstep_v, nstep, f"buffer {i}")


@jax.jit
def _vmapped_prioritized(states, items, keys, td, alpha, beta):
    def one(state, item, key, td):
        state = prioritized.add(state, item)
        batch, index, weights = prioritized.sample(state, key, 64, beta)
        state = prioritized.update_priorities(
            state, replay.Index(index.row[:PRIORITY_B], index.lane[:PRIORITY_B]), td, alpha, 1e-6
        )
        return state, batch, index, weights

    return jax.vmap(one)(states, items, keys, td)


@pytest.mark.slow
def test_vmap_prioritized_matches_unvmapped():
    rng = np.random.default_rng(6)
    a = p_fill(30, 2)
    b = p_fill(31, 9)
    state_b_slots = rng.choice(CAPACITY, PRIORITY_B, replace=False)
    b = _p_update(
        b,
        slot_index(state_b_slots),
        jnp.asarray(rng.normal(size=PRIORITY_B) * 5, jnp.float32),
        np.float32(0.6),
        np.float32(1e-6),
    )
    items = [take(random_rows(rng, 1), 0) for _ in range(2)]
    keys = jax.random.split(jax.random.key(6), 2)
    td = rng.normal(size=(2, PRIORITY_B)).astype(np.float32)
    alpha, beta = jnp.float32(0.6), jnp.float32(0.4)
    v_state, v_batch, v_index, v_weights = _vmapped_prioritized(stack(a, b), stack(*items), keys, td, alpha, beta)
    for i, state in enumerate((a, b)):
        state = _p_add(state, items[i])
        batch, index, weights = _p_sample(state, keys[i], batch_size=64, beta=beta)
        state = _p_update(
            state,
            replay.Index(index.row[:PRIORITY_B], index.lane[:PRIORITY_B]),
            jnp.asarray(td[i]),
            alpha,
            np.float32(1e-6),
        )
        assert_tree_equal(take(v_batch, i), batch, f"buffer {i}")
        assert_tree_equal(take(v_index, i), index, f"buffer {i}")
        np.testing.assert_allclose(np.asarray(v_weights[i]), np.asarray(weights), rtol=1e-6)
        assert_tree_equal(take(v_state.replay, i), state.replay, f"buffer {i}")
        for v_level, level in zip(jax.tree.leaves(take(v_state.tree, i)), jax.tree.leaves(state.tree)):
            np.testing.assert_allclose(v_level, np.asarray(level), rtol=1e-6)
        np.testing.assert_allclose(float(v_state.max_priority[i]), float(state.max_priority), rtol=1e-6)
