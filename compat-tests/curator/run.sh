#!/usr/bin/env bash
# Usage: compat-tests/curator/run.sh HOSTPORT TESTNAME
#        compat-tests/curator/run.sh list
# Builds if needed, then runs one Curator compatibility test. Exit 0 on success;
# prints each check it made ("ok: ...") and a final PASS/FAIL line.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$HERE/build.sh"
JARS=/usr/share/java
CP="$HERE/build/classes:$JARS/curator-recipes.jar:$JARS/curator-framework.jar:$JARS/curator-client.jar:$JARS/zookeeper.jar:$JARS/zookeeper-jute.jar:$JARS/guava.jar:$JARS/slf4j-api.jar:$JARS/slf4j-simple.jar"
# The Netty client socket (TLS: -Dzookeeper.clientCnxnSocket=...ClientCnxnSocketNetty) needs
# Netty jars that Debian's zookeeper.jar manifest does not list; add them when present.
for j in netty-codec netty-resolver netty-transport-native-unix-common; do
  if [ -f "$JARS/$j.jar" ]; then CP="$CP:$JARS/$j.jar"; fi
done
# slf4j-simple logs to stderr; keep only errors unless CURATOR_COMPAT_LOG is set (e.g. info).
LOG="${CURATOR_COMPAT_LOG:-error}"
# Extra JVM flags, split on whitespace (e.g. the -Dzookeeper.client.secure=true and
# -Dzookeeper.ssl.* properties test_tls.py passes); empty by default.
read -r -a EXTRA <<< "${CURATOR_JVMFLAGS:-}"
exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
  -Dorg.slf4j.simpleLogger.defaultLogLevel="$LOG" ${EXTRA[@]+"${EXTRA[@]}"} \
  -cp "$CP" "${CURATOR_COMPAT_MAIN:-warden.compat.CuratorCompat}" "$@"
