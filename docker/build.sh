#!/usr/bin/env bash
# Prepare docker/build/: the FROM-scratch build context and the per-node config dirs
# for docker-compose.yml. No image is pulled: both images are FROM scratch.
#
#   docker/build.sh                 # uses target/release/warden (build it first)
#   WARDEN_BIN=path docker/build.sh # another binary (a musl static one needs no libraries)
#   docker/build.sh --clean         # also wipe the nodes' data dirs (a fresh ensemble)
#   WARDEN_BUILD_DIR=dir docker/build.sh   # write everything to dir instead of docker/build
#                                   # (docker-compose.yml reads the same variable)
#
# Output (in docker/build/ or $WARDEN_BUILD_DIR):
#   build/rootfs-warden/      the binary + every shared library `ldd` lists, at the same paths
#   build/rootfs-prometheus/  Debian's /usr/bin/prometheus + its libraries, an empty /prometheus
#   build/nodes/warden{1,2,3}/zoo.cfg and data/myid    (mounted at /conf in each container)
#   build/prometheus.yml      scrape config for warden1..3:7000
#   build/Dockerfile          a copy of docker/Dockerfile, so the directory is a complete context
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
OUT="${WARDEN_BUILD_DIR:-$HERE/build}"
BIN="${WARDEN_BIN:-$REPO/target/release/warden}"
PROM="${PROMETHEUS_BIN:-/usr/bin/prometheus}"
N=3

[ -x "$BIN" ] || { echo "build.sh: $BIN missing: cargo build --release" >&2; exit 1; }
if [ "${1:-}" = "--clean" ]; then rm -rf "$OUT"; fi
rm -rf "$OUT/rootfs-warden" "$OUT/rootfs-prometheus"
mkdir -p "$OUT"

# copy_with_libs BINARY DEST_ROOT DEST_PATH: the binary and what its ELF interpreter loads.
copy_with_libs() {
  local bin="$1" root="$2" dest="$3"
  install -D -m 0755 "$bin" "$root$dest"
  if ldd "$bin" >/dev/null 2>&1; then
    # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
    ldd "$bin" | awk '/=>/ { if ($3 ~ /^\//) print $3; next } $1 ~ /^\// { print $1 }' |
      while read -r lib; do
        install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
      done
  fi # else: statically linked (e.g. x86_64-unknown-linux-musl), nothing to add
}

copy_with_libs "$BIN" "$OUT/rootfs-warden" /usr/local/bin/warden
mkdir -p "$OUT/rootfs-warden/tmp" "$OUT/rootfs-warden/conf"
if [ -x "$PROM" ]; then
  copy_with_libs "$PROM" "$OUT/rootfs-prometheus" /usr/bin/prometheus
  mkdir -p "$OUT/rootfs-prometheus/prometheus" "$OUT/rootfs-prometheus/etc/prometheus" "$OUT/rootfs-prometheus/tmp"
else
  echo "build.sh: $PROM missing (apt-get install prometheus); the prometheus image cannot be built" >&2
fi

cp "$HERE/Dockerfile" "$OUT/Dockerfile"

# One zoo.cfg per node, identical on every node: in containers every node has the same
# ports on its own address, so only data/myid differs. Peer (Raft) traffic uses the names
# peer1..3, which docker-compose.yml gives the nodes on the `peers` network only; clients,
# the admin server and Prometheus use the default network. So `docker network disconnect
# <project>_peers <container>` partitions a node from the others while its clients still
# reach it (and see it stop serving), as in a real network partition between servers.
for i in $(seq 1 $N); do
  d="$OUT/nodes/warden$i"
  mkdir -p "$d/data"
  {
    echo "tickTime=2000"
    echo "initLimit=10"
    echo "syncLimit=5"
    echo "dataDir=/conf/data"
    echo "clientPort=2181"
    echo "clientPortAddress=0.0.0.0"
    echo "maxClientCnxns=0"
    echo "4lw.commands.whitelist=*"
    echo "admin.enableServer=true"
    echo "admin.serverAddress=0.0.0.0"
    echo "admin.serverPort=8080"
    echo "metricsProvider.className=org.apache.zookeeper.metrics.prometheus.PrometheusMetricsProvider"
    echo "metricsProvider.httpHost=0.0.0.0"
    echo "metricsProvider.httpPort=7000"
    for j in $(seq 1 $N); do echo "server.$j=peer$j:2888:3888"; done
  } > "$d/zoo.cfg"
  echo "$i" > "$d/data/myid"
done

cat > "$OUT/prometheus.yml" <<YML
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files: [/etc/prometheus/alerts.yml]
scrape_configs:
  - job_name: warden
    static_configs:
      - targets: [$(for i in $(seq 1 $N); do printf "'warden%s:7000'" "$i"; [ "$i" -lt $N ] && printf ", "; done)]
YML
echo "build.sh: context ready in $OUT ($(du -sh "$OUT/rootfs-warden" | cut -f1) warden rootfs)"
find "$OUT/rootfs-warden" "$OUT/rootfs-prometheus" -type f | sed "s|$OUT/||"
