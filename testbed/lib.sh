# shellcheck shell=bash disable=SC2034
# Common settings and helpers for the hpc-launch testbed scripts (sourced, not executed).
# Every knob can be overridden from the environment; env.sh derives the same values.

TB_DIR=${HPC_TESTBED_DIR:-/tmp/hpc-testbed}          # runtime state: keys, configs, logs, pid files
TB_OPT=${HPC_TESTBED_OPT:-/opt/hpc-testbed}          # install-time files: PBS wrapper copy, SGE bin dir
TB_PODS=${HPC_TESTBED_PODS:-3}                       # number of network-namespace pods the tests' jobs use
# Pods after those (pod4.. by default), in a partition of their own (`side`): a second lane of
# waiting-bound tests (chains, walltime deadlines) runs there beside the pods' lane, never on its nodes.
TB_SIDE_PODS=${HPC_TESTBED_SIDE_PODS:-2}
TB_ALL_PODS=$((TB_PODS + TB_SIDE_PODS))
TB_ACCT=${HPC_TESTBED_ACCT:-1}                       # 1: MariaDB + slurmdbd so `sacct` works
TB_SGE=${HPC_TESTBED_SGE:-1}                         # 1: start Grid Engine qmaster + execd
TB_LOGIN_PORT=${HPC_TESTBED_LOGIN_PORT:-2222}        # sshd "login host": qsub = Slurm's PBS wrapper
TB_LOGIN_SGE_PORT=${HPC_TESTBED_LOGIN_SGE_PORT:-2223} # same sshd, second port: qsub = Grid Engine
TB_WAIT=${HPC_TESTBED_WAIT:-30}                      # seconds to wait for any daemon to become ready

TB_BRIDGE=br-hpctb
TB_NET=10.200.0
TB_BRIDGE_IP=$TB_NET.1
TB_PBS_BIN=$TB_OPT/pbs/bin
TB_SGE_BIN=$TB_OPT/sge/bin
TB_SSH_CONFIG=$TB_DIR/ssh/ssh_config
TB_KNOWN_HOSTS=$TB_DIR/ssh/known_hosts
TB_KEY=$TB_DIR/ssh/id_ed25519
TB_LOG=$TB_DIR/log
TB_RUN=$TB_DIR/run

export SGE_ROOT=${SGE_ROOT:-/var/lib/gridengine}
export SGE_CELL=${SGE_CELL:-default}

SLURM_CONF_FILE=/etc/slurm/slurm.conf

tb_pod_ip() { echo "$TB_NET.$((10 + $1))"; }

tb_say() { printf '[testbed %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# tb_die MESSAGE [LOGFILE...]: print the message plus the tail of each log, exit 1.
tb_die() {
  local msg=$1; shift
  printf '[testbed] ERROR: %s\n' "$msg" >&2
  local f
  for f in "$@"; do
    [ -e "$f" ] || continue
    printf -- '----- tail of %s -----\n' "$f" >&2
    tail -n 40 "$f" >&2
  done
  exit 1
}

# tb_wait SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.1 s until it succeeds; return 1 on timeout.
tb_wait() {
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      printf '[testbed] timed out after %ss waiting for: %s\n' "$secs" "$what" >&2
      return 1
    fi
    sleep 0.1
  done
}

# tb_alive PIDFILE: the process named in PIDFILE exists (and is not a zombie).
tb_alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$( { tr -dc '0-9' < "$1"; } 2>/dev/null )
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null
}

# tb_kill PIDFILE [SECONDS]: TERM the process, wait up to SECONDS (default 5), then KILL; remove the pid file.
tb_kill() {
  local pf=$1 pid i
  if [ -s "$pf" ]; then
    pid=$( { tr -dc '0-9' < "$pf"; } 2>/dev/null )
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for i in $(seq $((${2:-5} * 10))); do tb_alive "$pf" || break; sleep 0.1; done
      if tb_alive "$pf"; then kill -9 "$pid" 2>/dev/null || true; fi
      : "$i"
    fi
  fi
  rm -f "$pf"
}
