"""The bundled tasks' verifier, run inside the episode by ``tests/test.sh``: reads what the page reported
from the task's server and the agent's final answer, and writes Harbor's ``/logs/verifier/reward.txt``."""

from __future__ import annotations

import argparse
import json
import os
import urllib.request
from pathlib import Path

from cua_stream.tasks.pages import layout
from cua_stream.tasks.verdict import reward

FINAL_ANSWER = Path("/logs/agent/final_answer.txt")
REWARD = Path("/logs/verifier/reward.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", required=True)
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    seed = int(os.environ["CUA_TASK_SEED"])
    with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/state", timeout=10) as r:
        events = json.loads(r.read())["events"]
    answer = FINAL_ANSWER.read_text() if FINAL_ANSWER.exists() else None
    value = reward(layout(args.task, seed), events, answer)
    REWARD.parent.mkdir(parents=True, exist_ok=True)
    REWARD.write_text(f"{value:g}\n")
    print(f"{args.task} seed={seed}: reward {value:g} ({len(events)} page events)")


if __name__ == "__main__":
    main()
