"""Training throughput of jaxrl's algorithms, beside rejax 0.1.3 where rejax has the
algorithm, and beside a floor: the same env steps and network passes, nothing else.

    python benchmarks/throughput.py                         # every entry, 1 and 8 seeds
    python benchmarks/throughput.py ppo dqn --seeds 1 --runs 3
    python benchmarks/throughput.py --quick                 # every entry, tiny budgets: a smoke test
    python benchmarks/throughput.py sac td3 --no-peers --markdown out.md --plot out.png

Each benchmark's settings are one entry of ``ENTRIES``: the algorithm, its env, the jaxrl
Config fields, the rejax peer with its settings, and the budget. An algorithm's name
selects all its entries (``impala``: policy lag 1 and 4). Per entry and number of seeds
(``jax.vmap`` over the whole training run), each in a fresh process with JAX's
persistent compilation cache off (``_harness``), the rows are:

* ``jaxrl``: ``train`` at the entry's Config;
* ``rejax``: the peer at the same settings, where rejax 0.1.3 has the algorithm (PPO, DQN,
  SAC, TD3, PQN, IQN) and is installed (``--no-peers`` skips it);
* ``floor``: the run's env steps and network passes with nothing else (``run_floor``),
  compiled by the same XLA: the ceiling any implementation of these settings could
  reach on this machine (``--no-floor`` skips it).

Columns: compile s = tracing, lowering and compiling; run s = the fastest of ``--runs``
runs of the compiled function (the fastest, because on a shared machine the others are
slowed by other work; all are listed); steps/s = seeds * steps per seed / run s, where
BC counts gradient updates (it takes no env steps); / peer = steps/s over rejax's at the
same seeds; / floor = jaxrl's steps/s as a share of the floor's; final eval return = the
mean over seeds of the last evaluation. Both libraries evaluate ``EVALS`` times per run,
``EVAL_EPISODES`` episodes each, inside the timed run, as jaxrl's Configs do by default.
rejax evaluates after equal blocks of iterations, so it may train a few iterations more
to fit ``EVALS`` blocks; steps/s counts each side's own steps. ``--no-evals``: jaxrl's
runs evaluate never, the floor's work alone (MinAtar's and Atari's evaluation episodes
are long and not in the floor).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import sys

from _harness import (
    add_common_arguments,
    derive_timing,
    fmt,
    measure_and_emit,
    measure_in_child,
    measure_plan,
    peer_missing,
    report,
    time_compiled,
)

EVALS, EVAL_EPISODES = 10, 10
# The Atari entries' env and network: envpool's frames [84, 84, 4], the Nature DQN torso, 8 envs.
ATARI = dict(env_kwargs={"channels_last": True}, network="nature_cnn", hidden_sizes=(512,), num_envs=8)
RUNS = ("jaxrl", "rejax", "floor")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One benchmark: jaxrl's ``algorithm`` (a module of ``jaxrl.algorithms``) on
    ``env_id`` with the Config fields ``config`` (a part's field by its dotted path), for
    ``budget`` env steps per seed (BC: gradient updates; ``quick`` under --quick); beside
    it rejax's ``peer`` class, created with ``peer_config``. ``notes``: what still differs
    between the two. With ``preset``, ``config`` changes the algorithm's preset for the env."""

    algorithm: str
    title: str
    env_id: str
    budget: int
    quick: int
    config: dict = dataclasses.field(default_factory=dict)
    peer: str | None = None
    peer_config: dict = dataclasses.field(default_factory=dict)
    notes: tuple = ()
    preset: bool = False  # start from the algorithm's preset for env_id, not its Config's defaults


OFFPOLICY_NOTES = (
    "Replay: rejax draws each batch without replacement (jax.random.choice with probabilities over every slot, "
    "a Gumbel top-k per update); jaxrl uniformly with replacement from the filled part.",
    "Time limits: rejax stores done = terminated or truncated and does not bootstrap at the time limit; jaxrl "
    "bootstraps truncated episodes from the final observation.",
    "Initialisation: rejax flax defaults (lecun-normal kernels); jaxrl orthogonal.",
)

