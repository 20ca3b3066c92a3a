#!/bin/bash
# The episode's setup inside its container (what environment/start.sh does on the local desktop): the X
# server at CUA_DESKTOP_SIZE on display :1 (computer-1 reuses it), then task CUA_TASK's pages for seed
# CUA_TASK_SEED on the container's own loopback (polled on /state: a MiniWoB++ page counts loads of /);
# /run/cua-ready marks it healthy. A failure exits, and `compose up --wait` reports it at once.
set -u
die() { echo "cua-entrypoint: $*" >&2; exit 1; }
rm -f /run/cua-ready
mkdir -p -m 1777 /tmp/.X11-unix
if [ -n "${CUA_DESKTOP_SIZE:-}" ]; then
  setsid nohup Xvfb :1 -screen 0 "${CUA_DESKTOP_SIZE}x24" -fbdir /var/tmp >/tmp/xvfb.log 2>&1 </dev/null &
  up=
  for _ in $(seq 400); do DISPLAY=:1 xdotool getdisplaygeometry >/dev/null 2>&1 && { up=1; break; }; sleep 0.05; done
  [ -n "$up" ] || die "Xvfb did not start: $(tail -c 500 /tmp/xvfb.log)"
fi
if [ -n "${CUA_TASK:-}" ]; then
  # a MiniWoB++ task names the version it was exported from: the server refuses another one
  setsid nohup python3 -m cua_stream.tasks.server --task "$CUA_TASK" --seed "${CUA_TASK_SEED:-0}" --port 8000 \
      ${CUA_MINIWOB_VERSION:+--miniwob-version "$CUA_MINIWOB_VERSION"} >/tmp/task-server.log 2>&1 </dev/null &
  server=$!
  up=
  for _ in $(seq 100); do
    curl -sf -o /dev/null http://127.0.0.1:8000/state && { up=1; break; }
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$up" ] || die "the task server did not start: $(tail -c 500 /tmp/task-server.log)"
fi
touch /run/cua-ready
exec "$@"
