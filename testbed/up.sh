#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# Start the hpc-launch testbed (idempotent; a no-op if everything is already up). Needs install.sh first.
#
#   munged                       root namespace
#   pod1..podN                   network namespaces on bridge br-hpctb (10.200.0.1 = host side, podI = 10.200.0.(10+I)),
#                                each with its own UTS hostname, a "pause" process holding the namespaces, an sshd
#                                on :22 and a slurmd (NodeName=podI); pods 1..HPC_TESTBED_PODS (3) are the tests'
#                                partitions' (debug, short, preempt, urgent), the HPC_TESTBED_SIDE_PODS (2) after
#                                them partition `side` alone
#   slurmctld (+ slurmdbd/MariaDB when HPC_TESTBED_ACCT=1)   root namespace, listening on 10.200.0.1:6817
#   sge_qmaster + sge_execd      root namespace, exec host = $(hostname), queue all.q, PEs smp/mpi
#   login sshd                   127.0.0.1:2222 (qsub = Slurm PBS wrapper) and :2223 (qsub = Grid Engine)
#
# Fails loudly (with the relevant log tails) if anything is not ready within HPC_TESTBED_WAIT seconds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || tb_die "up.sh must run as root"
if ! command -v slurmctld >/dev/null || [ ! -x "$TB_PBS_BIN/qsub" ]; then
  tb_die "testbed not installed: run testbed/install.sh first"
fi
t0=$(date +%s.%N)
HOST=$(hostname)
mkdir -p "$TB_DIR/ssh" "$TB_LOG" "$TB_RUN" "$TB_DIR/nodefiles" "$TB_DIR/work" /run/sshd
chmod 0755 "$TB_DIR"
chmod 1777 "$TB_DIR/work" "$TB_DIR/nodefiles"
pods=()
for i in $(seq 1 "$TB_ALL_PODS"); do pods+=("pod$i"); done

# ----------------------------------------------------------------------------------------------------------------
# munge
# ----------------------------------------------------------------------------------------------------------------
start_munge() {
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
      || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 0755 /run/munge
  if ! tb_alive /run/munge/munged.pid; then
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged --force >>"$TB_LOG/munged.out" 2>&1 \
      || tb_die "munged failed to start" "$TB_LOG/munged.out" /var/log/munge/munged.log
  fi
  tb_wait "$TB_WAIT" "munge round trip" sh -c 'munge -n | unmunge' \
    || tb_die "munge does not work" /var/log/munge/munged.log
}

