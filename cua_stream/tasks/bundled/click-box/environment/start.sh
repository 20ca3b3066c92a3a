#!/bin/bash
# Run by the local desktop inside the episode's namespace before the agent starts: serve the
# seed's pages on the episode's own loopback, and return once they answer.
set -eu
"${CUA_PYTHON:-python3}" -m cua_stream.tasks.server --task click-box --seed "$CUA_TASK_SEED" --port 8000 \
    >/tmp/task-server.log 2>&1 &
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.1; done
echo "the task server did not start" >&2; cat /tmp/task-server.log >&2; exit 1
