"""Tests for ``jaxrl.returns`` against independent NumPy / pure-Python oracles.

The oracles below are written from the textbook definitions (forward sums over the
future of each step, or the scalar recursions), *not* ported from the JAX code. They
work on one 1-D time series at a time in float64; batched inputs ``[T, N]`` are
checked column by column.

Conventions (see the module docstring of ``jaxrl/returns.py``):

* ``v_next[t]`` is the value of the state reached by step ``t`` (before auto-reset).
* ``term[t]``: no bootstrap after step ``t``.
* ``trunc[t]``: bootstrap from ``v_next[t]``; nothing flows back from ``t + 1``.
* The sequence end behaves like a truncation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import returns

RTOL = 1e-5
ATOL = 1e-5
T = 32
N = 3
SHAPES = [(T,), (T, N)]
SEEDS = [0, 1, 2]

# Jitted once at module level: every test reuses the same two shapes, so each
# function is compiled at most a handful of times. gamma / lambda / clipping
# thresholds are traced arguments (the docstrings say they may be traced).
_gae = jax.jit(returns.gae)
_lambda_returns = jax.jit(returns.lambda_returns)
_discounted_returns = jax.jit(returns.discounted_returns)
_n_step_targets = jax.jit(returns.n_step_targets, static_argnames=("n",))
_vtrace = jax.jit(returns.vtrace)


# --------------------------------------------------------------------------------------
# Input generation
# --------------------------------------------------------------------------------------


def make_inputs(seed: int, shape: tuple[int, ...], *, consistent: bool = False, dones: bool = True):
    """Random float32 inputs with terminations and truncations mid-sequence.

    Forced structure (per batch column, shifted so that columns differ):
      * a step that is terminated only, one truncated only, one both;
      * the last step: column/seed dependent -- terminated, truncated, both, or neither.

    With ``consistent=True`` the values satisfy ``v_next[t] == v[t + 1]`` wherever the
    episode continues into ``t + 1`` (not done and ``t < T - 1``); at episode ends
    ``v_next`` stays an independent random number (value of the final observation).
    """
    rng = np.random.default_rng(seed)
    length = shape[0]
    r = rng.normal(size=shape).astype(np.float32)
    v = rng.normal(size=shape).astype(np.float32)
    v_next = rng.normal(size=shape).astype(np.float32)
    if dones:
        term = rng.random(shape) < 0.12
        trunc = rng.random(shape) < 0.12
        flat_term = term.reshape(length, -1)
        flat_trunc = trunc.reshape(length, -1)
        for col in range(flat_term.shape[1]):
            off = (seed + 2 * col) % 4
            flat_term[5 + off, col] = True  # terminated only
            flat_trunc[5 + off, col] = False
            flat_term[12 + off, col] = False  # truncated only
            flat_trunc[12 + off, col] = True
            flat_term[19 + off, col] = True  # both at once
            flat_trunc[19 + off, col] = True
            flat_term[20 + off, col] = True  # two dones in a row
            mode = (seed + col) % 4  # last step
            flat_term[-1, col] = mode in (0, 2)
            flat_trunc[-1, col] = mode in (1, 2)
        term = flat_term.reshape(shape)
        trunc = flat_trunc.reshape(shape)
    else:
        term = np.zeros(shape, bool)
        trunc = np.zeros(shape, bool)
    if consistent:
        cont = ~(term | trunc)
        v_next[:-1] = np.where(cont[:-1], v[1:], v_next[:-1])
    gamma = float(np.float32(rng.uniform(0.8, 0.999)))
    lam = float(np.float32(rng.uniform(0.3, 1.0)))
    return dict(r=r, v=v, v_next=v_next, term=term, trunc=trunc, gamma=gamma, lam=lam)


def columns(*arrays):
    """Yield tuples of matching 1-D float64 columns (time-major, batch dims flattened)."""
    length = arrays[0].shape[0]
    flat = [np.asarray(a).reshape(length, -1) for a in arrays]
    for j in range(flat[0].shape[1]):
        yield tuple(f[:, j].astype(np.float64) for f in flat)


def apply_oracle(oracle, *arrays, **kwargs):
    """Apply a 1-D oracle column by column; returns float64 with the input shape."""
    shape = arrays[0].shape
    outs = [oracle(*cols, **kwargs) for cols in columns(*arrays)]
    if isinstance(outs[0], tuple):
        return tuple(np.stack([o[i] for o in outs], axis=1).reshape(shape) for i in range(len(outs[0])))
    return np.stack(outs, axis=1).reshape(shape)


def episode_end(t, term, trunc):
    """Last step index of the (within-sequence) episode containing step ``t``."""
    s = t
    while s < len(term) - 1 and not (term[s] or trunc[s]):
        s += 1
    return s


# --------------------------------------------------------------------------------------
# Oracles (1-D, float64, plain Python loops from the definitions)
# --------------------------------------------------------------------------------------


def oracle_gae(r, v, v_next, term, trunc, gamma, lam):
    """Backward recursion A_t = delta_t + gamma lam (1 - done_t) A_{t+1}, A_T = 0."""
    length = len(r)
    adv = np.zeros(length)
    next_adv = 0.0
    for t in reversed(range(length)):
        bootstrap = 0.0 if term[t] else gamma * v_next[t]
        delta = r[t] + bootstrap - v[t]
        done = bool(term[t]) or bool(trunc[t])
        next_adv = delta + (0.0 if done else gamma * lam * next_adv)
        adv[t] = next_adv
    return adv


def oracle_lambda_returns(r, v_next, term, trunc, gamma, lam):
    """Recursive TD(lambda) return.

    G_t = r_t + gamma (1 - term_t) [(1 - lam) v_next_t + lam G_{t+1}], with G_{t+1}
    replaced by v_next_t when step t ends the episode (term/trunc) or the sequence.
    """
    length = len(r)
    g = np.zeros(length)

    def G(t):  # noqa: N802 -- direct transcription of the recursion, memoised below
        if not np.isnan(memo[t]):
            return memo[t]
        done = bool(term[t]) or bool(trunc[t]) or t == length - 1
        g_next = v_next[t] if done else G(t + 1)
        val = r[t] + (0.0 if term[t] else gamma * ((1 - lam) * v_next[t] + lam * g_next))
        memo[t] = val
        return val

    memo = np.full(length, np.nan)
    for t in reversed(range(length)):  # fill from the end to avoid deep recursion
        g[t] = G(t)
    return g


def oracle_n_step(r, v_next, term, trunc, gamma, n):
    """Sum rewards forward from t for up to n steps, stopping at the first episode end
    or the sequence end, then bootstrap from v_next of the last step taken (unless that
    step terminated)."""
    length = len(r)
    out = np.zeros(length)
    for t in range(length):
        total = 0.0
        for k in range(n):
            s = t + k
            total += gamma**k * r[s]
            if term[s] or trunc[s] or k == n - 1 or s == length - 1:
                if not term[s]:
                    total += gamma ** (k + 1) * v_next[s]
                break
        out[t] = total
    return out


def oracle_discounted(r, v_next, term, trunc, gamma):
    """Forward sum of discounted rewards to the episode end (or sequence end), plus the
    discounted bootstrap value there unless the episode terminated."""
    length = len(r)
    out = np.zeros(length)
    for t in range(length):
        end = episode_end(t, term, trunc)
        total = sum(gamma ** (s - t) * r[s] for s in range(t, end + 1))
        if not term[end]:
            total += gamma ** (end - t + 1) * v_next[end]
        out[t] = total
    return out


def oracle_lambda_as_mixture(r, v_next, term, trunc, gamma, lam):
    """Lambda-return as the lambda-weighted mixture of n-step returns (S&B eq. 12.3 with
    the episode / sequence end at m steps ahead): (1-lam) sum_{n<m} lam^{n-1} G^(n)
    + lam^{m-1} G^(m)."""
    length = len(r)
    out = np.zeros(length)
    n_step = {n: oracle_n_step(r, v_next, term, trunc, gamma, n) for n in range(1, length + 1)}
    for t in range(length):
        m = episode_end(t, term, trunc) - t + 1
        total = sum((1 - lam) * lam ** (n - 1) * n_step[n][t] for n in range(1, m))
        total += lam ** (m - 1) * n_step[m][t]
        out[t] = total
    return out


def oracle_vtrace(v, v_next, r, term, trunc, log_rho, gamma, rho_bar, c_bar, pg_rho_bar, lam):
    """V-trace (Espeholt et al., 2018, eq. 1), cut at episode boundaries.

    vs_t = v_t + sum_{s=t}^{end} gamma^{s-t} (prod_{i=t}^{s-1} c_i) rho_s delta_s,
    delta_s = r_s + gamma (1 - term_s) v_next_s - v_s,
    rho_s = min(rho_bar, pi/mu), c_i = lam * min(c_bar, pi/mu); ``end`` is the last step
    of the episode (or of the sequence).
    pg_adv_t = min(pg_rho_bar, pi/mu) (r_t + gamma (1 - term_t) q_t - v_t) with
    q_t = vs_{t+1} inside an episode and v_next_t at an episode / sequence end.
    """
    length = len(r)
    ratio = np.exp(log_rho)
    rho = np.minimum(rho_bar, ratio)
    c = lam * np.minimum(c_bar, ratio)
    delta = np.array([r[s] + (0.0 if term[s] else gamma * v_next[s]) - v[s] for s in range(length)])
    vs = np.zeros(length)
    for t in range(length):
        end = episode_end(t, term, trunc)
        total = 0.0
        for s in range(t, end + 1):
            trace = np.prod(c[t:s]) if s > t else 1.0
            total += gamma ** (s - t) * trace * rho[s] * delta[s]
        vs[t] = v[t] + total
    pg = np.zeros(length)
    for t in range(length):
        done = bool(term[t]) or bool(trunc[t]) or t == length - 1
        q = v_next[t] if done else vs[t + 1]
        target = r[t] + (0.0 if term[t] else gamma * q)
        pg[t] = min(pg_rho_bar, ratio[t]) * (target - v[t])
    return vs, pg


# --------------------------------------------------------------------------------------
# Sanity checks of the generated inputs (so the tests really exercise the edge cases)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
def test_inputs_cover_edge_cases(shape):
    last_modes = set()
    for seed in SEEDS:
        x = make_inputs(seed, shape)
        term, trunc = x["term"].reshape(T, -1), x["trunc"].reshape(T, -1)
        assert (term[1:-1] & ~trunc[1:-1]).any(axis=0).all()
        assert (trunc[1:-1] & ~term[1:-1]).any(axis=0).all()
        assert (trunc[1:-1] & term[1:-1]).any(axis=0).all()
        last_modes |= {(bool(a), bool(b)) for a, b in zip(term[-1], trunc[-1])}
    assert len(last_modes) >= 3  # the last step is done in several ways across seeds
    assert (True, False) in last_modes and (False, True) in last_modes


# --------------------------------------------------------------------------------------
# Oracle comparisons
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_gae_matches_oracle(seed, shape):
    x = make_inputs(seed, shape)
    got = _gae(x["r"], x["v"], x["v_next"], x["term"], x["trunc"], x["gamma"], x["lam"])
    assert got.shape == shape and got.dtype == jnp.float32
    want = apply_oracle(oracle_gae, x["r"], x["v"], x["v_next"], x["term"], x["trunc"], gamma=x["gamma"], lam=x["lam"])
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_returns_matches_oracle(seed, shape):
    x = make_inputs(seed, shape)
    got = _lambda_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], x["lam"])
    assert got.shape == shape and got.dtype == jnp.float32
    want = apply_oracle(
        oracle_lambda_returns, x["r"], x["v_next"], x["term"], x["trunc"], gamma=x["gamma"], lam=x["lam"]
    )
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)
    # Second, structurally different definition: mixture of n-step returns.
    mixture = apply_oracle(
        oracle_lambda_as_mixture, x["r"], x["v_next"], x["term"], x["trunc"], gamma=x["gamma"], lam=x["lam"]
    )
    np.testing.assert_allclose(mixture, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_returns_matches_oracle(seed, shape):
    x = make_inputs(seed, shape)
    got = _discounted_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"])
    assert got.shape == shape and got.dtype == jnp.float32
    want = apply_oracle(oracle_discounted, x["r"], x["v_next"], x["term"], x["trunc"], gamma=x["gamma"])
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [1, 2, 5, T, T + 3])
@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
def test_n_step_targets_matches_oracle(n, shape):
    for seed in SEEDS:
        x = make_inputs(seed, shape)
        got = _n_step_targets(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], n=n)
        assert got.shape == shape and got.dtype == jnp.float32
        want = apply_oracle(oracle_n_step, x["r"], x["v_next"], x["term"], x["trunc"], gamma=x["gamma"], n=n)
        np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL, err_msg=f"seed={seed}")


VTRACE_CASES = {
    # name: (log_rho spread, rho_bar, c_bar, pg_rho_bar, lambda_)
    "clip_1_1": (1.0, 1.0, 1.0, None, 1.0),
    "clip_2_0.5": (1.0, 2.0, 0.5, None, 1.0),
    "clip_pg_lambda": (1.0, 1.5, 1.0, 0.7, 0.9),
    "on_policy_noclip": (0.0, np.inf, np.inf, None, 1.0),
}


@pytest.mark.parametrize("case", list(VTRACE_CASES))
@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_vtrace_matches_oracle(seed, shape, case):
    spread, rho_bar, c_bar, pg_rho_bar, lam = VTRACE_CASES[case]
    x = make_inputs(seed, shape)
    rng = np.random.default_rng(1000 + seed)
    log_rho = (spread * rng.normal(size=shape)).astype(np.float32)
    kwargs = dict(rho_bar=rho_bar, c_bar=c_bar, lambda_=lam)
    if pg_rho_bar is not None:
        kwargs["pg_rho_bar"] = pg_rho_bar
    out = _vtrace(x["v"], x["v_next"], x["r"], x["term"], x["trunc"], log_rho, x["gamma"], **kwargs)
    assert out.vs.shape == shape and out.pg_advantages.shape == shape
    want_vs, want_pg = apply_oracle(
        oracle_vtrace,
        x["v"],
        x["v_next"],
        x["r"],
        x["term"],
        x["trunc"],
        log_rho,
        gamma=x["gamma"],
        rho_bar=rho_bar,
        c_bar=c_bar,
        pg_rho_bar=rho_bar if pg_rho_bar is None else pg_rho_bar,
        lam=lam,
    )
    np.testing.assert_allclose(np.asarray(out.vs), want_vs, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.asarray(out.pg_advantages), want_pg, rtol=RTOL, atol=ATOL)
    # The oracle's target r_t + gamma (1 - term_t) q_t, its advantage before the weight.
    weight = np.minimum(rho_bar if pg_rho_bar is None else pg_rho_bar, np.exp(log_rho.astype(np.float64)))
    want_q = want_pg / weight + np.asarray(x["v"], np.float64)
    np.testing.assert_allclose(np.asarray(out.q_estimate), want_q, rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------------------
# Cross-function properties
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_gae_plus_value_equals_lambda_returns(seed, shape):
    x = make_inputs(seed, shape, consistent=True)
    adv = _gae(x["r"], x["v"], x["v_next"], x["term"], x["trunc"], x["gamma"], x["lam"])
    lam_ret = _lambda_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], x["lam"])
    np.testing.assert_allclose(np.asarray(adv) + x["v"], np.asarray(lam_ret), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_discounted_returns_is_lambda_one(seed, shape):
    x = make_inputs(seed, shape)
    disc = _discounted_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"])
    lam1 = _lambda_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], 1.0)
    np.testing.assert_allclose(np.asarray(disc), np.asarray(lam1), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [T, T + 3])
@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
def test_n_step_long_horizon_equals_discounted_returns(shape, n):
    for seed in SEEDS:
        for dones in (False, True):  # with dones too: n >= T always reaches the episode end
            x = make_inputs(seed, shape, dones=dones)
            nstep = _n_step_targets(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], n=n)
            disc = _discounted_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"])
            np.testing.assert_allclose(
                np.asarray(nstep), np.asarray(disc), rtol=RTOL, atol=ATOL, err_msg=f"seed={seed} dones={dones}"
            )


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
def test_n_step_one_is_td_target(shape):
    for seed in SEEDS:
        x = make_inputs(seed, shape)
        got = _n_step_targets(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], n=1)
        want = x["r"].astype(np.float64) + x["gamma"] * (1.0 - x["term"]) * x["v_next"].astype(np.float64)
        np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("length, n", [(1, 1), (1, 2), (1, 3), (4, 6)])
def test_n_step_horizon_longer_than_sequence_keeps_shape(length, n):
    """Any n >= 1 is allowed; an n larger than T must just stop at the sequence end."""
    r = np.arange(1, length + 1, dtype=np.float32)
    v_next = np.full(length, 10.0, np.float32)
    flags = np.zeros(length, bool)
    got = returns.n_step_targets(r, v_next, flags, flags, 0.5, n=n)
    assert got.shape == (length,)
    want = oracle_discounted(r.astype(np.float64), v_next.astype(np.float64), flags, flags, 0.5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [0, -1])
def test_n_step_rejects_non_positive_n(n):
    x = make_inputs(0, (T,))
    with pytest.raises(ValueError):
        returns.n_step_targets(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"], n=n)


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_vtrace_on_policy_unclipped_equals_discounted_returns(seed, shape):
    x = make_inputs(seed, shape, consistent=True)
    zeros = np.zeros(shape, np.float32)
    out = _vtrace(x["v"], x["v_next"], x["r"], x["term"], x["trunc"], zeros, x["gamma"], rho_bar=jnp.inf, c_bar=jnp.inf)
    disc = np.asarray(_discounted_returns(x["r"], x["v_next"], x["term"], x["trunc"], x["gamma"]))
    np.testing.assert_allclose(np.asarray(out.vs), disc, rtol=RTOL, atol=ATOL)
    # On-policy, the policy-gradient advantage is the Monte-Carlo advantage G_t - v_t.
    np.testing.assert_allclose(np.asarray(out.pg_advantages), disc - x["v"], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", SHAPES, ids=["T", "TxN"])
@pytest.mark.parametrize("seed", SEEDS)
def test_vtrace_on_policy_lambda_equals_gae(seed, shape):
    """On-policy V-trace(lambda) with c = lambda is GAE: vs = v + A = lambda-return."""
    x = make_inputs(seed, shape, consistent=True)
    zeros = np.zeros(shape, np.float32)
    out = _vtrace(
        x["v"], x["v_next"], x["r"], x["term"], x["trunc"], zeros, x["gamma"], rho_bar=1.0, c_bar=1.0, lambda_=x["lam"]
    )
    adv = _gae(x["r"], x["v"], x["v_next"], x["term"], x["trunc"], x["gamma"], x["lam"])
    np.testing.assert_allclose(np.asarray(out.vs) - x["v"], np.asarray(adv), rtol=RTOL, atol=ATOL)
