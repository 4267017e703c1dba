#!/usr/bin/env bash
# Measures Warden failover: a 3-node ensemble on 127.0.0.1; RUNS times: find the leader,
# kill -9 it, time (warden-bench --workload probe) until a create succeeds through a
# survivor, restart the victim. HB/ET set raft.heartbeatMs/raft.electionTimeoutMs.
# usage: failover.sh RUNS -> median first-write after kill -9 of the leader (3-node Warden ensemble)
B=/work/main/target/release
D=/tmp/lead-ens; rm -rf $D
for i in 1 2 3; do mkdir -p $D/$i; echo $i > $D/$i/myid; cat > $D/$i/zoo.cfg <<EOF
tickTime=2000
dataDir=$D/$i
clientPort=2239$i
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
raft.heartbeatMs=${HB:-100}
raft.electionTimeoutMs=${ET:-300}
server.1=127.0.0.1:22481:3888
server.2=127.0.0.1:22482:3888
server.3=127.0.0.1:22483:3888
EOF
done
declare -A PIDS
start() { $B/warden --config $D/$1/zoo.cfg > $D/$1/log 2>&1 & PIDS[$1]=$!; }
for i in 1 2 3; do start $i; done
mode() { python3 -c "
import socket,sys
try:
  s=socket.create_connection(('127.0.0.1',2239$1),timeout=1);s.send(b'srvr');print(s.recv(1000).decode())
except Exception: pass" | grep -o "Mode: [a-z]*"; }
for run in $(seq 1 $1); do
  sleep 3; L=""
  for i in 1 2 3; do [ "$(mode $i)" = "Mode: leader" ] && L=$i; done
  others=""; for i in 1 2 3; do [ "$i" != "$L" ] && others="$others,127.0.0.1:2239$i"; done
  kill -9 ${PIDS[$L]}
  $B/warden-bench --workload probe --servers ${others#,} --duration 20 --json
  start $L
done
sleep 1; for i in 1 2 3; do kill ${PIDS[$i]} 2>/dev/null; done
