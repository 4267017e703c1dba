#!/usr/bin/env bash
# Usage: compat-tests/curator/run_ensemble.sh HP1,HP2,HP3 TESTNAME
#        compat-tests/curator/run_ensemble.sh list
# Like run.sh, but runs warden.compat.EnsembleCompat: Curator clients each pinned to a
# different member of an ensemble (client i connects to HP(i) only).
# (run.sh HOSTPORT TEST itself accepts a comma-separated connect string too: it is
# handed to Curator's connectString unchanged, and each client then picks a member at random.)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$HERE/build.sh"
JARS=/usr/share/java
CP="$HERE/build/classes:$JARS/curator-recipes.jar:$JARS/curator-framework.jar:$JARS/curator-client.jar:$JARS/zookeeper.jar:$JARS/zookeeper-jute.jar:$JARS/guava.jar:$JARS/slf4j-api.jar:$JARS/slf4j-simple.jar"
LOG="${CURATOR_COMPAT_LOG:-error}"
exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Dorg.slf4j.simpleLogger.defaultLogLevel="$LOG" \
  -cp "$CP" warden.compat.EnsembleCompat "$@"
