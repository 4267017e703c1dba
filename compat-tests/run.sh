#!/usr/bin/env bash
# Run the black-box compatibility suite.
#
#   COMPAT_SERVER=zookeeper compat-tests/run.sh     # prove the suite against Apache ZooKeeper 3.8
#   compat-tests/run.sh                             # judge Warden (WARDEN_BIN, default target/debug/warden)
#   compat-tests/run.sh -k zkcli -x                 # extra arguments go to pytest
#
# Installs missing dependencies first (install.sh is idempotent; skip it with
# COMPAT_SKIP_INSTALL=1). Exits non-zero when any test fails.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

if [[ "${COMPAT_SKIP_INSTALL:-0}" != 1 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    bash "$HERE/install.sh"
  else
    echo "run.sh: not root; skipping install.sh (run it as root once)" >&2
  fi
fi

export COMPAT_SERVER="${COMPAT_SERVER:-warden}"
export WARDEN_BIN="${WARDEN_BIN:-$REPO/target/debug/warden}"
if [[ "$COMPAT_SERVER" == warden && ! -x "$WARDEN_BIN" ]]; then
  echo "run.sh: WARDEN_BIN=$WARDEN_BIN is not an executable; build Warden first or set COMPAT_SERVER=zookeeper" >&2
  exit 2
fi
if [[ "$COMPAT_SERVER" == warden ]]; then
  echo "run.sh: testing Warden at $WARDEN_BIN"
else
  echo "run.sh: testing COMPAT_SERVER=$COMPAT_SERVER"
fi

cd "$REPO"
start=$(date +%s)
set +e
"${PYTHON:-python3}" -m pytest compat-tests -v --timeout="${COMPAT_TEST_TIMEOUT:-180}" "$@"
rc=$?
set -e
echo "run.sh: pytest exit $rc after $(( $(date +%s) - start ))s against $COMPAT_SERVER"
exit $rc