ENTRIES = {
    "ppo": Entry(
        "ppo",
        "PPO on CartPole-v1 at PureJaxRL's settings",
        "CartPole-v1",
        budget=500_000,
        quick=20_480,
        # PureJaxRL's CartPole PPO (purejaxrl/ppo.py), which are also ppo.Config's defaults.
        config=dict(
            num_envs=4,
            num_steps=128,
            num_epochs=4,
            num_minibatches=4,
            hidden_sizes=(64, 64),
            activation="tanh",
            anneal_lr=True,
            learning_rate=2.5e-4,
            gamma=0.99,
            gae_lambda=0.95,
            clip_eps=0.2,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
        ),
        # The same settings in rejax's names. rejax's optimiser (constant learning rate,
        # element-wise clipping, Adam eps 1e-8) is replaced by PureJaxRL's: rejax_ppo_class.
        peer="PPO",
        peer_config=dict(
            num_envs=4,
            num_steps=128,
            num_epochs=4,
            num_minibatches=4,
            agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
            learning_rate=2.5e-4,
            gamma=0.99,
            gae_lambda=0.95,
            clip_eps=0.2,
            ent_coef=0.01,
            vf_coef=0.5,
            max_grad_norm=0.5,
        ),
        notes=(
            "rejax runs with PureJaxRL's optimiser, as jaxrl does: global-norm clipping, Adam eps 1e-5, the "
            "learning rate annealed linearly to 0.",
            "rejax differs by design: flax-default (lecun) init instead of orthogonal; actor and critic have "
            "separate optimisers, so the .5 global-norm clip applies to each network's gradient separately "
            "(jaxrl: jointly); truncation is treated as termination (jaxrl bootstraps truncated episodes); "
            "its evaluation samples the policy (jaxrl's takes the mode).",
        ),
    ),
    # The price of memory: PPO with a 128-unit GRU at PureJaxRL's recurrent CartPole settings
    # (purejaxrl/ppo_rnn.py: 4 envs x 128 steps, 4 epochs x 4 minibatches, each minibatch whole
    # sequences of 1 env), beside feed-forward PPO at equal settings, on CartPole-v1 and on
    # MaskedCartPole-v1 (cart position and pole angle only). No peer: rejax has no recurrent PPO.
    **{
        f"ppo-{kind}{suffix}": Entry(
            "ppo",
            f"PPO ({'128-unit GRU' if kind == 'gru' else 'feed-forward, equal width'}) on {env_id} at PureJaxRL's "
            "recurrent-PPO settings",
            env_id,
            budget=500_000,
            quick=20_480,
            config=dict(
                num_envs=4,
                num_steps=128,
                num_epochs=4,
                num_minibatches=4,
                activation="relu",
                anneal_lr=True,
                learning_rate=2.5e-4,
                **(
                    dict(hidden_sizes=(128,), memory="gru", memory_size=128)
                    if kind == "gru"
                    else dict(hidden_sizes=(128, 128))
                ),
            ),
            notes=(
                "PureJaxRL's ppo_rnn.py network: a 128-unit relu embedding, the GRU, then a 128-unit relu layer "
                "before each head; jaxrl's: the 128-unit relu torso, the GRU, linear heads. Feed-forward rows: "
                "a 128 x 128 relu torso per head, the GRU's place taken by a dense layer.",
            ),
        )
        for kind in ("gru", "ff")
        for suffix, env_id in (("", "CartPole-v1"), ("-masked", "MaskedCartPole-v1"))
    },
    # Several agents: IPPO and MAPPO on MPE simple_spread (3 agents), 16 envs x 128 steps,
    # and single-agent PPO at equal network size and rows per pass (16 envs x 3
    # agents = 48 envs) for the per-agent-step cost. No peer: rejax has no multi-agent PPO.
    **{
        name: Entry(
            name,
            f"{name.upper()} on MPE simple_spread (3 agents), 16 envs x 128 steps",
            "jaxmarl:MPE_simple_spread_v3",
            budget=500_000,
            quick=20_480,
            config=dict(num_envs=16, num_steps=128),
            notes=("steps are env steps, each of 3 agents: an agent-step costs a third of an env step's time.",),
        )
        for name in ("ippo", "mappo")
    },
    "ppo-48-envs": Entry(
        "ppo",
        "PPO on CartPole-v1 at IPPO's network and rows: 48 envs (16 envs x 3 agents), 128 steps",
        "CartPole-v1",
        budget=500_000 * 3,
        quick=20_480 * 3,
        config=dict(num_envs=48, num_steps=128),
    ),
    # The A2C family at their Configs' defaults (no peer: rejax 0.1.3 has none of them).
    "a2c": Entry("a2c", "A2C on CartPole-v1 at a2c.Config()'s defaults", "CartPole-v1", 200_000, 20_000),
    "reinforce": Entry(
        "reinforce",
        "REINFORCE on CartPole-v1 at reinforce.Config()'s defaults",
        "CartPole-v1",
        200_000,
        20_000,
        notes=(
            "REINFORCE's env steps count every simulated step, also those after each env's first episode, "
            "which it does not learn from.",
        ),
    ),
    "impala": Entry(
        "impala", "IMPALA on CartPole-v1 at impala.Config()'s defaults (policy lag 1)", "CartPole-v1", 200_000, 20_000
    ),
    "impala-lag4": Entry(
        "impala", "IMPALA on CartPole-v1 with policy_lag=4", "CartPole-v1", 200_000, 20_000, config=dict(policy_lag=4)
    ),
    "dqn": Entry(
        "dqn",
        "DQN on CartPole-v1 at rejax's CartPole settings",
        "CartPole-v1",
        budget=100_000,
        quick=10_000,
        config=dict(
            num_envs=10,
            num_steps=1,  # rejax: one env step per env per iteration
            num_updates=5,  # num_epochs: gradient updates per iteration, each on a fresh batch
            batch_size=100,
            buffer_size=50_000,  # transitions, FIFO on both sides
            # rejax updates once global_step > fill_buffer, tested before collecting:
            # (fill_buffer // num_envs + 1) * num_envs random-action steps.
            learning_starts=5_010,
            hidden_sizes=(64, 64),
            activation="silu",  # swish == silu
            dueling=True,  # agent DuelingQNetwork: value + advantage - mean(advantage)
            double=True,  # ddqn
            n_step=1,
            prioritized=False,  # uniform replay
            # rejax moves the target after every iteration (target_update_freq 1 <= num_envs), i.e.
            # every num_epochs updates: target <- polyak * target + (1 - polyak) * online.
            target_update_period=5,
            tau=0.02,
            head="scalar",  # no C51
            **{"head.loss": "mse"},  # optax.l2_loss: 0.5 * td^2, mean over the batch
            learning_rate=0.001,
            anneal_lr=False,  # Adam (eps 1e-8 on both sides), constant
            max_grad_norm=10.0,  # NOT the same: rejax clips each gradient element (optax.clip)
            gamma=0.99,
            # Linear over exploration.fraction * total_timesteps env steps, from step 0.
            exploration="epsilon_greedy",
            **{"exploration.start": 1.0, "exploration.end": 0.05, "exploration.fraction": 0.5},
        ),
        # The "dqn" section of rejax's configs/gymnax/cartpole.yaml (in the rejax repository,
        # not in the 0.1.3 wheel), plus the code defaults it leaves unset ("code default").
        peer="DQN",
        peer_config=dict(
            agent="DuelingQNetwork",
            agent_kwargs={"activation": "swish"},  # hidden_layer_sizes (64, 64): code default
            num_envs=10,
            buffer_size=50_000,
            fill_buffer=5_000,
            batch_size=100,
            max_grad_norm=10.0,  # optax.clip: element-wise
            learning_rate=0.001,
            num_epochs=5,
            target_update_freq=1,  # code default (the yaml's "target_update_freq: 200" is commented out)
            polyak=0.98,
            eps_start=1.0,
            eps_end=0.05,
            exploration_fraction=0.5,
            gamma=0.99,
            ddqn=True,
            normalize_observations=False,
            normalize_rewards=False,  # code default
        ),
        notes=(
            "Gradient clipping: rejax clips each element to [-10, 10] (optax.clip), jaxrl the global norm to 10 "
            "(not settable in jaxrl).",
            *OFFPOLICY_NOTES[:2],
            "Initialisation: rejax flax defaults (lecun-normal kernels); jaxrl orthogonal (sqrt 2 torso, 1.0 "
            "heads). Evaluation: jaxrl greedy, rejax its own act (epsilon 0.005).",
        ),
    ),
    # PQN at purejaxql's CartPole settings (config/alg/pqn_cartpole.yaml: 32 envs x 64
    # steps, 4 epochs x 16 minibatches, LayerNorm, lambda 0.95, epsilon 1 -> 0.2 over a
    # fifth of the run), in what rejax can also set: 64 x 64 layers (rejax's PQN fixes
    # them; purejaxql: 256 x 256), no reward scale (rejax has none) and a constant
    # learning rate (rejax's is).
    "pqn": Entry(
        "pqn",
        "PQN on CartPole-v1 at purejaxql's CartPole settings",
        "CartPole-v1",
        budget=500_000,
        quick=20_480,
        config=dict(
            num_envs=32,
            num_steps=64,
            num_epochs=4,
            num_minibatches=16,
            hidden_sizes=(64, 64),
            activation="relu",
            layer_norm=True,
            learning_rate=1e-4,
            anneal_lr=False,
            gamma=0.99,
            lambda_=0.95,
            reward_scale=1.0,
            max_grad_norm=10.0,  # NOT the same: rejax clips each gradient element (optax.clip)
            **{"exploration.start": 1.0, "exploration.end": 0.2, "exploration.fraction": 0.2},
        ),
        peer="PQN",
        peer_config=dict(
            num_envs=32,
            num_steps=64,
            num_epochs=4,
            num_minibatches=16,
            # rejax's PQN builds its own network: 64 x 64, relu(LayerNorm(x)) activations
            learning_rate=1e-4,
            gamma=0.99,
            td_lambda=0.95,
            max_grad_norm=10.0,
            eps_start=1.0,
            eps_end=0.2,
            exploration_fraction=0.2,
        ),
        notes=(
            "Optimiser: jaxrl RAdam (purejaxql's) after global-norm clipping; rejax Adam after element-wise "
            "clipping (optax.clip).",
            "Time limits: rejax stops the Q(lambda) return at done = terminated or truncated; jaxrl bootstraps "
            "truncated episodes from the final observation. Both take one forward pass over every next "
            "observation (rejax during the rollout, jaxrl after it).",
            "Initialisation: rejax flax defaults (lecun-normal kernels); jaxrl orthogonal. Evaluation: jaxrl "
            "greedy, rejax its own act (epsilon 0.005).",
        ),
    ),
    # PQN's MinAtar preset (purejaxql's config/alg/pqn_minatar.yaml, the MinAtar CNN with
    # LayerNorm). No peer: rejax's PQN has no convolutional network.
    "pqn-minatar": Entry(
        "pqn",
        "PQN on Breakout-MinAtar at its preset (purejaxql's MinAtar settings, the MinAtar CNN)",
        "Breakout-MinAtar",
        budget=262_144,
        quick=8_192,
        config=dict(
            network="cnn",
            hidden_sizes=(128,),
            num_envs=128,
            num_steps=32,
            num_epochs=2,
            num_minibatches=32,
            learning_rate=5e-4,
            lambda_=0.65,
            reward_scale=1.0,
            **{"exploration.end": 0.05, "exploration.fraction": 0.1},
        ),
    ),
    # Pixels: DQN and PPO with convolutional torsos, on MinAtar (the MinAtar CNN) and on
    # envpool Atari frames (84x84x4, the Nature DQN CNN). No peer: rejax has no CNN agent.
    "dqn-minatar": Entry(
        "dqn",
        "DQN on Breakout-MinAtar at its preset (the MinAtar paper's DQN, the MinAtar CNN)",
        "Breakout-MinAtar",
        budget=50_000,
        quick=6_000,
        preset=True,
    ),
    "ppo-minatar-cnn": Entry(
        "ppo",
        "PPO on Breakout-MinAtar with the MinAtar CNN at the preset's batch shapes (64 envs x 128 steps, "
        "4 epochs x 8 minibatches)",
        "Breakout-MinAtar",
        budget=262_144,
        quick=16_384,
        config=dict(network="cnn", hidden_sizes=(256,), num_envs=64, num_steps=128, num_minibatches=8, num_epochs=4),
    ),
    "dqn-atari": Entry(
        "dqn",
        "DQN on envpool Pong-v5 (84x84x4 frames, the Nature CNN), Mnih et al.'s DQN (uniform replay, "
        "1-step targets, no double or dueling): 8 envs, one batch of 32 per 4 env steps",
        "envpool:Pong-v5",
        budget=8_192,
        quick=2_048,  # past learning_starts
        config=dict(
            ATARI,
            num_steps=4,
            num_updates=8,
            batch_size=32,
            buffer_size=10_000,  # transitions: 84x84x4 frames twice each, about 0.6 GB
            learning_starts=1_024,
            double=False,
            dueling=False,
            n_step=1,
            prioritized=None,
        ),
    ),
    "ppo-atari": Entry(
        "ppo",
        "PPO on envpool Pong-v5 (84x84x4 frames, the Nature CNN): 8 envs x 128 steps, 4 epochs x 4 minibatches",
        "envpool:Pong-v5",
        budget=8_192,
        quick=1_024,
        config=dict(
            ATARI,
            num_steps=128,
            num_minibatches=4,
            num_epochs=4,
        ),
    ),
    # IQN: the "iqn" section of rejax's configs/gymnax/cartpole.yaml (in the rejax
    # repository) with the replay shape of the DQN entry above (10 envs, 5 updates of 100
    # per iteration; the yaml: one env, batches of 1), the paper's N = N' = 64 and K = 32,
    # and 10,000 steps per seed (2,500 updates after 5,000 random steps), as a paper-sized
    # IQN update is slow on a CPU.
    "iqn": Entry(
        "dqn",
        "IQN on CartPole-v1 at rejax's CartPole settings (batches of 100)",
        "CartPole-v1",
        budget=10_000,
        quick=6_000,
        config=dict(
            num_envs=10,
            num_steps=1,
            num_updates=5,
            batch_size=100,
            buffer_size=50_000,
            learning_starts=5_010,  # rejax: fill_buffer 5,000 (see the DQN entry)
            hidden_sizes=(64, 64),
            activation="silu",
            dueling=False,
            double=True,  # rejax picks the next action with the online network
            n_step=1,
            prioritized=False,
            target_update_period=5,  # rejax moves the target every iteration (5 updates)
            tau=0.01,  # rejax polyak 0.99
            head="iqn",
            **{"head.num_online": 64, "head.num_target": 64, "head.num_acting": 32, "head.embedding_dim": 64},
            learning_rate=3e-4,
            anneal_lr=False,
            max_grad_norm=10.0,  # NOT the same: rejax clips each gradient element (optax.clip)
            gamma=0.99,
            exploration="epsilon_greedy",
            **{"exploration.start": 1.0, "exploration.end": 0.01, "exploration.fraction": 0.5},
        ),
        peer="IQN",
        peer_config=dict(
            agent_kwargs={"activation": "swish"},  # hidden_layer_sizes (64, 64): code default
            num_envs=10,
            buffer_size=50_000,
            fill_buffer=5_000,
            batch_size=100,
            num_epochs=5,
            num_tau_samples=64,
            num_tau_prime_samples=64,
            kappa=1.0,
            learning_rate=3e-4,
            max_grad_norm=10.0,
            target_update_freq=1,
            polyak=0.99,
            eps_start=1.0,
            eps_end=0.01,
            exploration_fraction=0.5,
            gamma=0.99,
            normalize_observations=False,
        ),
        notes=(
            "Network: rejax's IQN multiplies the torso by an embedding of as many cosines as its last layer (64) "
            "and adds a 64-unit swish layer before the output; jaxrl's maps the product straight to the Q-values.",
            "Target: rejax evaluates the next quantiles with the online network's params (its target network "
            "is kept but not read by the loss); jaxrl with the target network's, as the paper.",
            "Gradient clipping: rejax element-wise (optax.clip), jaxrl the global norm. Time limits: rejax stores "
            "done = terminated or truncated; jaxrl bootstraps truncated episodes.",
        ),
    ),
    # SAC, TD3 and DDPG: the "sac" / "td3" sections of rejax's configs/gymnax/pendulum.yaml
    # (in the rejax repository, not the 0.1.3 wheel) plus the 0.1.3 code defaults they leave
    # unset ("code default"); DDPG: the section of the same file from when rejax had DDPG.
    # The benchmark runs 20,000 steps on both sides (the yaml: 10,000). Pendulum's actions
    # span [-2, 2]: rejax's noises are in env units, jaxrl's in half-range units, so halved.
    # The yaml normalises observations; jaxrl's off-policy algorithms cannot, so rejax runs
    # without (normalize_observations=False).
    "sac": Entry(
        "sac",
        "SAC on Pendulum-v1 at rejax's Pendulum settings",
        "Pendulum-v1",
        budget=20_000,
        quick=2_000,
        config=dict(
            num_envs=1,
            batch_size=256,
            buffer_size=10_000,
            n_step=1,
            hidden_sizes=(64, 64),  # actor and critics
            activation="silu",  # swish == silu
            learning_rate=0.01,  # Adam (eps 1e-8 on both sides), constant, every network
            gamma=0.99,
            tau=0.02,  # 1 - polyak, after every update (target_update_freq 1, num_epochs 1)
            num_steps=1,
            num_updates=1,  # num_epochs: one env step per env, then num_epochs updates
            # rejax updates iff global_step > fill_buffer after collecting: fill_buffer // num_envs
            # iterations without updates on both sides; but rejax acts with its policy from step 0,
            # jaxrl uniformly at random until then.
            learning_starts=256,
            autotune=True,
            alpha=1.0,  # initial_alpha (code default): rejax's log_alpha starts at 0
            target_entropy=-1.0,  # -action_dim (target_entropy_ratio is for discrete actions)
        ),  # twin critics as num_critics=2; max_grad_norm inf = no clipping
        peer="SAC",
        peer_config=dict(
            agent_kwargs={"activation": "swish"},
            hidden_layer_sizes=(64, 64),  # code default (SAC.create_agent)
            num_critics=2,  # code default
            num_envs=1,
            buffer_size=10_000,
            fill_buffer=256,
            batch_size=256,
            learning_rate=0.01,  # actor, critics and temperature (one optax chain)
            num_epochs=1,  # gradient updates per env step
            gamma=0.99,
            polyak=0.98,
            target_update_freq=1,  # code default
            max_grad_norm=math.inf,  # code default: optax.clip(inf), no clipping
            normalize_observations=False,
            normalize_rewards=False,
        ),
        notes=(
            "Update order: rejax actor, then critics (the target's next action from the just-updated actor), "
            "then temperature; jaxrl critics, then actor (against the updated critics), then temperature.",
            "Temperature loss: rejax -alpha * (log pi + target), jaxrl log_alpha * (entropy - target): same sign, "
            "gradients differ by the factor alpha. Critic loss: rejax 0.5 * squared error, jaxrl squared error.",
            "Policy: rejax clips log_std to [-10, 2], jaxrl squashes it smoothly into [-5, 2]. Evaluation: the "
            "tanh of the Gaussian's mean on both sides (rejax's own act samples, so the benchmark passes one).",
            *OFFPOLICY_NOTES,
        ),
    ),
    "td3": Entry(
        "td3",
        "TD3 on Pendulum-v1 at rejax's Pendulum settings",
        "Pendulum-v1",
        budget=20_000,
        quick=2_000,
        config=dict(
            num_envs=1,
            batch_size=100,
            buffer_size=10_000,
            n_step=1,
            hidden_sizes=(64, 64),
            activation="silu",
            learning_rate=0.001,
            gamma=0.99,
            tau=0.05,  # 1 - polyak: actor and critic targets after every actor update
            # rejax's iteration: policy_delay x (collect num_envs steps, num_epochs critic updates),
            # then num_epochs actor updates and one target update. jaxrl: collect policy_delay
            # steps per env, then policy_delay * num_epochs critic updates with the actor and
            # targets on every policy_delay-th: the same counts, in another order.
            num_steps=2,
            num_updates=2,
            policy_delay=2,
            # rejax acts at random (and does not update) while global_step <= fill_buffer
            # before collecting: (fill // num_envs + 1) * num_envs = 1,001 steps, rounded down
            # to whole jaxrl iterations, so jaxrl makes one critic update more.
            learning_starts=1_000,
            twin_critics=True,  # num_critics 2
            target_noise=0.1,
            target_noise_clip=0.25,  # rejax's 0.2 and 0.5 in env units
            # no clipping in jaxrl; rejax's element-wise 100 barely acts
        )
        | {"exploration.std": 0.15},  # Gaussian noise: rejax's 0.3 in env units
        peer="TD3",
        peer_config=dict(
            actor_kwargs={"activation": "swish"},
            critic_kwargs={"activation": "swish"},  # 64x64: hard-coded
            num_critics=2,  # code default
            num_envs=1,
            buffer_size=10_000,
            fill_buffer=1_000,
            batch_size=100,
            learning_rate=0.001,
            num_epochs=1,  # critic updates per env step
            gamma=0.99,
            polyak=0.95,
            target_update_freq=1,  # code default
            max_grad_norm=100.0,  # optax.clip: element-wise
            exploration_noise=0.3,
            target_noise=0.2,
            target_noise_clip=0.5,  # env action units
            policy_delay=2,
            normalize_observations=False,
            normalize_rewards=False,
        ),
        notes=(
            "Actor loss: rejax -mean over BOTH critics of Q(s, actor(s)); jaxrl -mean Q_1 (as in the TD3 paper). "
            "Critic loss: rejax 0.5 * squared error per critic, jaxrl squared error.",
            *OFFPOLICY_NOTES,
        ),
    ),
    "ddpg": Entry(
        "ddpg",
        "DDPG on Pendulum-v1 at rejax's former Pendulum DDPG settings",
        "Pendulum-v1",
        budget=20_000,
        quick=2_000,
        config=dict(
            num_envs=1,
            batch_size=100,
            buffer_size=5_000,
            n_step=1,
            hidden_sizes=(64, 64),  # assumed, as rejax's TD3 and SAC
            activation="silu",
            learning_rate=0.001,
            gamma=0.98,
            tau=0.005,  # 1 - polyak
            num_steps=1,
            num_updates=1,  # num_epochs 1
            learning_starts=1_000,  # fill_buffer: random steps before the first update
        )  # DDPG: one critic, no delay, no target noise; not settable in jaxrl: max_grad_norm 10
        | {"exploration.std": 0.1},  # Gaussian noise, 0.2 in env units
        notes=(
            "rejax 0.1.3 has no DDPG (removed before 0.1), so no peer; its TD3 cannot stand in: with "
            "num_critics=1 its critic update fails, and with policy_delay=1, target_noise=0 it still takes the "
            "minimum of two critics.",
        ),
    ),
    "bc": Entry(
        "bc",
        "behaviour cloning on CartPole-v1 at bc.Config()'s defaults, from 10,000 random transitions",
        "CartPole-v1",
        budget=5_000,
        quick=500,
        notes=(
            "BC takes no env steps: its steps are gradient updates. Its data are random observations and "
            "actions (a BC update costs the same whatever they are), so its return is a clone of noise: a "
            "throughput figure, not a quality one.",
        ),
    ),
}


