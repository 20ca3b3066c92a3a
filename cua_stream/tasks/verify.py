"""The tasks' verifier, run inside the episode by ``tests/test.sh``: reads what the page reported from
the task's server (and the agent's final answer) and writes Harbor's reward: ``/logs/verifier/reward.txt``
for the bundled tasks; ``reward.json`` for a MiniWoB++ task (``miniwob/<name>``), its raw reward beside
the reward (Harbor reads ``reward.json`` first, a dict of finite numbers, and the outcome keeps it)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.request
from pathlib import Path

from cua_stream.tasks.miniwob.verdict import DEFAULT_THRESHOLD, verdict
from cua_stream.tasks.pages import layout
from cua_stream.tasks.verdict import reward

FINAL_ANSWER = Path("/logs/agent/final_answer.txt")
REWARD = Path("/logs/verifier/reward.txt")
REWARD_JSON = Path("/logs/verifier/reward.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--threshold", type=float, default=DEFAULT_THRESHOLD, help="miniwob/*: the raw reward that succeeds"
    )
    args = parser.parse_args()
    seed = int(os.environ["CUA_TASK_SEED"])  # env_vars.TASK_SEED: the tasks image carries no env_vars
    with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/state", timeout=10) as r:
        events = json.loads(r.read())["events"]
    REWARD.parent.mkdir(parents=True, exist_ok=True)
    if args.task.startswith("miniwob/"):
        found = verdict(events, args.threshold)
        REWARD_JSON.write_text(json.dumps(found.rewards()) + "\n")
        print(f"{args.task} seed={seed}: reward {found.reward:g}: {found.why} ({len(events)} page events)")
        return
    answer = FINAL_ANSWER.read_text() if FINAL_ANSWER.exists() else None
    value = reward(layout(args.task, seed), events, answer)
    REWARD.write_text(f"{value:g}\n")
    print(f"{args.task} seed={seed}: reward {value:g} ({len(events)} page events)")


if __name__ == "__main__":
    main()
