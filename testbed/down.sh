#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# Stop everything testbed/up.sh started (each daemon by its pid file), delete the pods' namespaces and the bridge.
# Safe to run twice, and safe when nothing was ever started. Keys and job state are kept (see README).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || tb_die "down.sh must run as root"

# Best effort: cancel queued/running jobs so no job steps outlive their daemons (bounded by timeout).
if tb_alive /run/slurmctld.pid; then
  timeout 10 scancel --quiet --user=root >/dev/null 2>&1 || true
  for u in $(timeout 5 squeue -h -o '%u' 2>/dev/null | sort -u); do timeout 5 scancel --quiet --user="$u" || true; done
fi
if tb_alive /var/spool/gridengine/qmaster/qmaster.pid; then
  timeout 10 /usr/bin/qdel -f -u '*' >/dev/null 2>&1 || true
fi

# Grid Engine: execd first, then ask qmaster for a controlled shutdown (takes ~9 s; it finishes while we stop
# the rest; waited for at the end). The init scripts' stop does not find qmaster's pid file.
for pf in /var/spool/gridengine/execd/*/execd.pid; do tb_kill "$pf"; done
if tb_alive /var/spool/gridengine/qmaster/qmaster.pid; then
  timeout 5 /usr/bin/qconf -km >/dev/null 2>&1 || true
fi

# Slurm: slurmd per pod, controller, accounting.
for pf in /run/slurmd-*.pid; do tb_kill "$pf"; done
tb_kill /run/slurmctld.pid
tb_kill /run/slurmdbd.pid
tb_kill /run/mysqld/mysqld.pid

# ssh daemons and the pods' pause processes.
for pf in "$TB_RUN"/*.sshd.pid "$TB_RUN"/*.pause.pid; do tb_kill "$pf"; done

for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^pod[0-9]+$/ {print $1}'); do ip netns del "$ns" 2>/dev/null || true; done
for v in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^veth-pod[0-9]+@/ {sub(/@.*/, "", $2); print $2}'); do
  ip link del "$v" 2>/dev/null || true
done
ip link del "$TB_BRIDGE" 2>/dev/null || true

tb_kill /var/spool/gridengine/qmaster/qmaster.pid 20   # SIGKILL only as a last resort (BerkeleyDB spool)
tb_kill /run/munge/munged.pid
rm -f /run/slurmctld.pid /run/slurmdbd.pid /run/slurmd-*.pid   # stale ones break `apt-get purge slurmctld`
rm -f "$TB_DIR/pods"
tb_say "testbed down"
rm -f /etc/profile.d/hpc-testbed-login.sh
