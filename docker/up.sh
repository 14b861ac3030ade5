#!/usr/bin/env bash
# Starts the deployment with podman-compose in the order its health checks allow, and returns once
# every long-running part reports healthy. `docker compose up -d --wait` does this by itself;
# podman before 4.6 ignores `depends_on: condition: service_healthy` and runs health checks only
# from systemd timers, so here each layer's checks are run (`podman healthcheck run`) until they
# pass before the next layer starts:
#   1. the databases and the Kafka brokers   2. Connect and Airflow's metadata migration
#   3. Airflow's api-server                   4. the scheduler, dag-processor and triggerer
# Arguments are podman-compose's own (-p, -f): docker/up.sh -f docker-compose.yml -f trial-databases.yml
# UP_TIMEOUT (seconds per layer, default 300).
set -euo pipefail
cd "$(dirname "$0")"
compose=(podman-compose "$@")
[[ $# -gt 0 ]] || compose+=(-f docker-compose.yml)
mapfile -t all < <("${compose[@]}" config --services 2>/dev/null)

container_of() {   # the container podman-compose made for service $1
  "${compose[@]}" ps --format '{{.Names}} {{index .Labels "com.docker.compose.service"}}' 2>/dev/null |
    awk -v s="$1" '$2 == s {print $1; exit}'
}

wait_healthy() {   # run the health checks of the services given until every one passes
  local deadline=$((SECONDS + ${UP_TIMEOUT:-300})) pending=("$@")
  while ((${#pending[@]})); do
    local still=()
    for svc in "${pending[@]}"; do
      name=$(container_of "$svc")
      if [[ -z "$name" ]] || ! podman healthcheck run "$name" >/dev/null 2>&1; then still+=("$svc"); fi
    done
    pending=("${still[@]}")
    ((${#pending[@]})) || break
    if ((SECONDS > deadline)); then
      echo "up.sh: not healthy after ${UP_TIMEOUT:-300} s: ${pending[*]}; their last log lines:" >&2
      for svc in "${pending[@]}"; do
        name=$(container_of "$svc"); [[ -n "$name" ]] && podman logs --tail 20 "$name" >&2 || true
      done
      exit 1
    fi
    sleep 3
  done
}

# what podman-compose says goes to a log shown when it fails (into a file, not a pipe: the containers'
# monitors inherit it and would hold a pipe open); podman without systemd says at every start that
# it cannot make health check timers, which is why this script runs the checks itself
log="$(mktemp -t tideline-up.XXXXXX)"
trap 'rm -f "$log"' EXIT
start() { "${compose[@]}" up -d --no-deps "$@" >>"$log" 2>&1 || { grep -v "systemd connection" "$log" >&2; exit 1; }; }

layer1=()
for svc in "${all[@]}"; do   # with the databases an override file adds (trial-databases.yml: source, warehouse)
  case "$svc" in connect|airflow-*|tideline) ;; *) layer1+=("$svc");; esac
done
echo "up.sh: starting ${layer1[*]}"
start "${layer1[@]}"
wait_healthy "${layer1[@]}"

echo "up.sh: starting connect, migrating Airflow's metadata database"
start connect airflow-init
init=$(container_of airflow-init)
status=$(podman wait "$init")
if [[ "$status" != 0 ]]; then
  echo "up.sh: airflow-init (db migrate) exited $status:" >&2; podman logs --tail 30 "$init" >&2; exit 1
fi
wait_healthy connect

echo "up.sh: starting airflow-api-server"
start airflow-api-server
wait_healthy airflow-api-server

echo "up.sh: starting airflow-scheduler, airflow-dag-processor, airflow-triggerer"
start airflow-scheduler airflow-dag-processor airflow-triggerer
wait_healthy airflow-scheduler airflow-dag-processor airflow-triggerer
echo "up.sh: every part healthy"
