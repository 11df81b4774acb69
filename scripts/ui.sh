#!/usr/bin/env bash
# `make ui`: the Airflow UI over what `make demo` did, on 127.0.0.1.
#
# Runs, as child processes of this script (Ctrl-C stops them all):
#   airflow api-server     the UI, the REST API and the Governance view (plugin), on 127.0.0.1:$AIP_UI_PORT
#   airflow scheduler      so the home page's health shows a live scheduler (the demo's DAGs stay paused);
#                          its task-log server on $AIP_UI_PORT+1, as many LocalExecutor workers as cores
#   airflow dag-processor  parses example_dags/ (DAG pages, code view)
#   airflow triggerer      runs deferred tasks and asset watchers of unpaused DAGs; its log server on $AIP_UI_PORT+2
# One setting moves every server: AIP_UI_PORT (default 8080) and the two ports after it; a busy port is
# refused before anything starts. Stopping (Ctrl-C, SIGTERM) stops every process this script started,
# their children included (its process tree, and every process marked by AIP_UI_SESSION in its
# environment, which finds the workers a dead parent left behind; both through /proc), and
# leaves no file beside the demo catalog (a read leaves SQLite's -wal/-shm files, removed at the end).
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
CATALOG_DB="$AIP_WORK/lake/catalog.db"
mkdir -p "$RUN_DIR" "$AIRFLOW_HOME"

# every server on a port derived from AIP_UI_PORT, each checked free before anything starts
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=$((PORT + 1))
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=$((PORT + 2))
if ! python - "$HOST" "$PORT" "$((PORT + 1))" "$((PORT + 2))" <<'EOF'
import socket, sys
host, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
busy = []
for port in ports:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            busy.append(port)
if busy:
    print(f"[ui] port(s) {busy} on {host} are in use: `make ui` needs AIP_UI_PORT ({ports[0]}) and the two ports "
          f"after it (the scheduler's and the triggerer's log servers); set AIP_UI_PORT to a free range, "
          f"e.g. AIP_UI_PORT=18080 make ui. Nothing was started.", file=sys.stderr)
    sys.exit(1)
EOF
then
  exit 1
fi
# the worker count fits the machine: LocalExecutor starts `parallelism` workers, the API server `workers`
CORES="$(nproc 2>/dev/null || echo 2)"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-$CORES}"
export AIRFLOW__API__WORKERS="${AIRFLOW__API__WORKERS:-1}"
# every process of this UI, and their children, carry this mark: stop() finds them all through /proc
AIP_UI_SESSION="${AIP_UI_SESSION:-$(python -c 'import secrets; print(secrets.token_hex(8))')}"
export AIP_UI_SESSION
CATALOG_SIDE_FILES=()
for suffix in -wal -shm; do [ -e "$CATALOG_DB$suffix" ] || CATALOG_SIDE_FILES+=("$CATALOG_DB$suffix"); done

if [ ! -f "$CATALOG_DB" ]; then
  echo "[ui] no demo catalog at $CATALOG_DB: run \`make demo\` first (the Governance view will say the catalog cannot be read)."
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
  echo
  echo "[ui] stopping the API server, scheduler, DAG processor, triggerer and their workers"
  # SIGTERM to every process of this session, SIGKILL to what is left after 30 s (LocalExecutor workers
  # ignore SIGTERM); the scan runs without the mark, so it never finds itself
  env -u AIP_UI_SESSION python - "$AIP_UI_SESSION" "$$" <<'EOF' || true
import os, signal, sys, time
mark, me = f"AIP_UI_SESSION={sys.argv[1]}".encode(), int(sys.argv[2])
def session() -> list[int]:
    """Processes marked in their environment, and every descendant of this script (a process that
    rewrites its title, as the API server does, can overwrite its environment block)."""
    marked, parent = set(), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, os.getpid()):
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                parent[int(entry)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if mark in fh.read().split(b"\0"):
                    marked.add(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    tree, grew = {me}, True
    while grew:
        children = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= children
        grew = bool(children)
    return sorted((marked | tree) - {me, os.getpid()})
for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
    for pid in session():
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while session() and time.monotonic() < deadline:
        time.sleep(0.5)
left = session()
if left:
    print(f"[ui] processes still running: {left}", file=sys.stderr)
EOF
  # a read-only reader of a WAL-mode catalog leaves -wal/-shm beside it: the last read-write close removes them
  if [ "${#CATALOG_SIDE_FILES[@]}" -gt 0 ] && [ -f "$CATALOG_DB" ]; then
    python - "$CATALOG_DB" <<'EOF' || true
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], timeout=10)
connection.execute("SELECT count(*) FROM sqlite_master").fetchall()
connection.close()
EOF
    for file in "${CATALOG_SIDE_FILES[@]}"; do
      if [ -e "$file" ] && [ ! -s "$CATALOG_DB-wal" ]; then rm -f "$file"; fi
    done
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
