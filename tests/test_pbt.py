"""Population-based training (jaxrl.workflow.pbt): the exploit/explore step, and a population on CartPole."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl.algorithms import ppo
from jaxrl.workflow import pbt

BOUNDS = {"learning_rate": (1e-4, 3e-3), "ent_coef": (1e-4, 0.05)}
# 96 iterations of 256 env steps, in 8 rounds of 12.
CONFIG = ppo.Config(total_timesteps=24_576, num_envs=8, num_steps=32, num_evals=8, num_reports=0)


@struct.dataclass
class ToyState:
    params: dict
    opt_state: jax.Array
    env_state: jax.Array
    buffer: jax.Array
    timesteps: jax.Array


def test_exploit_copies_the_best_agents_into_the_worst_and_explores_within_bounds():
    population = 8
    state = ToyState(
        params={"w": jnp.arange(population * 3.0).reshape(population, 3)},
        opt_state=jnp.arange(population) * 10,
        env_state=jnp.arange(population) + 100,
        buffer=jnp.arange(population) + 200,
        timesteps=jnp.arange(population) + 300,
    )
    values = {
        "learning_rate": jnp.asarray([1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 2.9e-3, 3e-3]),
        "ent_coef": jnp.full((population,), 0.01),
    }
    scores = jnp.asarray([5.0, np.nan, 1.0, 7.0, 9.0, 3.0, 8.0, 2.0])  # worst: 1 (NaN), 2; best: 6, 4
    for trial in range(5):
        new_state, new_values, parents = pbt.exploit_and_explore(
            state, values, scores, jax.random.key(trial), BOUNDS, fraction=0.25, factors=(0.8, 1.25)
        )
        parents = np.asarray(parents)
        kept = [0, 3, 4, 5, 6, 7]
        np.testing.assert_array_equal(parents[kept], kept)
        assert set(parents[[1, 2]]) <= {4, 6}
        for member, parent in enumerate(parents):
            np.testing.assert_array_equal(new_state.params["w"][member], state.params["w"][parent])
            assert new_state.opt_state[member] == state.opt_state[parent]
            for name, (low, high) in BOUNDS.items():
                new, old = float(new_values[name][member]), float(values[name][parent])
                if member in kept:
                    assert new == float(values[name][member])
                else:
                    assert np.float32(low) <= new <= np.float32(high)  # clipped in float32
                    assert any(new == pytest.approx(min(max(old * f, low), high), rel=1e-6) for f in (0.8, 1.25))
        # the member's own experience and counters stay
        for name in ("env_state", "buffer", "timesteps"):
            np.testing.assert_array_equal(getattr(new_state, name), getattr(state, name))


@pytest.fixture(scope="module")
def result():
    return pbt.train("ppo", CONFIG, BOUNDS, population=4, interval=12, seed=0)


@pytest.mark.slow
def test_a_population_on_cartpole_ends_better_than_its_worst_initial_member(result):
    assert result.scores.shape == (8, 4) and result.parents.shape == (8, 4)
    assert result.metrics["eval_return"].shape == (4, 96)
    worst_initial = np.min(result.scores[0])
    final_eval = np.nanmean(result.metrics["eval_return"][:, -1])
    assert final_eval > worst_initial + 100, (final_eval, worst_initial)
    assert np.max(result.scores[-1]) > np.max(result.scores[0])


@pytest.mark.slow
def test_hyperparameters_stay_in_bounds_and_lineage_follows_parents(result):
    for name, (low, high) in BOUNDS.items():
        history = result.hyperparams[name]
        assert history.shape == (9, 4)
        assert np.all((low * (1 - 1e-6) <= history) & (history <= high * (1 + 1e-6))), name
    for round_index, parents in enumerate(result.parents[:-1]):
        for member, parent in enumerate(parents):
            if parent == member:  # kept: its values carry over unchanged
                assert (
                    result.hyperparams["learning_rate"][round_index + 1, member]
                    == result.hyperparams["learning_rate"][round_index, member]
                )
            else:  # replaced: scored among the worst, copied one of the best
                assert result.scores[round_index, member] <= np.sort(result.scores[round_index])[0]
                assert result.scores[round_index, parent] >= np.sort(result.scores[round_index])[-1]
    np.testing.assert_array_equal(result.parents[-1], np.arange(4))  # no exploit after the last round
    chain = result.lineage(2)
    assert len(chain) == 9 and chain[-1] == 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"interval": 7}, "interval must be an int >= 1 dividing the run's 96 iterations"),
        ({"population": 1}, "population must be an int >= 2"),
        ({"fraction": 0.6}, "fraction must be in"),
        ({"bounds": {"num_envs": (1, 8)}}, "'num_envs' is a static field"),
        ({"bounds": {"learning_rate": (1e-3, 1e-4)}}, "low < high"),
        ({"initial": {"learning_rate": [1.0] * 4, "ent_coef": [0.01] * 4}}, "must be 4 values within"),
    ],
)
def test_bad_pbt_arguments_are_clear_errors(kwargs, message):
    arguments = {"bounds": BOUNDS, "population": 4, "interval": 12, **kwargs}
    with pytest.raises(ValueError, match=message):
        pbt.train("ppo", CONFIG, **arguments)