# ----------------------------------------------------------------------------------------------------------------
# ssh material (kept across down/up so known_hosts stays valid)
# ----------------------------------------------------------------------------------------------------------------
make_keys() {
  [ -f "$TB_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C hpc-testbed-client -f "$TB_KEY"
  install -m 0600 "$TB_KEY.pub" "$TB_DIR/ssh/authorized_keys"
  local h
  for h in login "${pods[@]}"; do
    mkdir -p "$TB_DIR/ssh/$h"
    [ -f "$TB_DIR/ssh/$h/ssh_host_ed25519_key" ] \
      || ssh-keygen -q -t ed25519 -N '' -C "hpc-testbed-$h" -f "$TB_DIR/ssh/$h/ssh_host_ed25519_key"
  done
}

# SKEL_HOME sshd ARGS...: sshd in a mount namespace of its own where root's ~/.bashrc and ~/.profile
# are Debian's skeleton (/etc/skel), as a cluster's fresh account has them. bash reads ~/.bashrc for
# every command sshd runs: this image's (pyenv init) started ~300 processes per ssh command, 0.11 s
# of CPU and 0.1 s of wall each (0.245 -> 0.135 CPU-s, 0.34 -> 0.235 s per `ssh pod1 true`, measured),
# some 400 times a test run. Where a bind mount fails, sshd starts all the same.
# shellcheck disable=SC2016  # expanded by the namespace's sh
SKEL_HOME=(unshare --mount --propagation slave sh -c 'for f in .bashrc .profile; do
  if [ -f "/etc/skel/$f" ] && [ -f "$HOME/$f" ]; then mount --bind "/etc/skel/$f" "$HOME/$f" || true; fi
done; exec "$@"' skel-home)

# write_sshd_config FILE LISTEN_LINES HOSTKEY PIDFILE [EXTRA]
write_sshd_config() {
  cat > "$1" <<CFG
$2
HostKey $3
PidFile $4
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile $TB_DIR/ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
MaxSessions 50
AcceptEnv LANG LC_* PDSH_* HPC_*
Subsystem sftp /usr/lib/openssh/sftp-server
LogLevel INFO
${5:-}
CFG
}

write_client_config() {
  local kh=$TB_KNOWN_HOSTS.new cfg=$TB_SSH_CONFIG.new h i ip common
  common="  User root
  IdentityFile $TB_KEY
  IdentitiesOnly yes
  UserKnownHostsFile $TB_KNOWN_HOSTS
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR"
  {
    echo "[127.0.0.1]:$TB_LOGIN_PORT,[localhost]:$TB_LOGIN_PORT $(cut -d' ' -f1,2 "$TB_DIR/ssh/login/ssh_host_ed25519_key.pub")"
    echo "[127.0.0.1]:$TB_LOGIN_SGE_PORT,[localhost]:$TB_LOGIN_SGE_PORT $(cut -d' ' -f1,2 "$TB_DIR/ssh/login/ssh_host_ed25519_key.pub")"
    for i in $(seq 1 "$TB_ALL_PODS"); do
      h=pod$i; ip=$(tb_pod_ip "$i")
      echo "$h,$ip $(cut -d' ' -f1,2 "$TB_DIR/ssh/$h/ssh_host_ed25519_key.pub")"
    done
  } > "$kh"
  {
    echo "# hpc-launch testbed client config (generated by testbed/up.sh). Use: ssh -F $TB_SSH_CONFIG HOST"
    echo "# hpc-login: qsub/qstat/qdel = Slurm's PBS wrappers; hpc-login-sge: qsub/qstat/qdel/qacct = Grid Engine."
    printf 'Host hpc-login\n  HostName 127.0.0.1\n  Port %s\n%s\n\n' "$TB_LOGIN_PORT" "$common"
    printf 'Host hpc-login-sge\n  HostName 127.0.0.1\n  Port %s\n%s\n\n' "$TB_LOGIN_SGE_PORT" "$common"
    for i in $(seq 1 "$TB_ALL_PODS"); do
      printf 'Host pod%s\n  HostName %s\n  Port 22\n%s\n\n' "$i" "$(tb_pod_ip "$i")" "$common"
    done
  } > "$cfg"
  chmod 0644 "$kh" "$cfg"
  mv "$kh" "$TB_KNOWN_HOSTS"; mv "$cfg" "$TB_SSH_CONFIG"
}

# ----------------------------------------------------------------------------------------------------------------
# pods: bridge + one network/UTS namespace per pod, held by a pause process; sshd inside
# ----------------------------------------------------------------------------------------------------------------
pod_pause_pid() { tr -dc '0-9' < "$TB_RUN/$1.pause.pid"; }

teardown_pod() {
  local p=$1
  tb_kill "/run/slurmd-$p.pid"
  tb_kill "$TB_RUN/$p.sshd.pid"
  tb_kill "$TB_RUN/$p.pause.pid"
  ip netns del "$p" 2>/dev/null || true
}

start_pods() {
  if ! ip link show "$TB_BRIDGE" >/dev/null 2>&1; then
    ip link add "$TB_BRIDGE" type bridge
  fi
  ip addr replace "$TB_BRIDGE_IP/24" dev "$TB_BRIDGE"
  ip link set "$TB_BRIDGE" up
  local i p ip pd
  for i in $(seq 1 "$TB_ALL_PODS"); do
    p=pod$i; ip=$(tb_pod_ip "$i"); pd=$TB_DIR/ssh/$p
    if tb_alive "$TB_RUN/$p.pause.pid" && ip netns list | grep -w "^$p" >/dev/null; then
      :
    else
      teardown_pod "$p"
      ip netns add "$p"
      ip link del "veth-$p" 2>/dev/null || true
      ip link add "veth-$p" type veth peer name eth0 netns "$p"
      ip link set "veth-$p" master "$TB_BRIDGE" up
      ip -n "$p" addr add "$ip/24" dev eth0
      ip -n "$p" link set lo up
      ip -n "$p" link set eth0 up
      # The pause process owns the pod's UTS namespace (own hostname); everything else joins it with nsenter.
      setsid ip netns exec "$p" unshare --uts /bin/sh -c \
        "echo \$\$ > '$TB_RUN/$p.pause.pid'; hostname '$p'; exec sleep infinity" </dev/null >/dev/null 2>&1 &
      tb_wait 5 "$p pause process" test -s "$TB_RUN/$p.pause.pid" || tb_die "$p: pause process did not start"
    fi
    if ! tb_alive "$TB_RUN/$p.sshd.pid"; then
      write_sshd_config "$pd/sshd_config" "Port 22
ListenAddress $ip" "$pd/ssh_host_ed25519_key" "$TB_RUN/$p.sshd.pid"
      nsenter -t "$(pod_pause_pid "$p")" --net --uts "${SKEL_HOME[@]}" /usr/sbin/sshd -f "$pd/sshd_config" -E "$TB_LOG/$p.sshd.log" \
        || tb_die "$p: sshd failed to start" "$TB_LOG/$p.sshd.log"
    fi
  done
}

start_login_sshd() {
  local d=$TB_DIR/ssh/login pf=$TB_RUN/login.sshd.pid
  local base_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  write_sshd_config "$d/sshd_config" "ListenAddress 127.0.0.1
Port $TB_LOGIN_PORT
Port $TB_LOGIN_SGE_PORT" "$d/ssh_host_ed25519_key" "$pf" \
"Match LocalPort $TB_LOGIN_PORT
  SetEnv PATH=$TB_PBS_BIN:$base_path SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL HPC_TESTBED_LOGIN_FLAVOR=pbs
Match LocalPort $TB_LOGIN_SGE_PORT
  SetEnv PATH=$TB_SGE_BIN:$base_path SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL HPC_TESTBED_LOGIN_FLAVOR=sge"
  # Login shells (hpc-launch runs remote commands with `bash -lc`, as real sites need for `module`)
  # rebuild PATH in /etc/profile: put the flavour's qsub first again there, as a site's profile.d does.
  cat > /etc/profile.d/hpc-testbed-login.sh <<PROFILE
# hpc-launch testbed login host: which qsub comes first (set by sshd SetEnv per port)
case "\${HPC_TESTBED_LOGIN_FLAVOR:-}" in
  pbs) PATH=$TB_PBS_BIN:\$PATH ;;
  sge) PATH=$TB_SGE_BIN:\$PATH ;;
esac
PROFILE
  if tb_alive "$pf"; then
    kill -HUP "$(tr -dc '0-9' < "$pf")"   # re-read config (cheap, keeps it idempotent)
  else
    "${SKEL_HOME[@]}" /usr/sbin/sshd -f "$d/sshd_config" -E "$TB_LOG/login.sshd.log" || tb_die "login sshd failed" "$TB_LOG/login.sshd.log"
  fi
}

