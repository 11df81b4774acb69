#!/usr/bin/env bash
# Run the example DAGs end to end on the embedded default (local Spark, SQLite catalog,
# warehouse under .work/lake) and print what happened to the tables.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
export AIP_WORK="${AIP_WORK:-$ROOT/.work/demo}"
# A fresh lake each time, so the demo shows the same story on every run.
rm -rf "$AIP_WORK/lake"
mkdir -p "$AIP_WORK"
source "$ROOT/scripts/env.sh"
cd "$ROOT"
exec python scripts/demo.py "$@"
