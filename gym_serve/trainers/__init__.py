"""Trainer adapters: gym-serve's rollouts in the shape each RL trainer's rollout hook wants.

| module | trainer | hook |
|---|---|---|
| `trl` | TRL >= 1.0 | `GRPOTrainer(rollout_func=TRLRollouts(...))` |
| `trl_async` | TRL's async GRPO | `AsyncGRPOTrainer(rollout_worker=..., weight_transfer=...)` |
| `verl` | verl 0.9 | an agent loop (`GymServeAgentLoop`) |
| `skyrl` | SkyRL 0.4 | a generator (`GymServeGenerator`) |
| `nemo_rl` | NeMo RL 0.7 | NeMo Gym's `RolloutCollectionHelper`, replaced |
| `openrlhf` | OpenRLHF 0.11 | `--train.agent_func_path`: an `AgentExecutorBase` on OpenRLHF's own engine |

All of them turn rollout rows into `sequence.TrainingSequence`s (one shared
builder, which also refuses a rollout without token ids, a trainer tokenizer
other than the model tier's and a prompt over the trainer's limit) and, but
OpenRLHF's, get rollouts from a `source.RolloutSource`: gym-serve over HTTP
(`gym_serve.client.GymClient`) or in the cluster
(`gym_serve.collect.stream.ServeRollouts`). OpenRLHF samples with its own
engine, so its executor runs gym-serve's episode loop itself, with the tools
and `verify` on gym-serve's Environment tier. The trainer packages are optional:
a module imports its trainer only where it builds that trainer's own objects.
"""
