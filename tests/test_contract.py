"""The algorithm contract as code: every registered name gives a record with the contract's
functions, Configs hold at most 30 fields, modules build their record rather than
re-export names, and a user's own record is served like a built-in one."""

import ast
import dataclasses
import importlib
import pathlib
import sys

import pytest

from jaxrl import algorithms
from jaxrl.algorithms.contract import FUNCTIONS, Algorithm

ALGORITHMS_DIR = pathlib.Path(__file__).parent.parent / "jaxrl" / "algorithms"


@pytest.mark.parametrize("name", algorithms.names())
def test_every_name_gives_a_record_with_the_contract(name):
    record = algorithms.get(name)
    assert isinstance(record, Algorithm) and record.name == name and record.summary
    assert all(callable(getattr(record, function)) for function in FUNCTIONS)
    module = importlib.import_module(algorithms.BUILT_IN[name])
    assert module.algorithm is record and algorithms.resolve(module) is record
    assert module.Config is record.Config and module.train is record.train  # the module reads as the contract
    assert len(dataclasses.fields(record.Config)) <= 30, [f.name for f in dataclasses.fields(record.Config)]
    for env_id, settings in record.presets.items():
        assert isinstance(settings, dict) and isinstance(env_id, str)


def test_no_algorithm_module_re_exports_names():
    """A variant module defines what differs and builds its record: no ``__all__`` lists,
    no importing another algorithm's functions by name."""
    for path in sorted(ALGORITHMS_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        assigned = {
            name.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for name in ast.walk(node)
            if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store)
        }
        assert "__all__" not in assigned, path.name
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxrl.algorithms."):
                module = node.module.removeprefix("jaxrl.algorithms.")
                imported = {alias.name for alias in node.names}
                assert module in ("contract",) or len(imported) <= 3, f"{path.name} imports {sorted(imported)}"


def test_a_users_record_is_registered_and_refused_twice():
    ppo = algorithms.get("ppo")
    mine = ppo.variant("my_ppo", ppo.Config, {"CartPole-v1": {"num_envs": 8}}, summary="PPO under another name")
    try:
        assert algorithms.register(mine) is mine
        assert algorithms.get("my_ppo") is mine and "my_ppo" in algorithms.names()
        assert algorithms.get("my_ppo").preset("CartPole-v1").num_envs == 8
        with pytest.raises(ValueError, match="already registered"):
            algorithms.register(mine)
        with pytest.raises(ValueError, match="already registered"):
            algorithms.register(ppo.variant("dqn", ppo.Config))  # a built-in name
    finally:
        algorithms._REGISTERED.pop("my_ppo", None)
    with pytest.raises(TypeError, match="Algorithm record"):
        algorithms.register(ppo.Config)
    with pytest.raises(ValueError, match="unknown algorithm 'ppp'. Did you mean 'ppo'"):
        algorithms.get("ppp")


def test_old_names_warn_and_still_work():
    with pytest.warns(DeprecationWarning, match="jaxrl.algorithms.names"):
        assert algorithms.ALGORITHMS == tuple(algorithms.names())
    sys.modules.pop("jaxrl.runner", None)  # warn again, whoever imported the old path before
    with pytest.warns(DeprecationWarning, match="jaxrl.runner moved to jaxrl.workflow.runner"):
        old = importlib.import_module("jaxrl.runner")
    from jaxrl.workflow import runner

    assert old.run is runner.run
    from jaxrl import envs

    with pytest.warns(DeprecationWarning, match="jaxrl.algorithms.requirements"):
        assert envs.MULTI_DISCRETE_ALGORITHMS


def test_run_json_builds_only_declared_parts():
    """A saved run's config names its parts by class; loading it builds declared parts
    only, never a class the JSON merely names."""
    from jaxrl.config import from_json, to_json
    from jaxrl.exploration import OrnsteinUhlenbeck

    assert from_json(to_json(OrnsteinUhlenbeck(sigma=0.3))) == OrnsteinUhlenbeck(sigma=0.3)
    with pytest.raises(ValueError, match="unknown part 'subprocess.run'"):
        from_json({"part": "subprocess.run", "args": ["true"]})


def test_a_variant_with_another_program_trains_that_program():
    ppo = algorithms.get("ppo")
    program = lambda config: ppo.program(config)  # noqa: E731 - a stand-in for another data path
    variant = ppo.variant("other", ppo.Config, program=program)
    assert variant.program is program and variant.train is not ppo.train and variant.evaluate is ppo.evaluate
    assert ppo.variant("same", ppo.Config).train is ppo.train  # nothing it is built from changed


def test_a_record_of_the_five_functions_builds_program_train_and_evaluate():
    """``program`` defaults to ``init``, ``num_iterations`` of ``step`` and ``evaluate`` at
    ``num_evals`` points: the same run, output for output, as PPO's own."""
    import jax

    ppo = algorithms.get("ppo")
    bare = Algorithm("bare", ppo.Config, ppo.init, ppo.act, ppo.initial_carry, ppo.update, ppo.step)
    config = ppo.Config(num_envs=2, num_steps=4, num_minibatches=1, num_epochs=1, total_timesteps=32, num_evals=2)
    program = bare.program(config)
    assert (program.num_iterations, program.num_evals) == (config.num_iterations, 2)
    bare_out, ppo_out = (jax.eval_shape(record.train, jax.random.key(0), config) for record in (bare, ppo))
    assert jax.tree.structure(bare_out) == jax.tree.structure(ppo_out)
    assert jax.tree.leaves(bare_out) == jax.tree.leaves(ppo_out)
