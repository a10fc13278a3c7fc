"""gym-serve's NeMo RL stand-in installed into the real `nemo_gym` module and driven as NeMo RL drives it (not CI).

NeMo RL and NeMo Gym need Python 3.13; NeMo Gym 0.7.0's rollout collection imports on 3.11 when forced
(`pip install --no-deps --ignore-requires-python nemo-gym==0.7.0` plus its dependencies), which is enough to
check that `install()` replaces the class `NemoGym._spinup` imports.

    PYTHONPATH=. /tmp/nemo-gym-env/bin/python scripts/trainer_interfaces/nemo_rl_real.py
"""

import asyncio

from gym_serve.trainers import nemo_rl
from tests import trainer_contracts as contract
from tests.test_trainers import CannedSource

nemo_rl.install()
from nemo_gym.rollout_collection import RolloutCollectionHelper  # noqa: E402  (what NemoGym._spinup imports)
from nemo_gym.server_utils import BaseServerConfig  # noqa: E402


async def main() -> None:
    assert RolloutCollectionHelper is nemo_rl.GymServeRolloutCollection
    rch = RolloutCollectionHelper(CannedSource)
    rows = [{"responses_create_params": {"input": []}, "agent_ref": {"name": "w"}, "_rowidx": i} for i in range(3)]
    head = BaseServerConfig(host="127.0.0.1", port=1)
    done = []
    for task in rch.run_examples(examples=rows, head_server_config=head):
        row, result = await task
        done.append((row["_rowidx"], contract.nemo_rl_postprocess(result)["message_log"][1]["token_ids"].tolist()))
    assert sorted(done) == [(0, [10, 11]), (1, [10, 11]), (2, [10, 11])]
    print("ok: NeMo Gym's RolloutCollectionHelper is gym-serve's", sorted(done))


if __name__ == "__main__":
    asyncio.run(main())
