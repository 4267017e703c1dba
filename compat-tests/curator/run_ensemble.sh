#!/usr/bin/env bash
# Usage: compat-tests/curator/run_ensemble.sh HP1,HP2,HP3 TESTNAME
#        compat-tests/curator/run_ensemble.sh list
# Like run.sh, but runs warden.compat.EnsembleCompat: Curator clients each pinned to a
# different member of an ensemble (client i connects to HP(i) only).
# (run.sh HOSTPORT TEST itself accepts a comma-separated connect string too: it is
# handed to Curator's connectString unchanged, and each client then picks a member at random.)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CURATOR_COMPAT_MAIN=warden.compat.EnsembleCompat exec "$HERE/run.sh" "$@"
