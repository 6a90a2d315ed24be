# shellcheck shell=sh
# Source this (bash or any POSIX sh) to get the variables tests and tools need to use the testbed:
#   . testbed/env.sh
# It does not start anything; testbed/up.sh does. Values are derived from the same defaults as up.sh.

export HPC_TESTBED_DIR="${HPC_TESTBED_DIR:-/tmp/hpc-testbed}"
export HPC_TESTBED_OPT="${HPC_TESTBED_OPT:-/opt/hpc-testbed}"
if [ -z "${HPC_TESTBED_PODS:-}" ]; then
  if [ -s "$HPC_TESTBED_DIR/pods" ]; then
    HPC_TESTBED_PODS=$(wc -w < "$HPC_TESTBED_DIR/pods" | tr -d ' ')
  else
    HPC_TESTBED_PODS=3
  fi
fi
export HPC_TESTBED_PODS

# ssh: one client config for the login host and the pods; host keys are verified against our known_hosts.
export HPC_TESTBED_SSH_CONFIG="$HPC_TESTBED_DIR/ssh/ssh_config"
export HPC_TESTBED_KNOWN_HOSTS="$HPC_TESTBED_DIR/ssh/known_hosts"
export HPC_TESTBED_KEY="$HPC_TESTBED_DIR/ssh/id_ed25519"
export HPC_TESTBED_LOGIN_HOST=hpc-login            # 127.0.0.1:2222 -- PATH has the Slurm PBS wrappers first
export HPC_TESTBED_LOGIN_HOST_SGE=hpc-login-sge    # 127.0.0.1:2223 -- PATH has Grid Engine's qsub first
export HPC_TESTBED_LOGIN_ADDR=127.0.0.1
export HPC_TESTBED_LOGIN_PORT="${HPC_TESTBED_LOGIN_PORT:-2222}"
export HPC_TESTBED_LOGIN_SGE_PORT="${HPC_TESTBED_LOGIN_SGE_PORT:-2223}"
export HPC_TESTBED_LOGIN_USER=root

# Which qsub: put one of these first on PATH (neither is first by default: /usr/bin/qsub is Grid Engine's).
export HPC_TESTBED_PBS_BIN="$HPC_TESTBED_OPT/pbs/bin"   # qsub/qstat/qdel/pbsnodes = Slurm's PBS (Torque) wrappers
export HPC_TESTBED_SGE_BIN="$HPC_TESTBED_OPT/sge/bin"   # qsub/qstat/qdel/qacct/qconf/qhost = Grid Engine 8.1.9
export SGE_ROOT="${SGE_ROOT:-/var/lib/gridengine}"
export SGE_CELL="${SGE_CELL:-default}"

# pods: pod1..podN = 10.200.0.11.. on bridge br-hpctb (host side 10.200.0.1); interface inside a pod is eth0.
HPC_TESTBED_POD_NAMES=""
HPC_TESTBED_POD_IPS=""
_tb_i=1
while [ "$_tb_i" -le "$HPC_TESTBED_PODS" ]; do
  HPC_TESTBED_POD_NAMES="${HPC_TESTBED_POD_NAMES:+$HPC_TESTBED_POD_NAMES,}pod$_tb_i"
  HPC_TESTBED_POD_IPS="${HPC_TESTBED_POD_IPS:+$HPC_TESTBED_POD_IPS,}10.200.0.$((10 + _tb_i))"
  _tb_i=$((_tb_i + 1))
done
unset _tb_i
export HPC_TESTBED_POD_NAMES HPC_TESTBED_POD_IPS
export HPC_TESTBED_POD_SUBNET=10.200.0.0/24
export HPC_TESTBED_BRIDGE_IP=10.200.0.1
export HPC_TESTBED_POD_IFNAME=eth0                 # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME inside pods
export HPC_TESTBED_WORK="$HPC_TESTBED_DIR/work"    # world-writable scratch on the (shared) filesystem
export HPC_TESTBED_SLURM_PARTITION=debug           # also: "short" (MaxTime 5 min); "side": the side pods
export HPC_TESTBED_SGE_QUEUE=all.q                 # PEs: smp ($pe_slots), mpi ($round_robin); 4 slots

# pdsh over ssh with our config (pdsh defaults to rsh!)
export HPC_TESTBED_PDSH_SSH_ARGS_APPEND="-F $HPC_TESTBED_SSH_CONFIG"
export HPC_TESTBED_PDSH_RCMD_TYPE=ssh
