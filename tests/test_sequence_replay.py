"""Tests for ``jaxrl.buffers.sequence`` (R2D2 sequence replay) and the value rescaling
and double-Q n-step targets of ``jaxrl.returns``, against independent NumPy references.

The references are written from the documented behaviour, not ported from the JAX code:

* the ring: a Python list of ``R`` slots, each holding the global step that wrote it and
  that step's row of ``N`` transitions; a window starting at slot ``s`` exists when the
  step in slot ``s`` is on its lane's grid (``step % period == 0``) and slots ``s ..
  s + L - 1`` (mod ``R``) hold the ``L`` consecutive steps that follow it;
* priorities: a dict per (start, lane): the running max priority when a window
  appears, 0 when it disappears, ``(|x| + eps) ** alpha`` on update (float64);
* sampling: frequencies against ``p / sum(p)``, weights ``(M P) ** -beta / max``;
* value rescaling and double-Q n-step targets: the textbook formulas and a forward
  loop over each step's future, in float64.

Every jitted function is defined once at module level and used with fixed shapes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import returns
from jaxrl.buffers import prioritized, replay, sequence, sumtree

N = 3  # env lanes
L = 5  # sequence length
PERIOD = 2
CAPACITY = 31  # ceil(31 / 3) = 11 rows, rounded up to R = 12 (a multiple of PERIOD)
R = 12
K = R // PERIOD  # starts per lane
UPDATE_B = 8  # windows per priority update
ALPHA, EPS = np.float32(0.7), np.float32(1e-3)
NUM_KEYS = 200  # sampling-frequency tests: NUM_KEYS x FREQ_BATCH = 200k draws
FREQ_BATCH = 1000
# Max |empirical frequency - probability| over 200k draws: the standard deviation of
# one frequency is at most sqrt(0.25 / 200_000) = 0.00112, so 0.005 is > 4.4 sigma
# (stratified sampling only lowers the variance); the seeds are fixed anyway.
FREQ_TOL = 0.005

ALL_STARTS = replay.Index(
    jnp.asarray(np.repeat(np.arange(K) * PERIOD, N), jnp.int32), jnp.asarray(np.tile(np.arange(N), K), jnp.int32)
)


# --------------------------------------------------------------------------------------
# Jitted once at module level (fixed shapes)
# --------------------------------------------------------------------------------------

_add = jax.jit(sequence.add)
_add_sequence = jax.jit(sequence.add_sequence)
_gather = jax.jit(sequence.gather)
_sample = jax.jit(sequence.sample, static_argnames=("batch_size",))
_update = jax.jit(sequence.update_priorities)
_num_sequences = jax.jit(sequence.num_sequences)
_sequence_priority = jax.jit(sequence.sequence_priority)
_value_rescale = jax.jit(returns.value_rescale)
_value_unrescale = jax.jit(returns.value_unrescale)
_double_q = jax.jit(returns.double_q_n_step_targets, static_argnames=("n",))


@jax.jit
def _sample_many(state, keys, beta):
    """Start rows, lanes and weights ``[K, FREQ_BATCH]`` for ``K`` keys."""
    batch = jax.vmap(lambda key: sequence.sample(state, key, FREQ_BATCH, beta))(keys)
    return batch.index.row, batch.index.lane, batch.weights


# --------------------------------------------------------------------------------------
# Data and the reference buffer
# --------------------------------------------------------------------------------------


def example_transition():
    return {
        "obs": {"pixels": np.zeros((2, 2), np.uint8), "vec": np.zeros(3, np.float32)},
        "action": np.zeros((), np.int32),
        "reward": np.zeros((), np.float32),
        "terminated": np.zeros((), bool),
        "truncated": np.zeros((), bool),
        "carry": (np.zeros(4, np.float32), np.zeros(4, np.float32)),  # an LSTM's (c, h)
    }


def random_row(rng):
    """One env step of every lane, leaves ``[N, ...]``."""
    return {
        "obs": {
            "pixels": rng.integers(0, 256, (N, 2, 2)).astype(np.uint8),
            "vec": rng.normal(size=(N, 3)).astype(np.float32),
        },
        "action": rng.integers(-1000, 1000, N).astype(np.int32),
        "reward": rng.normal(size=N).astype(np.float32),
        "terminated": rng.random(N) < 0.1,
        "truncated": rng.random(N) < 0.1,
        "carry": (rng.normal(size=(N, 4)).astype(np.float32), rng.normal(size=(N, 4)).astype(np.float32)),
    }


def take(tree, *index):
    return jax.tree.map(lambda x: np.asarray(x)[index], tree)


def stack(*trees):
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


def assert_tree_equal(actual, expected, what=""):
    actual_leaves, actual_def = jax.tree.flatten(actual)
    expected_leaves, expected_def = jax.tree.flatten(expected)
    assert actual_def == expected_def, what
    for a, e in zip(actual_leaves, expected_leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e), err_msg=what)


class Reference:
    """The ring as a list of ``(step, row)`` slots, and the priorities of its windows."""

    def __init__(self, num_rows, length, period):
        self.slots = [None] * num_rows
        self.length, self.period = length, period
        self.step = 0
        self.priority = {}  # (start slot, lane) -> float, for every window ever seen
        self.max_priority = 1.0

    def valid(self, start):
        """Whether the window at slot ``start`` holds ``L`` consecutive steps from a grid step."""
        first = self.slots[start]
        if first is None or first[0] % self.period:
            return False
        for k in range(self.length):
            slot = self.slots[(start + k) % len(self.slots)]
            if slot is None or slot[0] != first[0] + k:
                return False
        return True

    def valid_starts(self):
        return [s for s in range(len(self.slots)) if self.valid(s)]

    def add(self, row):
        before = set(self.valid_starts())
        self.slots[self.step % len(self.slots)] = (self.step, row)
        self.step += 1
        after = set(self.valid_starts())
        for s in range(len(self.slots)):
            for lane in range(N):
                if s in after and s not in before:
                    self.priority[s, lane] = self.max_priority
                elif s not in after:
                    self.priority[s, lane] = 0.0

    def update(self, starts, lanes, values, alpha, eps):
        applied = []
        for s, lane, x in zip(starts, lanes, values):
            if self.valid(s) and np.isfinite(x):
                p = (min(abs(float(x)), prioritized.MAX_TD_ERROR) + float(eps)) ** float(alpha)
                self.priority[s, lane] = p
                applied.append(p)
        self.max_priority = max([self.max_priority, *applied])

    def leaves(self):
        """float64 ``[K * N]``: the priority of each start, leaf ``(s // period) * N + lane``."""
        out = np.zeros(K * N)
        for (s, lane), p in self.priority.items():
            assert s % self.period == 0 or p == 0.0, (s, lane, p)  # off-grid starts never sampleable
            if s % self.period == 0:
                out[(s // self.period) * N + lane] = p
        return out

    def window(self, start, lane):
        return stack(*(take(self.slots[(start + k) % len(self.slots)][1], lane) for k in range(self.length)))


def new_buffer():
    return sequence.init(example_transition(), CAPACITY, N, sequence_length=L, period=PERIOD)


def random_update(rng, state, ref, nan=True):
    """Update ``UPDATE_B`` distinct random starts (valid or not) on both buffers."""
    slots = rng.choice(K * N, UPDATE_B, replace=False)
    starts, lanes = (slots // N) * PERIOD, slots % N
    values = (rng.standard_cauchy(UPDATE_B) * 3).astype(np.float32)
    if nan:
        values[rng.random(UPDATE_B) < 0.15] = np.nan
    index = replay.Index(jnp.asarray(starts, jnp.int32), jnp.asarray(lanes, jnp.int32))
    ref.update(starts, lanes, values, ALPHA, EPS)
    return _update(state, index, jnp.asarray(values), ALPHA, EPS)


def filled(seed, num_rows, updates=True):
    """A buffer and its reference after ``num_rows`` random adds (with random priority
    updates in between)."""
    rng = np.random.default_rng(seed)
    state, ref = new_buffer(), Reference(R, L, PERIOD)
    for _ in range(num_rows):
        row = random_row(rng)
        state = _add(state, row)
        ref.add(row)
        if updates and rng.random() < 0.5:
            state = random_update(rng, state, ref)
    return state, ref


def leaves_of(state):
    return np.asarray(sumtree.leaves(state.tree), np.float64)


def check_against_reference(state, ref, what):
    assert int(state.replay.cursor) == ref.step % R, what
    valid = ref.valid_starts()
    assert int(_num_sequences(state)) == len(valid) * N, what
    assert all(s % PERIOD == 0 for s in valid), what
    leaves = leaves_of(state)
    assert (leaves[K * N :] == 0).all(), what  # the tree's padding
    np.testing.assert_allclose(leaves[: K * N], ref.leaves(), rtol=1e-5, err_msg=what)
    np.testing.assert_allclose(float(state.max_priority), ref.max_priority, rtol=1e-5, err_msg=what)
    data, carry = jax.device_get(_gather(state, ALL_STARTS))
    for i, (start, lane) in enumerate(zip(np.asarray(ALL_STARTS.row), np.asarray(ALL_STARTS.lane))):
        if start in valid:
            window = ref.window(start, lane)
            assert_tree_equal(take(data, i), window, f"{what}: window ({start}, {lane})")
            assert_tree_equal(take(carry, i), take(window["carry"], 0), f"{what}: carry ({start}, {lane})")


# --------------------------------------------------------------------------------------
# 1. Contents, validity and priorities against the reference
# --------------------------------------------------------------------------------------


def test_rows_round_up_to_a_multiple_of_period():
    state = new_buffer()
    assert (state.replay.num_rows, state.replay.num_envs, state.num_starts) == (R, N, K)
    assert (state.sequence_length, state.period) == (L, PERIOD)
    assert float(sumtree.total(state.tree)) == 0.0
    assert int(_num_sequences(state)) == 0 and not bool(sequence.can_sample(state, 1))


@pytest.mark.parametrize("seed", [0, 1])
def test_windows_validity_and_priorities_match_reference(seed):
    rng = np.random.default_rng(seed)
    state, ref = new_buffer(), Reference(R, L, PERIOD)
    for t in range(5 * R + 3):  # five wrap-arounds, ending mid-ring
        row = random_row(rng)
        state = _add(state, row)
        ref.add(row)
        if rng.random() < 0.5:
            state = random_update(rng, state, ref)
        check_against_reference(state, ref, f"seed {seed}, after add {t}")
        num_valid = len(ref.valid_starts()) * N
        for min_sequences in (1, num_valid, num_valid + 1):
            assert bool(sequence.can_sample(state, min_sequences)) == (num_valid >= min_sequences)
    # Cursor at row 3: starts 0 and 2 are cut by it, start 10 runs across the wrap-around.
    assert ref.valid_starts() == [4, 6, 8, 10]


def test_windows_appear_and_disappear_at_the_documented_adds():
    """Start 0's window becomes whole on the add writing row L - 1, is cut on the add
    overwriting row 0, and is whole again on the add writing row L - 1 once more."""
    rng = np.random.default_rng(9)
    state = new_buffer()
    history = []
    for _ in range(2 * R + L):
        state = _add(state, random_row(rng))
        history.append(bool(np.asarray(sequence.sampleable_starts(state))[0]))
    expected = [(t % R) >= L - 1 for t in range(2 * R + L)]
    assert history == expected


def test_add_sequence_equals_repeated_add():
    rng = np.random.default_rng(4)
    one, chunked = new_buffer(), new_buffer()
    for _ in range(9):  # 27 rows: wraps twice
        rows = [random_row(rng) for _ in range(3)]
        for row in rows:
            one = _add(one, row)
        chunked = _add_sequence(chunked, stack(*rows))
    assert_tree_equal(chunked, one)


# --------------------------------------------------------------------------------------
# 2. Sampling
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_rows", [8, 4 * R + 5])  # partly filled; wrapped, cursor mid-ring
def test_sampling_frequencies_weights_and_windows(num_rows):
    state, ref = filled(num_rows, num_rows)
    check_against_reference(state, ref, "filled")
    expected = ref.leaves()
    assert len(np.unique(expected[expected > 0])) > 1 or num_rows == 8  # priorities differ once updated
    probability = expected / expected.sum()
    valid_slots = set(np.flatnonzero(expected))
    num_valid = len(valid_slots)

    beta = np.float32(0.4)
    batch = jax.device_get(_sample(state, jax.random.key(num_rows), batch_size=64, beta=jnp.float32(beta)))
    slot = (batch.index.row // PERIOD) * N + batch.index.lane
    assert (batch.index.row % PERIOD == 0).all() and set(slot) <= valid_slots
    for i, (start, lane) in enumerate(zip(batch.index.row, batch.index.lane)):
        window = ref.window(start, lane)
        assert_tree_equal(take(batch.data, i), window, f"sample {i}")
        assert_tree_equal(take(batch.carry, i), take(window["carry"], 0), f"sample {i}")
    weights = (num_valid * probability[slot]) ** -float(beta)
    np.testing.assert_allclose(batch.weights, weights / weights.max(), rtol=1e-4)

    rows, lanes, weights = jax.device_get(
        _sample_many(state, jax.random.split(jax.random.key(1), NUM_KEYS), jnp.float32(beta))
    )
    slots = (rows // PERIOD) * N + lanes
    assert (rows % PERIOD == 0).all()
    counts = np.bincount(slots.ravel(), minlength=K * N)
    assert counts[expected == 0].sum() == 0  # partial, cut and unwritten windows never drawn
    np.testing.assert_array_less(np.abs(counts / slots.size - probability), FREQ_TOL)
    w = (num_valid * probability[slots]) ** -float(beta)
    np.testing.assert_allclose(weights, w / w.max(axis=1, keepdims=True), rtol=1e-4)


def test_update_priorities_changes_sampling():
    state, ref = filled(7, 3 * R + 1, updates=False)
    valid = np.flatnonzero(ref.leaves())
    assert (ref.leaves()[valid] == 1.0).all()  # new windows at the initial max priority
    # One window gets a large priority, one a tiny one; the rest keep 1.
    big, small = valid[0], valid[1]
    index = replay.Index(
        jnp.asarray([(big // N) * PERIOD, (small // N) * PERIOD], jnp.int32),
        jnp.asarray([big % N, small % N], jnp.int32),
    )
    state = _update_two(state, index, jnp.asarray([20.0, 0.0], jnp.float32))
    ref.update(np.asarray(index.row), np.asarray(index.lane), [20.0, 0.0], 1.0, 1e-3)
    expected = ref.leaves()
    np.testing.assert_allclose(leaves_of(state)[: K * N], expected, rtol=1e-6)
    assert float(state.max_priority) == pytest.approx(20.001)
    rows, lanes, _ = jax.device_get(_sample_many(state, jax.random.split(jax.random.key(2), NUM_KEYS), 0.5))
    freq = np.bincount(((rows // PERIOD) * N + lanes).ravel(), minlength=K * N) / rows.size
    np.testing.assert_array_less(np.abs(freq - expected / expected.sum()), FREQ_TOL)
    assert freq[big] > 0.5 and freq[small] < 1e-3

    # A window cut by later adds stays at 0 whatever update it gets; newly whole windows
    # start at the new max priority.
    rng = np.random.default_rng(0)
    for _ in range(L):
        row = random_row(rng)
        state = _add(state, row)
        ref.add(row)
    stale = [(s, lane) for (s, lane), p in ref.priority.items() if p == 0 and s % PERIOD == 0][:2]
    assert len(stale) == 2
    index = replay.Index(
        jnp.asarray([s for s, _ in stale], jnp.int32), jnp.asarray([lane for _, lane in stale], jnp.int32)
    )
    state = _update_two(state, index, jnp.asarray([5.0, 5.0], jnp.float32))
    ref.update([s for s, _ in stale], [lane for _, lane in stale], [5.0, 5.0], 1.0, 1e-3)
    np.testing.assert_allclose(leaves_of(state)[: K * N], ref.leaves(), rtol=1e-6)
    assert np.isclose(ref.leaves(), 20.001).sum() >= N  # newly whole windows of every lane


def _update_two(state, index, values):
    return _update(state, index, values, np.float32(1.0), np.float32(1e-3))


# --------------------------------------------------------------------------------------
# 3. Sequence priorities and the burn-in mask
# --------------------------------------------------------------------------------------


def test_sequence_priority_matches_numpy():
    rng = np.random.default_rng(0)
    td = (rng.normal(size=(6, 10)) * 3).astype(np.float32)
    mask = rng.random((6, 10)) < 0.6
    mask[0] = False  # no trained step: priority 0
    mask[1] = True
    td[2, ~mask[2]] = np.nan  # NaN on masked-out steps is ignored
    eta = np.float32(0.9)
    got = np.asarray(_sequence_priority(jnp.asarray(td), jnp.asarray(mask), eta))
    for b in range(6):
        x = np.abs(td[b][mask[b]].astype(np.float64))
        want = 0.0 if x.size == 0 else 0.9 * x.max() + 0.1 * x.mean()
        np.testing.assert_allclose(got[b], want, rtol=1e-5, atol=1e-7, err_msg=f"row {b}")
    burn = np.broadcast_to(np.asarray(sequence.burn_in_mask(10, 4)), (6, 10))
    got = np.asarray(_sequence_priority(jnp.asarray(np.nan_to_num(td)), jnp.asarray(burn), np.float32(0.0)))
    np.testing.assert_allclose(got, np.abs(np.nan_to_num(td)[:, 4:]).mean(axis=1), rtol=1e-5)


def test_burn_in_mask():
    np.testing.assert_array_equal(np.asarray(sequence.burn_in_mask(6, 2)), [0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(np.asarray(sequence.burn_in_mask(6, 0)), [1] * 6)
    np.testing.assert_array_equal(np.asarray(sequence.burn_in_mask(8, 3, bootstrap_steps=2)), [0, 0, 0, 1, 1, 1, 0, 0])
    for args, field in (((6, 6), "burn_in"), ((6, -1), "burn_in"), ((0, 0), "sequence_length"), ((6, 2, 4), "burn_in")):
        with pytest.raises(ValueError, match=field):
            sequence.burn_in_mask(*args)


# --------------------------------------------------------------------------------------
# 4. vmap over buffers, argument checks
# --------------------------------------------------------------------------------------


@jax.jit
def _vmapped(states, rows, keys, values):
    def one(state, row, key, values):
        state = sequence.add(state, row)
        batch = sequence.sample(state, key, 64, 0.5)
        index = replay.Index(batch.index.row[:UPDATE_B], batch.index.lane[:UPDATE_B])
        return sequence.update_priorities(state, index, values, ALPHA, EPS), batch

    return jax.vmap(one)(states, rows, keys, values)


def test_vmap_over_two_buffers_matches_unvmapped():
    rng = np.random.default_rng(5)
    a, _ = filled(20, 2 * R + 1)
    b, _ = filled(21, 3 * R + 4)
    rows = [random_row(rng) for _ in range(2)]
    keys = jax.random.split(jax.random.key(5), 2)
    values = rng.normal(size=(2, UPDATE_B)).astype(np.float32)
    v_state, v_batch = _vmapped(stack(a, b), stack(*rows), keys, values)
    for i, state in enumerate((a, b)):
        state = _add(state, rows[i])
        batch = _sample(state, keys[i], batch_size=64, beta=0.5)
        index = replay.Index(batch.index.row[:UPDATE_B], batch.index.lane[:UPDATE_B])
        state = _update(state, index, jnp.asarray(values[i]), ALPHA, EPS)
        assert_tree_equal(take(v_batch.data, i), batch.data, f"buffer {i}")
        assert_tree_equal(take(v_batch.carry, i), batch.carry, f"buffer {i}")
        assert_tree_equal(take(v_batch.index, i), batch.index, f"buffer {i}")
        np.testing.assert_allclose(np.asarray(v_batch.weights[i]), np.asarray(batch.weights), rtol=1e-6)
        assert_tree_equal(take(v_state.replay, i), state.replay, f"buffer {i}")
        for v_level, level in zip(jax.tree.leaves(take(v_state.tree, i)), jax.tree.leaves(state.tree)):
            np.testing.assert_allclose(v_level, np.asarray(level), rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(sequence_length=0), "sequence_length"),
        (dict(sequence_length=2.5), "sequence_length"),
        (dict(period=0), "period"),
        (dict(period=True), "period"),
        (dict(period=L + 1), "period"),
        (dict(capacity=N * (L - 1)), "capacity"),  # L - 1 rows per lane
        (dict(capacity=0), "capacity"),
        (dict(num_envs=-1), "num_envs"),
        (dict(example={"obs": np.zeros(3, np.float32)}), "carry"),
    ],
)
def test_bad_sizes_raise_value_error_naming_the_field(kwargs, field):
    args = dict(example=example_transition(), capacity=CAPACITY, num_envs=N, sequence_length=L, period=PERIOD)
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        sequence.init(**args)


def test_smallest_capacity_and_memory_check_counting_the_tree():
    state = sequence.init(example_transition(), N * L, N, sequence_length=L, period=L)  # R = L
    assert (state.replay.num_rows, state.num_starts) == (L, 1)
    per_item = replay.nbytes(example_transition(), 1)
    needed = R * N * per_item + sumtree.nbytes(K * N)
    with pytest.raises(ValueError, match=f"{needed:,}"):
        sequence.init(example_transition(), CAPACITY, N, L, PERIOD, max_bytes=needed - 1)
    sequence.init(example_transition(), CAPACITY, N, L, PERIOD, max_bytes=needed)


# --------------------------------------------------------------------------------------
# 5. Value rescaling and double-Q n-step targets (jaxrl.returns)
# --------------------------------------------------------------------------------------


def h_numpy(x, eps):
    return np.sign(x) * (np.sqrt(np.abs(x) + 1) - 1) + eps * x


def h_inverse_numpy(y, eps):
    return np.sign(y) * (((np.sqrt(1 + 4 * eps * (np.abs(y) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1)


def wide_range(rng, size):
    """Signed values with magnitudes from 1e-6 to 1e6, plus exact zeros."""
    x = np.sign(rng.normal(size=size)) * 10.0 ** rng.uniform(-6, 6, size)
    x[:5] = 0.0
    return x


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.0])
def test_value_rescale_matches_numpy_and_inverts(eps):
    rng = np.random.default_rng(0)
    x = wide_range(rng, 4000)
    got = np.asarray(_value_rescale(jnp.asarray(x, jnp.float32), np.float32(eps)), np.float64)
    np.testing.assert_allclose(got, h_numpy(x, eps), rtol=2e-6, atol=1e-12)
    if eps > 0:  # the textbook inverse divides by eps
        y = h_numpy(x, eps)
        got = np.asarray(_value_unrescale(jnp.asarray(y, jnp.float32), np.float32(eps)), np.float64)
        np.testing.assert_allclose(got, h_inverse_numpy(y, eps), rtol=1e-5, atol=1e-9)
    x32 = jnp.asarray(x, jnp.float32)
    roundtrip = np.asarray(_value_unrescale(_value_rescale(x32, np.float32(eps)), np.float32(eps)), np.float64)
    np.testing.assert_allclose(roundtrip, np.asarray(x32, np.float64), rtol=1e-5, atol=1e-12)
    y32 = jnp.asarray(wide_range(rng, 4000) / 1e3, jnp.float32)  # rescaled values are smaller
    roundtrip = np.asarray(_value_rescale(_value_unrescale(y32, np.float32(eps)), np.float32(eps)), np.float64)
    np.testing.assert_allclose(roundtrip, np.asarray(y32, np.float64), rtol=1e-5, atol=1e-12)


def oracle_double_q(r, q_online, q_target, term, trunc, gamma, n, eps):
    """One ``[T]`` series: a forward loop over each step's future (float64)."""
    length = len(r)
    h = (lambda x: x) if eps is None else (lambda x: h_numpy(x, eps))
    h_inv = (lambda x: x) if eps is None else (lambda x: h_inverse_numpy(x, eps))
    out = np.zeros(length)
    for t in range(length):
        total, discount = 0.0, 1.0
        for k in range(n):
            s = t + k
            total += discount * float(r[s])
            discount *= gamma
            if term[s] or trunc[s] or k == n - 1 or s == length - 1:
                bootstrap = h_inv(float(q_target[s, np.argmax(q_online[s])]))
                total += discount * (0.0 if term[s] else bootstrap)
                break
        out[t] = h(total)
    return out


@pytest.mark.parametrize("rescale_eps", [None, 1e-3])
@pytest.mark.parametrize("n", [1, 3, 40])
def test_double_q_n_step_targets_match_loop(n, rescale_eps):
    rng = np.random.default_rng(n)
    T, B, A = 20, 3, 4
    r = rng.normal(size=(T, B)).astype(np.float32) * 5
    q_online = rng.normal(size=(T, B, A)).astype(np.float32)
    q_target = (rng.normal(size=(T, B, A)) * 3).astype(np.float32)
    term, trunc = rng.random((T, B)) < 0.1, rng.random((T, B)) < 0.1
    term[4, 0], trunc[9, 0], term[13, 1], trunc[13, 1] = True, True, True, True
    term[-1, 2] = True
    gamma = np.float32(0.97)
    got = np.asarray(_double_q(r, q_online, q_target, term, trunc, gamma, n=n, rescale_eps=rescale_eps))
    for b in range(B):
        want = oracle_double_q(r[:, b], q_online[:, b], q_target[:, b], term[:, b], trunc[:, b], 0.97, n, rescale_eps)
        np.testing.assert_allclose(got[:, b], want, rtol=1e-4, atol=1e-4, err_msg=f"column {b}")
    single = np.asarray(
        _double_q(r[:, 0], q_online[:, 0], q_target[:, 0], term[:, 0], trunc[:, 0], gamma, n=n, rescale_eps=rescale_eps)
    )
    np.testing.assert_allclose(single, got[:, 0], rtol=1e-6)