# ============================================================================ child: jaxrl


def jaxrl_config(entry: Entry, quick: bool):
    """The entry's algorithm module and Config: its fields (a part's by its dotted path,
    ``"head.loss"``), its budget, ``EVALS`` evaluations and no progress reports (host
    callbacks are not what is measured)."""
    from jaxrl.config import replace_paths

    module = importlib.import_module(f"jaxrl.algorithms.{entry.algorithm}")
    budget = {"num_updates" if entry.algorithm == "bc" else "total_timesteps": entry.quick if quick else entry.budget}
    fields = {name: value for name, value in entry.config.items() if "." not in name}
    in_parts = {name: value for name, value in entry.config.items() if "." in name}  # "exploration.std"
    make = module.preset if entry.preset else module.Config
    config = make(env_id=entry.env_id, num_reports=0, num_evals=EVALS, eval_episodes=EVAL_EPISODES, **budget, **fields)
    return module, replace_paths(config, in_parts)


def random_dataset(jax, config, size: int = 10_000):
    """``size`` transitions of random observations and actions shaped for the config's env."""
    import numpy as np

    from jaxrl import data, envs

    spec = envs.config_spec(config)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(size, *spec.obs_shape)).astype(np.float32)
    zeros = np.zeros(size, np.float32)
    return jax.device_put(
        data.Dataset(
            obs=obs,
            action=rng.integers(0, spec.num_actions, size).astype(np.int32),
            reward=zeros,
            terminated=np.zeros(size, bool),
            truncated=np.zeros(size, bool),
            next_obs=obs,
            episode_return=zeros,
            episode_length=np.zeros(size, np.int32),
            env_id=config.env_id,
            num_envs=1,
        )
    )


