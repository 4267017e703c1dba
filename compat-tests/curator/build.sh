#!/usr/bin/env bash
# Compile the Curator compatibility programs against Debian's jars.
# Output: compat-tests/curator/build/classes (gitignored). Rebuilds only when a
# source file (or this script) changes; safe to call concurrently (flock).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$HERE/src"
OUT="$HERE/build"
JARS=/usr/share/java
CP="$JARS/curator-recipes.jar:$JARS/curator-framework.jar:$JARS/curator-client.jar:$JARS/zookeeper.jar:$JARS/zookeeper-jute.jar:$JARS/guava.jar:$JARS/slf4j-api.jar"

for j in curator-recipes curator-framework curator-client zookeeper zookeeper-jute guava slf4j-api; do
  if [ ! -f "$JARS/$j.jar" ]; then
    echo "build.sh: missing $JARS/$j.jar (install zookeeper libcurator-*-java libguava-java libslf4j-java)" >&2
    exit 1
  fi
done
command -v javac >/dev/null || { echo "build.sh: javac not found" >&2; exit 1; }

mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9

STAMP="$( (cd "$SRC" && find . -name '*.java' -type f | LC_ALL=C sort | xargs sha256sum; sha256sum "$HERE/build.sh") | sha256sum | cut -d' ' -f1)"
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$STAMP" ] && [ -d "$OUT/classes" ]; then
  exit 0
fi
echo "build.sh: compiling Curator compat tests" >&2
rm -rf "$OUT/classes.tmp"
mkdir -p "$OUT/classes.tmp"
find "$SRC" -name '*.java' -type f > "$OUT/sources.txt"
javac -nowarn -encoding UTF-8 --release 11 -cp "$CP" -d "$OUT/classes.tmp" @"$OUT/sources.txt"
rm -rf "$OUT/classes"
mv "$OUT/classes.tmp" "$OUT/classes"
echo "$STAMP" > "$OUT/stamp"
