#!/usr/bin/env bash
# `make ui`: the Airflow UI over what `make demo` did, on 127.0.0.1.
#
# Runs, as child processes of this script (Ctrl-C stops them all):
#   airflow api-server     the UI, the REST API and the Governance view (plugin), on 127.0.0.1:$AIP_UI_PORT
#   airflow scheduler      so the home page's health shows a live scheduler (the demo's DAGs stay paused)
#   airflow dag-processor  parses example_dags/ (DAG pages, code view)
#   airflow triggerer      runs deferred tasks and asset watchers of unpaused DAGs
# over the demo's Airflow home (AIRFLOW_HOME, default .work/airflow: run history, notes, XCom, task logs)
# and the demo's catalog (AIP_WORK, default .work/demo: the SQLite catalog and warehouse under lake/).
# Logins (SimpleAuthManager; AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS overrides them): `admin` sees
# everything; `auditor` (role op: reads connections and every DAG) sees table health, audits and the
# timeline but not erasure requests, evidence or approvals. Airflow's `viewer` role reads no connection,
# so the Governance view has nothing to show it. Passwords are generated once per user and kept in
# $AIRFLOW_HOME/ui-passwords.json (0600); they are printed at start.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIP_WORK="${AIP_WORK:-$ROOT/.work/demo}"
# shellcheck source=env.sh
source "$ROOT/scripts/env.sh"
PORT="${AIP_UI_PORT:-8080}"
HOST=127.0.0.1
URL="http://$HOST:$PORT"
PW_FILE="$AIRFLOW_HOME/ui-passwords.json"
RUN_DIR="$AIP_WORK/ui"
mkdir -p "$RUN_DIR" "$AIRFLOW_HOME"

if [ ! -f "$AIP_WORK/lake/catalog.db" ]; then
  echo "[ui] no demo catalog at $AIP_WORK/lake/catalog.db: run \`make demo\` first (the Governance view will say the catalog cannot be read)."
fi
if [ ! -f "$AIRFLOW_HOME/airflow.db" ]; then
  echo "[ui] migrating a new Airflow metadata DB in $AIRFLOW_HOME"
  airflow db migrate >"$RUN_DIR/db-migrate.log" 2>&1
fi
export AIRFLOW__CORE__AUTH_MANAGER="${AIRFLOW__CORE__AUTH_MANAGER:-airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin,auditor:op}"
# one password per user, generated once (a user added later gets one on the next start)
(umask 077 && python - "$PW_FILE" "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS" <<'EOF'
import json, os, secrets, sys
path, users = sys.argv[1], [u.split(":")[0] for u in sys.argv[2].split(",") if u]
known = json.load(open(path)) if os.path.exists(path) else {}
if set(users) - set(known):
    known.update({u: secrets.token_urlsafe(12) for u in users if u not in known})
    json.dump(known, open(path, "w"))
EOF
)
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$PW_FILE"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=False
export AIRFLOW__API__BASE_URL="$URL"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="$URL/execution/"
# one signing secret for every process of this UI (tasks started by the scheduler call the API server)
export AIRFLOW__API_AUTH__JWT_SECRET="${AIRFLOW__API_AUTH__JWT_SECRET:-$(python -c 'import secrets; print(secrets.token_hex(32))')}"
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=False

PIDS=()
STOPPING=0
stop() {
  STOPPING=1
  trap - INT TERM EXIT
  if [ "${#PIDS[@]}" -gt 0 ]; then
    echo
    echo "[ui] stopping: ${PIDS[*]}"
    kill "${PIDS[@]}" 2>/dev/null || true
    for _ in $(seq 1 30); do
      alive=0
      for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      [ "$alive" = 0 ] && break
      sleep 1
    done
    kill -9 "${PIDS[@]}" 2>/dev/null || true
  fi
}
trap stop INT TERM EXIT

start() {
  local name="$1"
  shift
  airflow "$name" "$@" >"$RUN_DIR/$name.log" 2>&1 &
  PIDS+=("$!")
}
start api-server --host "$HOST" --port "$PORT"
start scheduler
start dag-processor
start triggerer

for _ in $(seq 1 180); do
  if python -c "import urllib.request,sys; urllib.request.urlopen('$URL/api/v2/monitor/health', timeout=2)" 2>/dev/null; then
    break
  fi
  for pid in "${PIDS[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "[ui] a process stopped early; logs in $RUN_DIR:" >&2
      tail -n 20 "$RUN_DIR"/*.log >&2
      exit 1
    fi
  done
  sleep 1
done

python - "$PW_FILE" "$URL" "$AIRFLOW_HOME" "$AIP_WORK" "$RUN_DIR" "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS" <<'EOF'
import json, sys
pw, url, home, work, logs, configured = sys.argv[1:]
users = json.load(open(pw))
sees = {
    "admin": "everything, erasure and evidence included",
    "op": "table health, audits, timeline of the DAGs it may read; erasure refused",
    "user": "nothing: Airflow's user role reads no connection",
    "viewer": "nothing: Airflow's viewer role reads no connection",
}
lines = []
for entry in configured.split(","):
    name, _, role = entry.partition(":")
    role = role.split(":")[0].lower()
    lines.append(f"  login {name:<8}/ {users[name]}   ({role}: {sees.get(role, 'as the auth manager grants')})")
logins = "\n".join(lines)
print(f"""
Airflow UI (the demo's runs, notes, task logs, extra links): {url}
Governance view:                                             {url}/plugin/iceberg-governance
{logins}
AIRFLOW_HOME {home} · catalog {work}/lake · process logs {logs}
Ctrl-C stops the API server, scheduler, DAG processor and triggerer.""", flush=True)
EOF
wait -n "${PIDS[@]}" || true
if [ "$STOPPING" = 0 ]; then
  echo "[ui] a process stopped; logs in $RUN_DIR" >&2
fi
