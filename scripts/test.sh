#!/usr/bin/env bash
# Run the whole test suite (all tiers, Spark included) after bootstrapping.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not spark"`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/bootstrap.sh"
export AIP_WORK="${AIP_WORK:-$ROOT/.work/test}"
mkdir -p "$AIP_WORK"
source "$ROOT/scripts/env.sh"
cd "$ROOT"
set +e
python -m pytest "$@"
rc=$?
set -e
# pytest exit code 5 = no tests collected: that must not pass silently.
if [ "$rc" -eq 5 ]; then
  echo "ERROR: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
