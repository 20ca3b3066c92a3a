#!/bin/bash
# Writes server.properties from the KAFKA_* environment, formats the log directory once (KRaft, the
# static quorum of KAFKA_CONTROLLER_QUORUM_VOTERS) and runs the broker in the foreground.
# SCRAM_USERS_FILE (optional) names a file of `--add-scram` values, one a line: the SCRAM users that
# formatting creates (in KRaft the first users can only be made then; `cua-stream containers
# secure-env` writes it, salted passwords only).
set -euo pipefail
conf=/opt/kafka/config/server.properties
logs=/opt/kafka/logs
mkdir -p "$logs"
: > "$logs/server.log"  # kafka-ready looks for this start's line only
: > "$conf"
while IFS= read -r -d '' pair; do
  name=${pair%%=*}
  value=${pair#*=}
  case "$name" in
    KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_OPTS) continue ;;
    KAFKA_*) ;;
    *) continue ;;
  esac
  key=${name#KAFKA_}
  key=${key,,}
  key=${key//___/-}
  key=${key//__/%}
  key=${key//_/.}
  key=${key//%/_}
  printf '%s=%s\n' "$key" "$value" >> "$conf"
done < <(env -0)
grep -q '^log.dirs=' "$conf" || echo "log.dirs=/var/lib/kafka/data" >> "$conf"
java_cmd=(java ${KAFKA_HEAP_OPTS} -XX:+UseG1GC -Djava.awt.headless=true
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -Dkafka.logs.dir="$logs"
  -cp '/opt/kafka/libs/*')
scram=()
if [ -n "${SCRAM_USERS_FILE:-}" ]; then
  while IFS= read -r user; do
    [ -n "$user" ] && scram+=(--add-scram "$user")
  done < "$SCRAM_USERS_FILE"
fi
"${java_cmd[@]}" kafka.tools.StorageTool format --ignore-formatted \
  "--cluster-id=${CLUSTER_ID:-fl66feNvTk-DLsXNSnKybQ}" -c "$conf" "${scram[@]}"
exec "${java_cmd[@]}" kafka.Kafka "$conf"
