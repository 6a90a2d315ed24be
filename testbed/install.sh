#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# Install everything the testbed needs on Debian 12 (root). Idempotent and quiet; a no-op (< 1 s) when done.
#
# Slurm's PBS wrappers (package slurm-wlm-torque) and Grid Engine's client both want /usr/bin/qsub and the
# packages conflict. We let Grid Engine own /usr/bin/qsub (real package install) and keep a private copy of
# the slurm-wlm-torque Perl wrappers, unpacked from the .deb with dpkg-deb -x, in $HPC_TESTBED_OPT/pbs/bin
# (default /opt/hpc-testbed/pbs/bin). The Perl modules the wrappers use (Slurm.pm, Slurmdb.pm, Switch.pm)
# come from libslurm-perl / libslurmdb-perl / libswitch-perl, which do not conflict with anything.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || tb_die "install.sh must run as root"
# A second, unprivileged user: tests look at jobs through someone else's eyes (--pass-env secrets)
id -u tbother >/dev/null 2>&1 || useradd -m -s /bin/bash tbother
export DEBIAN_FRONTEND=noninteractive

pkgs=(
  slurmctld slurmd slurm-client munge libslurm-perl libslurmdb-perl libswitch-perl
  openssh-server openssh-client pdsh openmpi-bin shellcheck iproute2 procps util-linux perl
  gridengine-master gridengine-exec gridengine-client
  charliecloud-runtime
)
if [ "$TB_ACCT" = 1 ]; then pkgs+=(slurmdbd mariadb-server); fi

missing=()
for p in "${pkgs[@]}"; do
  st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  [ "${st:0:2}" = ii ] || missing+=("$p")
done
stamp=$TB_OPT/pbs/.installed

if [ ${#missing[@]} -eq 0 ] && [ -f "$stamp" ] && grep -q hpc-testbed "$TB_SGE_BIN/qsub" 2>/dev/null; then
  exit 0
fi

log=$(mktemp /tmp/hpc-testbed-install.XXXXXX.log)
if [ ${#missing[@]} -gt 0 ]; then
  tb_say "installing ${#missing[@]} packages: ${missing[*]}"
  # Grid Engine asks debconf questions; preseed a cell "default" whose master is this host.
  host=$(hostname)
  debconf-set-selections <<EOT
gridengine-common shared/gridengineconfig boolean true
gridengine-common shared/gridenginecell string default
gridengine-common shared/gridenginemaster string $host
gridengine-client shared/gridengineconfig boolean true
gridengine-client shared/gridenginecell string default
gridengine-client shared/gridenginemaster string $host
EOT
  # A Debian-packaged slurm-wlm-torque would be removed by gridengine-client anyway; take it out first so apt
  # does not have to make that decision (our private copy below replaces it).
  if dpkg-query -W -f='${Status}' slurm-wlm-torque 2>/dev/null | grep ' installed' >/dev/null; then
    apt-get remove -y -q slurm-wlm-torque >>"$log" 2>&1 || tb_die "apt-get remove slurm-wlm-torque failed" "$log"
  fi
  apt-get update -qq >>"$log" 2>&1 || tb_die "apt-get update failed" "$log"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
    || tb_die "apt-get install failed" "$log"
fi

# --- private copy of Slurm's PBS/Torque wrappers -------------------------------------------------------------
if [ ! -f "$stamp" ]; then
  tmp=$(mktemp -d /tmp/hpc-testbed-torque.XXXXXX)
  ( cd "$tmp" && apt-get download slurm-wlm-torque ) >>"$log" 2>&1 \
    || { apt-get update -qq >>"$log" 2>&1 && ( cd "$tmp" && apt-get download slurm-wlm-torque ) >>"$log" 2>&1; } \
    || tb_die "apt-get download slurm-wlm-torque failed" "$log"
  dpkg-deb -x "$tmp"/slurm-wlm-torque_*.deb "$tmp/x"
  rm -rf "$TB_PBS_BIN"
  mkdir -p "$TB_PBS_BIN"
  for f in qsub qstat qdel qalter qhold qrls qrerun pbsnodes generate_pbs_nodefile mpiexec.slurm; do
    if [ -f "$tmp/x/usr/bin/$f" ]; then install -m 0755 "$tmp/x/usr/bin/$f" "$TB_PBS_BIN/$f"; fi
  done
  # qsub runs "${FindBin::Bin}/sbatch" (and salloc/srun): give it the real Slurm binaries next to it.
  for f in sbatch salloc srun scontrol squeue scancel sinfo sacct; do ln -sfn "/usr/bin/$f" "$TB_PBS_BIN/$f"; done
  cp "$tmp"/slurm-wlm-torque_*.deb "$TB_OPT/pbs/"
  rm -rf "$tmp"
  touch "$stamp"
fi

# Grid Engine's commands under a dir of their own, as a site's $SGE_ROOT/bin/$ARCH is on PATH: the
# binaries with SGE_ROOT and SGE_CELL defaulted as Debian's /usr/bin wrapper defaults them. That
# wrapper runs util/arch (uname, ldd, cpp) on every call: 0.065 s of CPU per qstat, measured, some
# 500 calls a test run; the architecture is read here once instead.
sge_arch=$(/usr/share/gridengine/util/arch)
rm -rf "$TB_SGE_BIN"
mkdir -p "$TB_SGE_BIN"
for f in qsub qstat qdel qacct qconf qhost qalter qhold qrls qmod qselect qrsh qlogin; do
  [ -x "/usr/lib/gridengine/$f" ] || continue
  # shellcheck disable=SC2016  # expanded when the written wrapper runs
  printf '#!/bin/sh\n# hpc-testbed: Grid Engine %s (testbed/install.sh)\n: "${SGE_ROOT:=/var/lib/gridengine}" "${SGE_CELL:=default}" "${SGE_ARCH:=%s}"\nexport SGE_ROOT SGE_CELL SGE_ARCH\nexec /usr/lib/gridengine/%s "$@"\n' \
    "$f" "$sge_arch" "$f" > "$TB_SGE_BIN/$f"
  chmod 0755 "$TB_SGE_BIN/$f"
done

# Sanity: the two qsubs really are different programs.
head -c 64 "$TB_PBS_BIN/qsub" | grep perl >/dev/null || tb_die "$TB_PBS_BIN/qsub is not Slurm's Perl wrapper"
"$TB_SGE_BIN/qsub" -help 2>&1 | head -1 | grep -E "^(SGE|GE|OGS)" >/dev/null || tb_die "$TB_SGE_BIN/qsub is not Grid Engine's qsub"
rm -f "$log"
