"""An algorithm's record, registered under a name of its own: the runner, sweeps, PBT
and the command line then find it by that name. (A module inside jaxrl is listed in
``jaxrl.algorithms.BUILT_IN`` instead.)"""

from jaxrl import algorithms
from jaxrl.algorithms import ppo, ppo_es
from jaxrl.workflow import runner
from jaxrl.workflow.options import RunOptions

# Any Algorithm record registers; here PPO-ES's functions under a second name.
record = algorithms.register(ppo_es.algorithm.variant("my_ppo_es", ppo_es.Config), replace=True)


def train_small(logdir: str):
    """Two seeds of three short generations, by name through the runner."""
    config = record.Config(
        ppo=ppo.Config(num_envs=2, num_steps=8, num_minibatches=1, num_epochs=2, hidden_sizes=(8,)),
        env_kwargs={"max_steps_in_episode": 8},
        ppo_iterations=1,
        fitness_episodes=1,
        total_timesteps=3 * (2 * 16 + 3 * 8),  # 3 generations of 2 members x 16 steps, 3 fitness episodes
        num_evals=1,
        eval_episodes=2,
    )
    return runner.run("my_ppo_es", config, seeds=2, options=RunOptions(logdir=logdir))