def run_jaxrl(jax, entry: Entry, seeds: int, args) -> dict:
    import numpy as np

    from jaxrl.workflow import metrics

    module, config = jaxrl_config(entry, args.quick)
    if getattr(args, "no_evals", False):
        config = config.replace(num_evals=0)
    keys = jax.random.split(jax.random.key(args.seed), seeds)
    if entry.algorithm == "bc":  # learns from a dataset, shared by the seeds
        train, inputs = jax.vmap(module.train, in_axes=(0, None, None)), (keys, config, random_dataset(jax, config))
    else:
        train, inputs = jax.vmap(module.train, in_axes=(0, None)), (keys, config)
    timing, out = time_compiled(jax, train, inputs, args.runs)
    if out is None:  # compiled only
        return dict(timing, settings={f.name: repr(getattr(config, f.name)) for f in dataclasses.fields(config)})
    counter = getattr(out.state, module.program(config).counter)  # env steps, or BC's updates
    final = metrics.latest_finite(jax.device_get(out.metrics["eval_return"]))
    return dict(
        timing,
        steps_per_seed=int(np.asarray(counter).reshape(-1)[0]),
        final_eval_return=float(np.mean(final)) if np.isfinite(final).any() else None,
        settings={f.name: repr(getattr(config, f.name)) for f in dataclasses.fields(config)},
    )