# ----------------------------------------------------------------------------------------------------------------
# Slurm (+ accounting)
# ----------------------------------------------------------------------------------------------------------------
write_slurm_conf() {
  local acct nodes side_nodes side i new=$SLURM_CONF_FILE.new
  nodes="pod[1-$TB_PODS]"
  # The side pods: partition `side`, and the preemption pair (whose tests wait out a grace time).
  side_nodes=$nodes side="# no side pods"
  if [ "$TB_SIDE_PODS" -gt 0 ]; then
    side_nodes="pod[$((TB_PODS + 1))-$TB_ALL_PODS]"
    side="PartitionName=side Nodes=$side_nodes Default=NO MaxTime=INFINITE State=UP PreemptMode=OFF"
  fi
  if [ "$TB_ACCT" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
  else
    acct="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
  fi
  cat > "$new" <<CONF
# Generated by hpc-launch testbed/up.sh -- do not edit by hand.
ClusterName=hpctb
SlurmctldHost=localhost($TB_BRIDGE_IP)
AuthType=auth/munge
# A requeued job waits out the credential lifetime before it starts again (slurm.conf(5),
# cred_expire, default 120 s); starting it sooner makes slurmd refuse it ("Job credential
# revoked") and the job fail. 8 s keeps the requeue tests short without that race.
AuthInfo=cred_expire=8
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd-%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=/etc/slurm/hpc-testbed-pbs-taskprolog.sh
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
$acct
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=20
InactiveLimit=0
MinJobAge=1800
KillWait=5
OverTimeLimit=0
Waittime=0
EnforcePartLimits=ALL
# Preemption by partition: a job of urgent (PriorityTier 2) that needs the nodes of a job of
# preempt requeues it (slurm.conf(5) PreemptType, PreemptMode=REQUEUE). Its tasks get SIGTERM at
# once and the job is requeued when it ends, or at the latest GraceTime (20 s) later; debug,
# short and side are never preempted (PreemptMode=OFF). preempt and urgent hold the side pods.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
CONF
  for i in $(seq 1 "$TB_ALL_PODS"); do
    echo "NodeName=pod$i NodeAddr=$(tb_pod_ip "$i") CPUs=2 RealMemory=2000 State=UNKNOWN"
  done >> "$new"
  cat >> "$new" <<CONF
PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP PreemptMode=OFF
PartitionName=short Nodes=$nodes Default=NO MaxTime=00:05:00 State=UP PreemptMode=OFF
PartitionName=preempt Nodes=$side_nodes Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=20
PartitionName=urgent Nodes=$side_nodes Default=NO MaxTime=00:05:00 State=UP PriorityTier=2 PreemptMode=OFF
$side
CONF
  if cmp -s "$new" "$SLURM_CONF_FILE"; then rm -f "$new"; SLURM_CONF_CHANGED=0
  else mv "$new" "$SLURM_CONF_FILE"; SLURM_CONF_CHANGED=1; fi
  chmod 0644 "$SLURM_CONF_FILE"
  sed "s#@NODEFILE_DIR@#$TB_DIR/nodefiles#" "$here/pbs-taskprolog.sh" > /etc/slurm/hpc-testbed-pbs-taskprolog.sh
  chmod 0755 /etc/slurm/hpc-testbed-pbs-taskprolog.sh
}

start_accounting() {
  [ "$TB_ACCT" = 1 ] || return 0
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  if ! tb_alive /run/mysqld/mysqld.pid; then
    setsid mariadbd --user=mysql --bind-address=127.0.0.1 --socket=/run/mysqld/mysqld.sock \
      --pid-file=/run/mysqld/mysqld.pid --innodb-buffer-pool-size=64M </dev/null >>"$TB_LOG/mariadb.log" 2>&1 &
  fi
  tb_wait "$TB_WAIT" "mariadb ping" mariadb-admin ping || tb_die "MariaDB did not start" "$TB_LOG/mariadb.log"
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'hpctb-slurmdbd';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  local new=/etc/slurm/slurmdbd.conf.new
  printf '%s\n' AuthType=auth/munge DbdHost=localhost DbdAddr=127.0.0.1 DbdPort=6819 SlurmUser=slurm \
    PidFile=/run/slurmdbd.pid LogFile=/var/log/slurm/slurmdbd.log StorageType=accounting_storage/mysql \
    StorageHost=localhost StorageLoc=slurm_acct_db StorageUser=slurm StoragePass=hpctb-slurmdbd > "$new"
  chown slurm:slurm "$new"; chmod 0600 "$new"; mv "$new" /etc/slurm/slurmdbd.conf
  if ! tb_alive /run/slurmdbd.pid; then
    rm -f /run/slurmdbd.pid
    slurmdbd || tb_die "slurmdbd failed to start" /var/log/slurm/slurmdbd.log
  fi
  # The cluster must exist in the database before slurmctld registers.
  tb_wait "$TB_WAIT" "slurmdbd: cluster hpctb registered" \
    sh -c 'sacctmgr -n -P show cluster format=cluster | grep -x hpctb >/dev/null || sacctmgr -i -Q add cluster hpctb' \
    || tb_die "sacctmgr add cluster failed" /var/log/slurm/slurmdbd.log "$TB_LOG/mariadb.log"
}

start_slurm() {
  install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/log/slurm
  if tb_alive /run/slurmctld.pid; then
    if [ "$SLURM_CONF_CHANGED" = 1 ]; then scontrol reconfigure; fi
  else
    rm -f /run/slurmctld.pid
    slurmctld || tb_die "slurmctld failed to start" /var/log/slurm/slurmctld.log
  fi
  tb_wait "$TB_WAIT" "slurmctld answering" scontrol ping || tb_die "slurmctld not answering" /var/log/slurm/slurmctld.log
  local p
  for p in "${pods[@]}"; do
    if tb_alive "/run/slurmd-$p.pid"; then
      if [ "$SLURM_CONF_CHANGED" = 1 ]; then kill -HUP "$(tr -dc '0-9' < "/run/slurmd-$p.pid")"; fi
    else
      rm -f "/run/slurmd-$p.pid"
      mkdir -p "/var/lib/slurm/slurmd-$p"
      nsenter -t "$(pod_pause_pid "$p")" --net --uts slurmd -N "$p" \
        || tb_die "slurmd $p failed to start" "/var/log/slurm/slurmd-$p.log"
    fi
  done
}

slurm_nodes_idle() {
  local n
  n=$(sinfo -h -N -t idle,mixed,allocated -o '%N' 2>/dev/null | sort -u | wc -l)
  [ "$n" -ge "$TB_ALL_PODS" ]
}

# ----------------------------------------------------------------------------------------------------------------
# Grid Engine
# ----------------------------------------------------------------------------------------------------------------
SGE_COMMON=$SGE_ROOT/$SGE_CELL/common
SGE_QMASTER_PID=/var/spool/gridengine/qmaster/qmaster.pid

sge_qconf() {   # run a modifying qconf; die with its message if it fails
  local out
  out=$(/usr/bin/qconf "$@" 2>&1) || tb_die "qconf $* failed: $out" /var/spool/gridengine/qmaster/messages
}

sge_set_conf() {   # sge_set_conf KIND(conf|sconf) KEY VALUE...: change only what differs, via a temp file
  local kind=$1 tmp; shift
  tmp=$(mktemp -d)
  if [ "$kind" = conf ]; then /usr/bin/qconf -sconf global > "$tmp/raw"; else /usr/bin/qconf -ssconf > "$tmp/raw"; fi
  # qconf folds long values with "\<newline>"; join them so each attribute is one line (file name must be "global")
  sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' -e '/^[a-z_]*=/d' "$tmp/raw" > "$tmp/global"
  local changed=0
  while [ $# -ge 2 ]; do
    if ! grep -Eq "^$1[[:space:]]+$2\$" "$tmp/global"; then
      sed -i -E "s#^$1[[:space:]].*#$1 $2#" "$tmp/global"; changed=1
    fi
    shift 2
  done
  if [ $changed = 1 ]; then
    if [ "$kind" = conf ]; then sge_qconf -Mconf "$tmp/global"; else sge_qconf -Msconf "$tmp/global"; fi
  fi
  rm -rf "$tmp"
}

sge_ready() {
  # exec host reports load, and the queue instance is in no error/unknown/disabled state
  /usr/bin/qhost -h "$HOST" 2>/dev/null | awk -v h="$HOST" '$1==h && $4!="-" {ok=1} END{exit !ok}' || return 1
  /usr/bin/qstat -f -q all.q 2>/dev/null | awk -v q="all.q@$HOST" '$1==q && NF==5 {ok=1} END{exit !ok}'
}

start_sge() {
  [ "$TB_SGE" = 1 ] || return 0
  [ -d "$SGE_COMMON" ] || tb_die "Grid Engine cell $SGE_COMMON missing (gridengine-master postinst did not run?)"
  # Grid Engine needs the host name to resolve; a bare CI box may not have it in /etc/hosts.
  if ! getent hosts "$HOST" >/dev/null; then
    tb_say "adding '127.0.1.1 $HOST' to /etc/hosts (Grid Engine needs the host name to resolve)"
    printf '127.0.1.1 %s\n' "$HOST" >> /etc/hosts
  fi
  # Pitfall: $(hostname) resolves to 127.0.0.1 = "localhost"; without the alias every client gets "access denied".
  printf '%s localhost\n' "$HOST" > "$SGE_COMMON/host_aliases"
  echo "$HOST" > "$SGE_COMMON/act_qmaster"
  mkdir -p /var/run/gridengine
  if ! tb_alive "$SGE_QMASTER_PID"; then
    rm -f "$SGE_QMASTER_PID"
    /usr/sbin/sge_qmaster >>"$TB_LOG/sge_qmaster.out" 2>&1 \
      || tb_die "sge_qmaster failed to start" "$TB_LOG/sge_qmaster.out" /var/spool/gridengine/qmaster/messages
  fi
}

configure_sge() {   # runs after Slurm is started, giving sge_qmaster time to come up
  [ "$TB_SGE" = 1 ] || return 0
  tb_wait "$TB_WAIT" "sge_qmaster answering" /usr/bin/qconf -sh \
    || tb_die "sge_qmaster not answering" /var/spool/gridengine/qmaster/messages
  # Root jobs (min_uid 0) and accounting records visible to qacct within ~1 s.
  sge_set_conf conf min_uid 0 min_gid 0 \
    reporting_params 'accounting=true reporting=false flush_time=00:00:01 joblog=false sharelog=00:00:00'
  # No load-based holding: 2 cores with a few busy pods easily exceed np_load_avg thresholds.
  sge_set_conf sconf schedule_interval 0:0:1 flush_submit_sec 1 flush_finish_sec 1 \
    job_load_adjustments NONE load_adjustment_decay_time 0:0:0
  /usr/bin/qconf -ss 2>/dev/null | grep -x "$HOST" >/dev/null || /usr/bin/qconf -as "$HOST" >/dev/null 2>&1
  /usr/bin/qconf -sh 2>/dev/null | grep -x "$HOST" >/dev/null || /usr/bin/qconf -ah "$HOST" >/dev/null 2>&1
  local pe tmp
  tmp=$(mktemp -d)
  for pe in smp mpi; do
    if [ $pe = smp ]; then rule=\$pe_slots; else rule=\$round_robin; fi
    cat > "$tmp/$pe" <<PE
pe_name            $pe
slots              999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $rule
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
PE
    if /usr/bin/qconf -sp "$pe" >/dev/null 2>&1; then sge_qconf -Mp "$tmp/$pe"
    else sge_qconf -Ap "$tmp/$pe"; fi
  done
  /usr/bin/qconf -sq 2>/dev/null | sed -e 's/^qname .*/qname all.q/' -e "s/^hostlist .*/hostlist $HOST/" \
    -e 's/^slots .*/slots 4/' -e 's/^pe_list .*/pe_list make smp mpi/' -e 's#^shell .*#shell /bin/bash#' \
    -e 's/^shell_start_mode .*/shell_start_mode unix_behavior/' -e 's/^tmpdir .*/tmpdir \/tmp/' \
    -e 's/^load_thresholds .*/load_thresholds NONE/' > "$tmp/all.q"
  grep -q '^qname all.q' "$tmp/all.q" || tb_die "could not build the Grid Engine queue template (qconf -sq)"
  if /usr/bin/qconf -sql 2>/dev/null | grep -x all.q >/dev/null; then sge_qconf -Mq "$tmp/all.q"
  else sge_qconf -Aq "$tmp/all.q"; fi
  rm -rf "$tmp"
  # execd spools under the name its address resolves to ("localhost" here, via host_aliases), so glob for it.
  local epid alive=0
  for epid in /var/spool/gridengine/execd/*/execd.pid; do
    if tb_alive "$epid"; then alive=1; else rm -f "$epid"; fi
  done
  if [ $alive = 0 ]; then
    /usr/sbin/sge_execd >>"$TB_LOG/sge_execd.out" 2>&1 \
      || tb_die "sge_execd failed to start" "$TB_LOG/sge_execd.out" /var/spool/gridengine/execd/*/messages
  fi
  /usr/bin/qmod -c 'all.q' >/dev/null 2>&1 || true   # clear a stale E state from an earlier failed job
}

# ----------------------------------------------------------------------------------------------------------------
timings=""
step() {   # step FUNCTION: run it and remember how long it took (printed at the end)
  local a b
  a=$(date +%s%N); "$@"; b=$(date +%s%N)
  timings+=" $1=$(( (b - a) / 1000000 ))ms"
}
step start_munge
step make_keys
step start_pods
step start_login_sshd
step write_client_config
step write_slurm_conf
step start_sge
step start_accounting
step start_slurm
step configure_sge

wait_ready() {
tb_wait "$TB_WAIT" "sinfo: $TB_ALL_PODS pod nodes idle" slurm_nodes_idle || {
  sinfo -N >&2 || true
  logs=(/var/log/slurm/slurmctld.log)
  for p in "${pods[@]}"; do logs+=("/var/log/slurm/slurmd-$p.log"); done
  tb_die "Slurm nodes not idle" "${logs[@]}"
}
if [ "$TB_SGE" = 1 ]; then
  tb_wait "$TB_WAIT" "qhost: exec host $HOST with a usable all.q" sge_ready || {
    /usr/bin/qhost >&2 || true; /usr/bin/qstat -f >&2 || true
    tb_die "Grid Engine exec host not ready" /var/spool/gridengine/qmaster/messages \
      /var/spool/gridengine/execd/*/messages "$TB_LOG/sge_execd.out"
  }
fi
for p in "${pods[@]}"; do
  tb_wait "$TB_WAIT" "sshd in $p" ssh -F "$TB_SSH_CONFIG" "$p" true || tb_die "cannot ssh to $p" "$TB_LOG/$p.sshd.log"
done
tb_wait "$TB_WAIT" "login sshd" ssh -F "$TB_SSH_CONFIG" hpc-login true || tb_die "cannot ssh to hpc-login" "$TB_LOG/login.sshd.log"
}
step wait_ready

echo "${pods[*]:0:$TB_PODS}" > "$TB_DIR/pods"
t1=$(date +%s.%N)
tb_say "testbed up in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s: pods ${pods[*]}, slurm$([ "$TB_ACCT" = 1 ] && echo '+sacct')$([ "$TB_SGE" = 1 ] && echo ", gridengine@$HOST")"
tb_say "step timings:$timings"
cat <<EOF
HPC_TESTBED_DIR=$TB_DIR
HPC_TESTBED_SSH_CONFIG=$TB_SSH_CONFIG
HPC_TESTBED_KNOWN_HOSTS=$TB_KNOWN_HOSTS
HPC_TESTBED_KEY=$TB_KEY
HPC_TESTBED_LOGIN_HOST=hpc-login          (127.0.0.1:$TB_LOGIN_PORT, qsub = Slurm PBS wrapper)
HPC_TESTBED_LOGIN_HOST_SGE=hpc-login-sge  (127.0.0.1:$TB_LOGIN_SGE_PORT, qsub = Grid Engine)
HPC_TESTBED_PBS_BIN=$TB_PBS_BIN
HPC_TESTBED_SGE_BIN=$TB_SGE_BIN
source $here/env.sh to export these.
EOF
