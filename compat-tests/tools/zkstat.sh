#!/usr/bin/env bash
# zkstat.sh HOST PORT -- one-screen health summary of a ZooKeeper-compatible server.
#
# Reads the four-letter words srvr, stat and mntr from the client port (bash's
# /dev/tcp, no other dependency) and prints "key: value" lines:
#   server, version, mode, zxid (+ epoch/counter), node_count, connections,
#   clients_listed (from stat), outstanding, received, sent,
#   latency_min_ms / latency_avg_ms / latency_max_ms,
#   and a few mntr keys (zk_znode_count, zk_watch_count, zk_ephemerals_count,
#   zk_approximate_data_size, zk_num_alive_connections, zk_global_sessions,
#   zk_open_file_descriptor_count) when the server reports them.
# A word the server refuses (4lw.commands.whitelist) is reported as
#   <word>: refused (not in 4lw.commands.whitelist)
# and the summary goes on with what the other words gave.
#
# Works unchanged against Apache ZooKeeper 3.8 and Warden.
# Exit status: 0 summary printed; 1 no usable srvr reply (down, not serving,
# or unreachable); 2 usage.
# Environment: ZKSTAT_TIMEOUT seconds per word (default 5).
set -u

if [[ $# -ne 2 ]]; then
  echo "usage: $0 HOST PORT" >&2
  exit 2
fi
HOST=$1
PORT=$2
TIMEOUT=${ZKSTAT_TIMEOUT:-5}

# fourlw WORD: print the server's whole reply to WORD (the server closes the
# connection after answering a four-letter word).
fourlw() {
  timeout "$TIMEOUT" bash -c '
    exec 3<>"/dev/tcp/$1/$2" || exit 1
    printf "%s" "$3" >&3
    cat <&3
  ' zkstat "$HOST" "$PORT" "$1" 2>/dev/null
}

refused() { [[ $1 == *"is not executed because it is not in the whitelist"* ]]; }

srvr=$(fourlw srvr)
if [[ -z $srvr ]] || refused "$srvr" || [[ $srvr != *"Mode:"* ]]; then
  echo "server: $HOST:$PORT"
  if [[ -z $srvr ]]; then
    echo "error: no reply to srvr (server down or port unreachable)"
  else
    echo "error: srvr says: $(head -n1 <<<"$srvr")"
  fi
  exit 1
fi

# field NAME: the value of a "NAME: value" line of srvr.
field() { awk -v k="$1: " 'index($0, k) == 1 { print substr($0, length(k) + 1); exit }' <<<"$srvr"; }

echo "server: $HOST:$PORT"
echo "version: $(field 'Zookeeper version')"
echo "mode: $(field Mode)"
zxid=$(field Zxid)
if [[ $zxid =~ ^0x[0-9a-fA-F]+$ ]]; then
  echo "zxid: $zxid (epoch $(( zxid >> 32 )), counter $(( zxid & 0xffffffff )))"
else
  echo "zxid: $zxid"
fi
echo "node_count: $(field 'Node count')"
echo "connections: $(field Connections)"
echo "outstanding: $(field Outstanding)"
echo "received: $(field Received)"
echo "sent: $(field Sent)"
lat=$(field 'Latency min/avg/max')
IFS=/ read -r lat_min lat_avg lat_max <<<"$lat"
echo "latency_min_ms: ${lat_min:-?}"
echo "latency_avg_ms: ${lat_avg:-?}"
echo "latency_max_ms: ${lat_max:-?}"

stat=$(fourlw stat)
if [[ -z $stat ]]; then
  echo "stat: no reply"
elif refused "$stat"; then
  echo "stat: refused (not in 4lw.commands.whitelist)"
else
  # Client lines look like " /127.0.0.1:52062[1](queued=0,recved=6,sent=6)".
  echo "clients_listed: $(grep -c '^ /' <<<"$stat")"
fi

mntr=$(fourlw mntr)
if [[ -z $mntr ]]; then
  echo "mntr: no reply"
elif refused "$mntr"; then
  echo "mntr: refused (not in 4lw.commands.whitelist)"
else
  for key in zk_znode_count zk_watch_count zk_ephemerals_count zk_approximate_data_size \
             zk_num_alive_connections zk_global_sessions zk_open_file_descriptor_count; do
    value=$(awk -F'\t' -v k="$key" '$1 == k { print $2; exit }' <<<"$mntr")
    [[ -n $value ]] && echo "$key: $value"
  done
fi
exit 0