# ============================================================================ child: the floor

# How the floor runs each algorithm's learner (its network passes per update).
FLOORS = {
    "ppo": "onpolicy",
    "ippo": "onpolicy",
    "mappo": "onpolicy",
    "a2c": "onpolicy",
    "reinforce": "onpolicy",
    "impala": "onpolicy",
    "dqn": "dqn",
    "pqn": "pqn",
    "sac": "sac",
    "ddpg": "ddpg",
    "td3": "ddpg",
}


def tiny_sgd(jax, params, grads):
    """``params - 1e-6 * grads``: each pass then depends on the last one's output, so XLA
    can neither hoist a pass out of its loop nor merge two."""
    return jax.tree.map(lambda p, g: p - 1e-6 * g, params, grads)


def run_floor(jax, entry: Entry, seeds: int, args) -> dict:
    """The floor row: the env steps and network passes of the jaxrl run, nothing else.

    Every iteration steps the ``num_envs`` envs ``num_steps`` times, each step after the
    acting network's forward pass on the observations (no sampling: the argmax or the
    deterministic action), and then runs the learner's passes on batches of the run's
    shapes (``onpolicy_passes``, ``dqn_passes``, ``sac_passes``, ``ddpg_passes``), each
    backward pass followed by ``tiny_sgd``. Off-policy runs start with their warm-up
    iterations: env steps with a constant action, no network. No sampling, loss
    arithmetic, returns, replay, optimiser, target schedule, episode statistics or
    evaluation: any implementation of these settings does at least this work.

    Each ``*_passes`` builder returns ``init(key, obs) -> params``, ``act(params, obs,
    memory) -> (action, kept, memory)`` and ``learn(params, (obs [T, N, ...], memory
    [T, N, ...])) -> (params, kept)``, where ``memory`` is a recurrent policy's carry
    (``()`` without memory, reset where episodes end) and ``kept`` an output no later
    pass reads (a value), so that nothing waits for it.
    """
    import jax.numpy as jnp

    from jaxrl import envs, networks, rollout

    module, config = jaxrl_config(entry, args.quick)
    env, env_params = envs.make_config_env(config)  # multi-agent: the agents-as-a-batch-axis view
    spec = envs.config_spec(config)
    passes = {
        "onpolicy": onpolicy_passes,
        "dqn": dqn_passes,
        "pqn": pqn_passes,
        "sac": sac_passes,
        "ddpg": ddpg_passes,
    }
    family = importlib.import_module(f"jaxrl.algorithms.{FLOORS[entry.algorithm]}")  # its networks
    init, act, learn = passes[FLOORS[entry.algorithm]](jax, family, config, spec)
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    warmup = getattr(config, "warmup_iterations", 0)
    fresh_start = getattr(config, "advantage", None) == "monte_carlo"  # REINFORCE resets every env per iteration
    no_action = jnp.zeros((config.num_envs, *spec.action_shape), jnp.int32 if spec.discrete else jnp.float32)

    def iteration(carry, key, acting):
        # ``kept``: outputs no later pass reads (values), summed into the carry so that XLA
        # keeps their passes without making anything wait for them.
        params, env_state, obs, memory, kept = carry
        if fresh_start:
            key, reset_key = jax.random.split(key)
            obs, env_state = rollout.reset(env, env_params, reset_key, config.num_envs)
            memory = module.initial_carry(config, config.num_envs)

        def one_step(carry, keys):
            env_state, obs, memory = carry
            action, keep, next_memory = act(params, obs, memory) if acting else (no_action, jnp.zeros(()), memory)
            next_obs, env_state, _, terminated, truncated, _ = env_step(keys, env_state, action, env_params)
            next_memory = networks.reset_carry(next_memory, terminated | truncated)
            return (env_state, next_obs, next_memory), ((obs, memory), jnp.mean(keep))

        keys = jax.random.split(key, (config.num_steps, config.num_envs))
        (env_state, obs, memory), (observed, keep) = jax.lax.scan(one_step, (env_state, obs, memory), keys)
        params, learned = learn(params, observed) if acting else (params, jnp.zeros(()))
        return (params, env_state, obs, memory, kept + jnp.sum(keep) + learned), None

    def one_seed(key):
        init_key, env_key, key = jax.random.split(key, 3)
        obs, env_state = rollout.reset(env, env_params, env_key, config.num_envs)
        carry = (init(init_key, obs), env_state, obs, module.initial_carry(config, config.num_envs), jnp.zeros(()))
        keys = jax.random.split(key, config.num_iterations)
        if warmup:
            carry = jax.lax.scan(lambda c, k: iteration(c, k, False), carry, keys[:warmup])[0]
        return jax.lax.scan(lambda c, k: iteration(c, k, True), carry, keys[warmup:])[0]  # all of it: nothing dead

    keys = jax.random.split(jax.random.key(args.seed), seeds)
    timing, _ = time_compiled(jax, jax.vmap(one_seed), (keys,), args.runs)
    settings = {
        "iterations": config.num_iterations,
        "warm-up iterations (env steps only)": warmup,
        "env steps per iteration": f"{config.num_steps} x {config.num_envs} envs",
        "learner": FLOORS[entry.algorithm],
        "batch": getattr(config, "batch_size", "the rollout's"),
    }
    return dict(
        timing,
        steps_per_seed=config.num_iterations * config.num_envs * config.num_steps,
        settings={k: str(v) for k, v in settings.items()},
    )


def onpolicy_passes(jax, module, config, spec):
    """PPO and the A2C family: the actor-critic's forward pass at every step; per iteration
    the critic's bootstrap values of as many observations, then ``num_epochs *
    num_minibatches`` forward and backward passes (A2C: one, on the whole rollout). With
    memory, every pass runs the recurrent core: acting one step from the carry, the
    bootstrap values as two-step sequences from each step's stored carry, and the learner
    over sequences of ``chunk_length`` steps from the carry stored at their first step.
    Observations may be pytrees, and with ``multi_agent`` carry an agent axis ``[N, A, ...]``
    (IPPO, MAPPO): the passes are then ``jaxrl.algorithms.onpolicy.apply_network``'s, one for all agents."""
    import jax.numpy as jnp

    from jaxrl.algorithms import onpolicy

    epochs, minibatches = getattr(config, "num_epochs", 1), getattr(config, "num_minibatches", 1)
    recurrent = config.memory != "none"
    length = getattr(config, "chunk_length", config.num_steps) if recurrent else 1
    tree = jax.tree.map

    def apply(params, obs, memory=()):
        return onpolicy.apply_network(params, obs, config, memory)

    def act(params, obs, memory):  # the policy's mode; the value is kept, as a rollout stores it
        if recurrent:  # a sequence of one step
            out, value, memory = apply(params, tree(lambda x: x[None], obs), memory)
            out, value = (out[0] if spec.discrete else (out[0][0], out[1])), value[0]
        else:
            out, value, memory = apply(params, obs)
        action = jnp.argmax(out, axis=-1) if spec.discrete else jnp.clip(out[0], spec.action_low, spec.action_high)
        return action, value, memory

    def loss(params, obs, memory):
        return sum(jnp.mean(jnp.square(x)) for x in jax.tree.leaves(apply(params, obs, memory)[:2]))

    def learn(params, observed):
        obs, memory = observed
        flat = lambda x: x.reshape((-1, *x.shape[2:]))  # noqa: E731
        if recurrent:  # each step's value after advancing its stored carry through obs: [2, T * N] sequences
            pairs = tree(lambda x: jnp.stack([flat(x), flat(x)]), obs)
            bootstrap = apply(params, pairs, tree(flat, memory))[1]
            # [T, N, ...] -> [N * T / L chunks, L, ...] -> minibatches of [L, chunks, ...] sequences
            chunks = lambda x: jnp.swapaxes(x, 0, 1).reshape((minibatches, -1, length, *x.shape[2:]))  # noqa: E731
            batches = (tree(lambda x: jnp.swapaxes(chunks(x), 1, 2), obs), tree(lambda m: chunks(m)[:, :, 0], memory))
        else:
            rows = tree(flat, obs)
            bootstrap = apply(params, rows)[1]
            batches = (tree(lambda x: x.reshape((minibatches, -1, *x.shape[1:])), rows), jnp.zeros((minibatches,)))

        def epoch(params, _):
            def minibatch(params, batch):
                obs, memory = batch
                return tiny_sgd(jax, params, jax.grad(loss)(params, obs, memory if recurrent else ())), None

            return jax.lax.scan(minibatch, params, batches)[0], None

        return jax.lax.scan(epoch, params, None, length=epochs)[0], jnp.mean(bootstrap)

    def init(key, obs):
        return onpolicy.init_network(key, config)

    return init, act, learn


