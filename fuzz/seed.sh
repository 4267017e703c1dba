#!/usr/bin/env bash
# Seeds the corpora with real Apache ZooKeeper files: pass a ZooKeeper dataDir's version-2
# directory (any compat-tests migration run leaves some behind in /tmp/compat-zookeeper-*).
set -euo pipefail
src="${1:?usage: seed.sh <zookeeper version-2 dir>}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$here/corpus/zk_snapshot" "$here/corpus/zk_txnlog"
for f in "$src"/snapshot.*; do [[ -e $f ]] && cp "$f" "$here/corpus/zk_snapshot/"; done
for f in "$src"/log.*; do [[ -e $f ]] && head -c 65536 "$f" > "$here/corpus/zk_txnlog/$(basename "$f")"; done
echo "seeded from $src"