FLOOR_BATCHES = 4  # distinct random batches an off-policy floor cycles through


def random_batches(config, spec) -> dict:
    """``FLOOR_BATCHES`` batches of ``batch_size`` random transitions (leaves ``[K,
    batch_size, ...]``), observations at the env's dtype (uint8 frames as uint8). The
    off-policy floors replay no data; each update takes the next of these batches, so
    that nothing the network computes from its input alone (a uint8 frame's scaling, a
    convolution's patches) is the same at every update and hoisted out of the loop."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (FLOOR_BATCHES, config.batch_size, *spec.obs_shape)
    dtype = np.dtype(spec.obs_dtype)
    if dtype == np.bool_:
        observations = lambda: rng.random(shape) < 0.5  # noqa: E731
    elif np.issubdtype(dtype, np.integer):
        observations = lambda: rng.integers(0, 256, shape).astype(dtype)  # noqa: E731
    else:
        observations = lambda: rng.normal(size=shape).astype(dtype)  # noqa: E731
    action_dim = math.prod(spec.action_shape)
    return dict(
        obs=observations(),
        next_obs=observations(),
        action=rng.uniform(-1.0, 1.0, (FLOOR_BATCHES, config.batch_size, action_dim)).astype(np.float32),
    )  # unit actions


def updates(jax, config, batches, critic_step, actor_step, period: int = 1):
    """An iteration's learner: ``num_updates`` of ``critic_step(params, batch)``, with
    ``actor_step(params, batch)`` after every ``period``-th (TD3's policy delay), update
    ``u`` on batch ``u % FLOOR_BATCHES`` of ``batches``."""

    def batch_at(u):
        return jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, u % FLOOR_BATCHES, keepdims=False), batches)

    def group(params, g):
        for k in range(period):
            params = critic_step(params, batch_at(g * period + k))
        return actor_step(params, batch_at(g * period + period - 1)), None

    def learn(params, observed):  # the off-policy floors learn from random batches, not from ``observed``
        groups = jax.numpy.arange(config.num_updates // period)
        return jax.lax.scan(group, params, groups)[0], jax.numpy.zeros(())

    return learn


def dqn_passes(jax, module, config, spec):
    """DQN: the Q-network's forward pass at every step; per update the online network's
    forward and backward pass at s, the target network's forward at s' and, for double
    Q-learning, the online network's at s'."""
    import jax.numpy as jnp

    network, batches = module.make_network(config), random_batches(config, spec)
    head = config.head
    if head.network_settings():  # IQN: each pass at its fractions (online N, target N', choice and acting K)
        fractions = {role: head.draw_fractions(None, role, (config.batch_size,)) for role in ("online", "target")}
        fractions["acting"] = head.draw_fractions(None, "acting")

        def apply(params, obs, role):
            taus = fractions["acting"] if role == "choice" else fractions[role]
            return jnp.mean(network.apply(params, obs, taus=taus)[0], axis=-1)
    else:

        def apply(params, obs, role):
            return head.q_values(network.apply(params, obs))

    def init(key, obs):
        online = module.init_network(config, {"params": key, "noise": key}, obs[:1])
        return {"online": online, "target": online}

    def critic_step(params, batch):
        def loss(online):  # the gradient must depend on every pass, or XLA drops the passes it does not need
            next_q = apply(params["target"], batch["next_obs"], "target")
            if config.double:  # the online network picks the next action
                next_q = next_q + apply(online, batch["next_obs"], "choice")
            return jnp.mean(jnp.square(apply(online, batch["obs"], "online") - jax.lax.stop_gradient(next_q)))

        grads = jax.grad(loss)(params["online"])
        return {"online": tiny_sgd(jax, params["online"], grads), "target": tiny_sgd(jax, params["target"], grads)}

    def act(params, obs, memory):
        return jnp.argmax(apply(params["online"], obs, "acting"), axis=-1), jnp.zeros(()), memory

    return init, act, updates(jax, config, batches, critic_step, lambda params, batch: params)


def pqn_passes(jax, module, config, spec):
    """PQN: the Q-network's forward pass at every step; per iteration its forward pass on
    as many next observations (the Q(lambda) bootstrap), then ``num_epochs *
    num_minibatches`` forward and backward passes on minibatches of the rollout."""
    import jax.numpy as jnp

    network = module.make_network(config)

    def init(key, obs):
        return network.init(key, obs[:1])

    def act(params, obs, memory):
        return jnp.argmax(network.apply(params, obs), axis=-1), jnp.zeros(()), memory

    def learn(params, observed):
        rows = observed[0].reshape((-1, *observed[0].shape[2:]))
        bootstrap = jnp.max(network.apply(params, rows), axis=-1)
        batches = rows.reshape((config.num_minibatches, -1, *rows.shape[1:]))

        def epoch(params, _):
            def minibatch(params, obs):
                grads = jax.grad(lambda p: jnp.mean(jnp.square(network.apply(p, obs))))(params)
                return tiny_sgd(jax, params, grads), None

            return jax.lax.scan(minibatch, params, batches)[0], None

        return jax.lax.scan(epoch, params, None, length=config.num_epochs)[0], jnp.mean(bootstrap)

    return init, act, learn


def sac_passes(jax, module, config, spec):
    """SAC: the actor's forward pass at every step; per update the actor at s' and the
    target critics there, the critics' forward and backward pass at (s, a), and the actor
    and critics forward and backward to the actor's parameters at s."""
    import jax.numpy as jnp

    actor, critic, batches = module.make_actor(config), module.make_critic(config), random_batches(config, spec)

    def init(key, obs):
        actor_key, critic_key = jax.random.split(key)
        critics = critic.init(critic_key, obs[:1], batches["action"][0, :1])
        return {"actor": actor.init(actor_key, obs[:1]), "critic": critics, "target": critics}

    def step(params, batch):
        next_loc, _ = actor.apply(params["actor"], batch["next_obs"])
        target = jnp.min(critic.apply(params["target"], batch["next_obs"], jnp.tanh(next_loc)), axis=0)
        critic_loss = lambda c: jnp.mean(jnp.square(critic.apply(c, batch["obs"], batch["action"]) - target))
        critic_grad = jax.grad(critic_loss)(params["critic"])

        def actor_loss(a):
            loc, log_std = actor.apply(a, batch["obs"])
            return jnp.mean(log_std) - jnp.mean(jnp.min(critic.apply(params["critic"], batch["obs"], jnp.tanh(loc)), 0))

        return {
            "actor": tiny_sgd(jax, params["actor"], jax.grad(actor_loss)(params["actor"])),
            "critic": tiny_sgd(jax, params["critic"], critic_grad),
            "target": tiny_sgd(jax, params["target"], critic_grad),
        }

    def act(params, obs, memory):  # the tanh of the Gaussian's mean, on the action bounds
        loc = actor.apply(params["actor"], obs)[0]
        return spec.from_unit(jnp.tanh(loc).reshape(action_batch_shape(obs, spec))), jnp.zeros(()), memory

    return init, act, updates(jax, config, batches, step, lambda params, batch: params)


def ddpg_passes(jax, module, config, spec):
    """DDPG and TD3: the actor's forward pass at every step; per critic update the target
    actor and target critics at s' and the critics' forward and backward pass at (s, a);
    per actor update (every ``policy_delay``-th) the actor and the first critic forward
    and backward to the actor's parameters at s."""
    import jax.numpy as jnp

    actor, critic, first = module.make_actor(config), module.make_critic(config), module.make_critic(config, 1)
    batches = random_batches(config, spec)

    def init(key, obs):
        actor_key, critic_key = jax.random.split(key)
        a, c = actor.init(actor_key, obs[:1]), critic.init(critic_key, obs[:1], batches["action"][0, :1])
        return {"actor": a, "critic": c, "target_actor": a, "target_critic": c}

    def critic_step(params, batch):
        next_action = actor.apply(params["target_actor"], batch["next_obs"])
        target = jnp.min(critic.apply(params["target_critic"], batch["next_obs"], next_action), axis=0)
        loss = lambda c: jnp.mean(jnp.square(critic.apply(c, batch["obs"], batch["action"]) - target))
        grads = jax.grad(loss)(params["critic"])
        return {
            **params,
            "critic": tiny_sgd(jax, params["critic"], grads),
            "target_critic": tiny_sgd(jax, params["target_critic"], grads),
        }

    def actor_step(params, batch):
        first_critic = jax.tree.map(lambda p: p[:1], params["critic"])
        loss = lambda a: -jnp.mean(first.apply(first_critic, batch["obs"], actor.apply(a, batch["obs"])))
        grads = jax.grad(loss)(params["actor"])
        return {
            **params,
            "actor": tiny_sgd(jax, params["actor"], grads),
            "target_actor": tiny_sgd(jax, params["target_actor"], grads),
        }

    def act(params, obs, memory):
        action = spec.from_unit(actor.apply(params["actor"], obs).reshape(action_batch_shape(obs, spec)))
        return action, jnp.zeros(()), memory

    return init, act, updates(jax, config, batches, critic_step, actor_step, config.policy_delay)


def action_batch_shape(obs, spec) -> tuple:
    """The shape of a batch of env actions for observations ``obs [N, ...]``."""
    return (obs.shape[0], *spec.action_shape)


# ============================================================================ child: rejax


def rejax_env(env_id: str):
    """gymnax ``env_id`` as rejax 0.1.3 needs it: ``LegacyStepAPIWrapper`` (rejax expects
    gymnax's pre-1.0 five-value step) around ``LogWrapper`` (episode statistics, as jaxrl's
    training env keeps). Returns (env, env_params)."""
    import gymnax
    from gymnax.wrappers import LegacyStepAPIWrapper, LogWrapper

    class Env(LegacyStepAPIWrapper):
        # rejax deep-copies its config; the gymnax wrappers' __getattr__ recurses forever
        # on the half-built copy. Envs are stateless, so sharing one is a correct copy.
        def __deepcopy__(self, memo):
            return self

    base_env, env_params = gymnax.make(env_id)
    return Env(LogWrapper(base_env)), env_params


def rejax_ppo_class(num_updates: int):
    """rejax's PPO with PureJaxRL's optimiser, which jaxrl has too: global-norm clipping,
    Adam eps 1e-5, the learning rate annealed linearly to 0 over ``num_updates``
    minibatch updates (rejax's own: constant rate, element-wise clipping, eps 1e-8)."""
    import jax
    import jax.numpy as jnp
    import optax
    import rejax
    from flax.training.train_state import TrainState
    from rejax.algos.algorithm import register_init

    class PPO(rejax.PPO):
        @register_init
        def initialize_network_params(self, rng):  # overrides rejax's (same name, same state)
            rng, rng_actor, rng_critic = jax.random.split(rng, 3)
            obs_ph = jnp.empty([1, *self.env.observation_space(self.env_params).shape])
            actor_params = self.actor.init(rng_actor, obs_ph, rng_actor)
            critic_params = self.critic.init(rng_critic, obs_ph)
            learning_rate = self.learning_rate

            def schedule(count):  # the same linear annealing as jaxrl's
                return learning_rate * (1.0 - jnp.minimum(count, num_updates) / num_updates)

            tx = optax.chain(optax.clip_by_global_norm(self.max_grad_norm), optax.adam(schedule, eps=1e-5))
            return {
                "actor_ts": TrainState.create(apply_fn=(), params=actor_params, tx=tx),
                "critic_ts": TrainState.create(apply_fn=(), params=critic_params, tx=tx),
            }

    return PPO


def rejax_sac_mode(algo, ts):
    """rejax SAC's deterministic policy (the tanh of its Gaussian's mean, on the action
    bounds), to evaluate as jaxrl does: rejax's own act samples."""
    import jax.numpy as jnp

    def act(obs, rng):
        dist = algo.actor.apply(ts.actor_ts.params, jnp.expand_dims(obs, 0), method="_action_dist")
        return jnp.squeeze(algo.actor.action_loc + jnp.tanh(dist.loc) * algo.actor.action_scale)

    return act


def run_peer(jax, entry: Entry, seeds: int, args) -> dict:
    """rejax's peer at ``entry.peer_config``, training jaxrl's iterations (an iteration
    takes the same env steps on both sides) in ``EVALS`` equal blocks, each ending in an
    evaluation of ``EVAL_EPISODES`` episodes."""
    import numpy as np
    import rejax
    import rejax.evaluate

    steps = entry.config["num_envs"] * entry.config["num_steps"]
    iterations = (entry.quick if args.quick else entry.budget) // steps
    per_block = -(-iterations // EVALS)  # rejax runs ceil(total / eval_freq) blocks
    cls = getattr(rejax, entry.peer)
    if entry.peer == "PPO":
        cls = rejax_ppo_class(EVALS * per_block * entry.config["num_epochs"] * entry.config["num_minibatches"])
    env, env_params = rejax_env(entry.env_id)
    algo = cls.create(
        env=env,
        env_params=env_params,
        total_timesteps=EVALS * per_block * steps,
        eval_freq=per_block * steps,
        skip_initial_evaluation=True,
        **entry.peer_config,
    )

    def eval_callback(algo, ts, rng):
        act = rejax_sac_mode(algo, ts) if entry.peer == "SAC" else algo.make_act(ts)
        return rejax.evaluate.evaluate(act, rng, env, env_params, EVAL_EPISODES, env_params.max_steps_in_episode)

    keys = jax.random.split(jax.random.key(args.seed), seeds)
    timing, out = time_compiled(jax, jax.vmap(algo.replace(eval_callback=eval_callback).train), (keys,), args.runs)
    settings = dict(entry.peer_config, total_timesteps=algo.total_timesteps, eval_freq=algo.eval_freq)
    if out is None:  # compiled only
        return dict(timing, settings={k: repr(v) for k, v in settings.items()})
    ts, (_, returns) = jax.device_get(out)
    return dict(
        timing,
        steps_per_seed=int(np.asarray(ts.global_step).reshape(-1)[0]),
        final_eval_return=float(np.mean(np.asarray(returns)[:, -1])),
        settings={k: repr(v) for k, v in settings.items()},
    )


def emit_one(args, entries: dict) -> None:
    """A child's work (``--one ENTRY RUN SEEDS``): measure that row of ``entries`` and
    print its result for the parent."""
    name, run, seeds = args.one
    measure = {"jaxrl": run_jaxrl, "rejax": run_peer, "floor": run_floor}[run]
    measure_and_emit(
        {"entry": name, "run": run, "seeds": int(seeds)},
        lambda jax: measure(jax, entries[name], int(seeds), args),
        packages=("gymnax", "rejax") if run == "rejax" else ("gymnax",),
    )


# ============================================================================ parent


HEADERS = [
    "run",
    "algorithm",
    "seeds",
    "steps/seed",
    "compile s",
    "run s (fastest)",
    "all runs s",
    "steps/s",
    "/ peer",
    "/ floor",
    "final eval return",
]


def ratios(results) -> None:
    """``peer_ratio`` (jaxrl and floor rows: steps/s over rejax's) and ``floor_share``
    (jaxrl rows: steps/s over the floor's), where both measurements succeeded."""
    ok = {(r["entry"], r["run"], r["seeds"]): r for r in results if "error" not in r}
    for (name, run, seeds), r in ok.items():
        peer, floor = ok.get((name, "rejax", seeds)), ok.get((name, "floor", seeds))
        if peer and run != "rejax":
            r["peer_ratio"] = r["steps_per_s"] / peer["steps_per_s"]
        if floor and run == "jaxrl":
            r["floor_share"] = r["steps_per_s"] / floor["steps_per_s"]


def row(r) -> list[str]:
    cells = [r["run"], r["entry"], str(r["seeds"])]
    if "error" in r:
        return cells + ["FAILED (see below)"] + ["-"] * (len(HEADERS) - 4)
    peer = f"{r['peer_ratio']:.2f}x" if "peer_ratio" in r else "-"
    return cells + [
        f"{r['steps_per_seed']:,}",
        f"{r['compile_s']:.1f}",
        f"{r['run_s']:.2f}",
        ", ".join(f"{t:.2f}" for t in r["run_times"]),
        f"{r['steps_per_s']:,.0f}",
        peer,
        fmt(r.get("floor_share"), ".0%"),
        fmt(r.get("final_eval_return"), ".1f"),
    ]


def plot(results, path: str) -> None:
    """Bars of steps/s per entry (log scale: the entries differ by orders of magnitude),
    one panel per number of seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "error" not in r]
    names, seeds = list(dict.fromkeys(r["entry"] for r in ok)), sorted({r["seeds"] for r in ok})
    figure, axes = plt.subplots(len(seeds), 1, figsize=(1.1 * len(names) + 3, 3.5 * len(seeds)), squeeze=False)
    for ax, count in zip(axes[:, 0], seeds, strict=True):
        for i, run in enumerate(RUNS):
            rate = {r["entry"]: r["steps_per_s"] for r in ok if r["run"] == run and r["seeds"] == count}
            ax.bar(
                [j + (i - 1) * 0.27 for j in range(len(names))], [rate.get(n, math.nan) for n in names], 0.27, label=run
            )
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("steps / s (steady state)")
        ax.set_title(f"{count} seed{'s' * (count > 1)} vmapped")
        ax.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "algos",
        nargs="*",
        metavar="ALGO",
        help=f"entries or algorithms to measure (default: all): {', '.join(ENTRIES)}",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="numbers of vmapped seeds to measure (default: 1 8; --quick: 1)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke test of every entry: tiny budgets, 1 run, 1 seed")
    parser.add_argument("--no-peers", action="store_true", help="measure no rejax rows, even if rejax is installed")
    parser.add_argument("--no-floor", action="store_true", help="measure no floor rows")
    parser.add_argument(
        "--no-evals",
        action="store_true",
        help="jaxrl rows train without evaluations, the floor's work only (where evaluation episodes are long: "
        "MinAtar, Atari); rejax rows still evaluate",
    )
    parser.add_argument("--plot", metavar="PNG", help="write a bar chart of steps/s (matplotlib)")
    add_common_arguments(parser, ("ENTRY", "RUN", "SEEDS"))
    args = parser.parse_args(argv)
    args.runs = args.runs or (1 if args.quick else 2)
    args.seeds = list(dict.fromkeys(args.seeds or ([1] if args.quick else [1, 8])))
    if args.runs < 1 or min(args.seeds) < 1:
        parser.error("--runs and --seeds must be >= 1")
    if args.one:
        emit_one(args, ENTRIES)
        return 0

    known = set(ENTRIES) | {entry.algorithm for entry in ENTRIES.values()}
    unknown = [name for name in args.algos if name not in known]
    if unknown:
        parser.error(f"unknown algorithm {', '.join(map(repr, unknown))}; choose from {', '.join(ENTRIES)}")
    names = [n for n, e in ENTRIES.items() if not args.algos or n in args.algos or e.algorithm in args.algos]
    peer_note = peer_missing("rejax", args.no_peers)
    plan = []
    for name in names:
        entry = ENTRIES[name]
        runs = ["jaxrl"] + ["rejax"] * bool(entry.peer and not peer_note)
        runs += ["floor"] * (entry.algorithm in FLOORS and not args.no_floor)
        plan += [(name, run, seeds) for seeds in args.seeds for run in runs]
    results = measure_plan(
        plan,
        lambda item: measure_in_child(
            __file__,
            dict(zip(("entry", "run", "seeds"), item, strict=True)),
            args,
            ("runs", "seed", "quick", "no_evals"),
        ),
        label=lambda item: f"{item[0]}: {item[1]}, {item[2]} seed{'s' * (item[2] > 1)}",
    )
    derive_timing(results)
    ratios(results)

    notes = [f"error: {r['entry']} {r['run']} x{r['seeds']}: {r['error']}" for r in results if "error" in r]
    for name in names:
        entry = ENTRIES[name]
        budget = entry.quick if args.quick else entry.budget
        notes.append(
            f"{name}: {entry.title}, {budget:,} {'updates' if name == 'bc' else 'env steps'} per seed"
            + (f"; peer rejax {entry.peer}" if entry.peer else "")
        )
        notes += [f"{name}: {note}" for note in entry.notes]
    notes += ([peer_note] if peer_note else []) + [
        "evaluation: none in jaxrl's runs (--no-evals)"
        if args.no_evals
        else f"evaluation: {EVALS} x {EVAL_EPISODES} episodes per run on both sides, inside the timed run.",
        "floor: the run's env steps and network passes only (acting forward passes, bootstrap values, the learner's "
        "forward and backward passes on batches of the same shapes and dtypes, off-policy a different random one "
        "each update), each backward pass followed by a tiny SGD step so that nothing is hoisted; no sampling, loss "
        "arithmetic, replay, optimiser or evaluation.",
    ]
    seen = set()
    for r in results:
        if "settings" in r and (r["entry"], r["run"]) not in seen:
            seen.add((r["entry"], r["run"]))
            settings = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
            notes.append(f"{r['entry']} {r['run']} settings: {settings}")
    title = f"Training throughput, seeds vmapped: {', '.join(map(str, args.seeds))}" + (
        " (--quick budgets)" if args.quick else ""
    )
    report(title, HEADERS, [row(r) for r in results], notes, results, args.markdown, left=(0, 1))
    if args.plot and any("error" not in r for r in results):
        plot(results, args.plot)
    return 0 if all("error" not in r for r in results if r["run"] == "jaxrl") else 1


if __name__ == "__main__":
    sys.exit(main())
