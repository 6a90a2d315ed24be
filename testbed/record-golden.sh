#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# Record REAL outputs of the testbed schedulers' commands into tests/golden/sched/ (for the status parsers).
# Needs a running testbed (testbed/up.sh). Takes ~70 s (a Slurm TIMEOUT needs a 1-minute time limit).
#   testbed/record-golden.sh [OUTDIR]
# Each golden file NAME.txt holds the command's stdout exactly; NAME.stderr.txt its stderr when non-empty.
# OUTDIR/README.md lists every file with the exact command line and exit status.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
G=${1:-$here/../tests/golden/sched}
mkdir -p "$G"
G=$(cd "$G" && pwd)
W=$(mktemp -d "$TB_DIR/work/golden.XXXXXX")
chmod 0777 "$W"
cd "$W"
PBSP="$TB_PBS_BIN:$PATH"
SGEP="$TB_SGE_BIN:$PATH"
rows=()

# rec NAME FLAVOR(slurm|pbs|sge) CMD...: run CMD with that flavor's PATH, keep stdout (+stderr), note rc.
rec() {
  local name=$1 flavor=$2 rc=0 p; shift 2
  case $flavor in pbs) p=$PBSP ;; sge) p=$SGEP ;; *) p=$PATH ;; esac
  PATH=$p "$@" > "$G/$name.txt" 2> "$G/$name.stderr.txt" || rc=$?
  [ -s "$G/$name.stderr.txt" ] || rm -f "$G/$name.stderr.txt"
  local shown="" a
  for a in "$@"; do   # shell-quote only where needed; "|" is escaped for the Markdown table
    if [[ $a =~ ^[A-Za-z0-9_./%=:,@+-]+$ ]]; then shown+="$a "; else shown+="'${a//\'/\'\\\'\'}' "; fi
  done
  shown=${shown//|/\\|}
  if [ "$flavor" = pbs ]; then shown="PATH=\$HPC_TESTBED_PBS_BIN:\$PATH $shown"; fi
  if [ "$flavor" = sge ]; then shown="PATH=\$HPC_TESTBED_SGE_BIN:\$PATH $shown"; fi
  local err=""
  if [ -e "$G/$name.stderr.txt" ]; then err=" (+ \`$name.stderr.txt\`)"; fi
  rows+=("| \`$name.txt\`$err | \`${shown% }\` | $rc |")
}

slurm_state() { squeue -h --states=all -o %T -j "$1" 2>/dev/null; }
wait_state() {   # wait_state JOBID REGEX [SECONDS]
  local deadline=$((SECONDS + ${3:-60}))
  until slurm_state "$1" | grep -Eqx "$2"; do
    [ $SECONDS -lt $deadline ] || tb_die "slurm job $1 never reached state $2 (now: $(slurm_state "$1"))"
    sleep 0.2
  done
}
sge_state() { PATH=$SGEP qstat | awk -v j="$1" '$1==j {print $5}'; }
wait_sge() {   # wait_sge JOBID STATE|gone [SECONDS]
  local deadline=$((SECONDS + ${3:-60}))
  while :; do
    local s; s=$(sge_state "$1")
    if [ "$2" = gone ]; then [ -z "$s" ] && break; else [ "$s" = "$2" ] && break; fi
    [ $SECONDS -lt $deadline ] || tb_die "sge job $1 never reached $2 (now: '$s')"
    sleep 0.2
  done
}
wait_qacct() {
  local deadline=$((SECONDS + 30))
  until PATH=$SGEP qacct -j "$1" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || tb_die "no qacct record for $1"; sleep 0.3
  done
}

# On any exit, cancel whatever this script submitted (job ids are collected as we go).
cleanup() {
  local j
  for j in ${timeout_id:-} ${done_id:-} ${fail_id:-} ${run_id:-} ${pend_id:-} ${prun_id:-} ${ppend_id:-}; do
    scancel "$j" 2>/dev/null || true
  done
  for j in ${srun_id:-} ${spend_id:-} ${stime_id:-}; do PATH=$SGEP qdel "$j" >/dev/null 2>&1 || true; done
  cd / && rm -rf "$W"
}
trap cleanup EXIT

tb_say "recording golden outputs into $G (workdir $W)"
rm -f "$G"/*.txt

# ------------------------------------------------------------------------------------------------ Slurm
cat > sleep.sbatch <<'EOF'
#!/bin/bash
#SBATCH -J gsleep
#SBATCH -o gsleep-%j.out
sleep 300
EOF
timeout_id=$(sbatch --parsable -J gtimeout -t 1 -o gtimeout-%j.out --wrap 'sleep 300')   # needs ~70 s

rec slurm_sbatch_parsable slurm sbatch --parsable -J gdone -o gdone-%j.out --wrap 'echo done'
done_id=$(cat "$G/slurm_sbatch_parsable.txt")
rec slurm_sbatch slurm sbatch -J gfail -o gfail-%j.out --wrap 'echo failing; exit 3'
fail_id=$(awk '{print $4}' "$G/slurm_sbatch.txt")
rec slurm_sbatch_error_too_many_nodes slurm sbatch --parsable -N 9 --wrap true

run_id=$(sbatch --parsable -N 2 sleep.sbatch)
wait_state "$run_id" RUNNING
pend_id=$(sbatch --parsable -N "$TB_PODS" --exclusive -J gpending -o /dev/null --wrap 'sleep 1')
wait_state "$pend_id" PENDING
sleep 1.5   # let the scheduler assign a reason
rec slurm_squeue_running slurm squeue -h -o '%i|%T|%r' -j "$run_id"
rec slurm_squeue_pending slurm squeue -h -o '%i|%T|%r' -j "$pend_id"
rec slurm_squeue_table slurm squeue
rec slurm_squeue_fmt_all slurm squeue -h --states=all -o '%i|%j|%T|%r|%M|%l|%D|%N'
rec slurm_scontrol_show_job_running slurm scontrol show job -o "$run_id"
rec slurm_scontrol_show_job_pending slurm scontrol show job -o "$pend_id"
rec slurm_scontrol_show_job_running_multiline slurm scontrol show job "$run_id"

wait_state "$done_id" COMPLETED
wait_state "$fail_id" FAILED
rec slurm_squeue_completed slurm squeue -h --states=all -o '%i|%T|%r' -j "$done_id"
rec slurm_squeue_failed slurm squeue -h --states=all -o '%i|%T|%r' -j "$fail_id"
rec slurm_squeue_completed_default_states slurm squeue -h -o '%i|%T|%r' -j "$done_id"
rec slurm_scontrol_show_job_completed slurm scontrol show job -o "$done_id"
rec slurm_scontrol_show_job_failed slurm scontrol show job -o "$fail_id"

rec slurm_scancel slurm scancel "$run_id"
wait_state "$run_id" CANCELLED
rec slurm_squeue_cancelled slurm squeue -h --states=all -o '%i|%T|%r' -j "$run_id"
rec slurm_scontrol_show_job_cancelled slurm scontrol show job -o "$run_id"
scancel "$pend_id" || true

rec slurm_squeue_unknown slurm squeue -h -o '%i|%T|%r' -j 999999
rec slurm_scontrol_show_job_unknown slurm scontrol show job -o 999999
rec slurm_scancel_unknown slurm scancel 999999

# ------------------------------------------------------------------------------------------- PBS wrapper
cat > wrap.pbs <<'EOF'
#!/bin/bash
#PBS -l nodes=2:ppn=1
#PBS -l walltime=00:10:00
echo "PBS_JOBID=$PBS_JOBID"
cat "$PBS_NODEFILE"
sleep "${GOLDEN_SLEEP:-0}"
EOF
rec pbswrap_qsub pbs qsub -N gpbs -j oe -v GOLDEN_SLEEP=300 wrap.pbs
prun_id=$(cat "$G/pbswrap_qsub.txt")
wait_state "$prun_id" RUNNING
rec pbswrap_qsub_sbatchline pbs qsub --sbatchline -N gpbs -j oe -l select=2:ncpus=1,walltime=00:10:00 wrap.pbs
ppend_id=$(PATH=$PBSP qsub -N gpbsq -j oe -l nodes="$TB_PODS" wrap.pbs)
wait_state "$ppend_id" PENDING
rec pbswrap_qstat_running pbs qstat "$prun_id"
rec pbswrap_qstat_all pbs qstat
rec pbswrap_qstat_f_running pbs qstat -f "$prun_id"
rec pbswrap_qstat_f_queued pbs qstat -f "$ppend_id"
rec pbswrap_qdel pbs qdel "$prun_id"
wait_state "$prun_id" CANCELLED
rec pbswrap_qstat_f_deleted pbs qstat -f "$prun_id"
PATH=$PBSP qdel "$ppend_id" || true
pdone_id=$(PATH=$PBSP qsub -N gpbsdone -j oe wrap.pbs)
wait_state "$pdone_id" COMPLETED
rec pbswrap_qstat_finished pbs qstat "$pdone_id"
rec pbswrap_qstat_f_finished pbs qstat -f "$pdone_id"
cp "gpbsdone.o$pdone_id" "$G/pbswrap_job_output_gpbsdone.txt"
rows+=("| \`pbswrap_job_output_gpbsdone.txt\` | output file \`gpbsdone.o$pdone_id\` of the job above (\`qsub -N gpbsdone -j oe wrap.pbs\`) | - |")
rec pbswrap_qstat_unknown pbs qstat 999999
rec pbswrap_qstat_x_unsupported pbs qstat -x "$pdone_id"
rec pbswrap_qdel_unknown pbs qdel 999999
# NB: with wrap.pbs this would be ACCEPTED as a 2-node job: sbatch applies the script's "#PBS -l nodes=2:ppn=1"
# over the wrapper's command-line -N9. A script without #PBS resource lines shows the real rejection.
printf '#!/bin/bash\necho plain\n' > plain.pbs
rec pbswrap_qsub_error_too_many_nodes pbs qsub -N gbad -j oe -l nodes=9 plain.pbs

# ------------------------------------------------------------------------------------------- Grid Engine
cat > g.sge <<'EOF'
#!/bin/bash
#$ -N gsge
#$ -cwd
#$ -j y
echo "JOB_ID=$JOB_ID NSLOTS=$NSLOTS"
sleep "${GOLDEN_SLEEP:-0}"
exit "${GOLDEN_EXIT:-0}"
EOF
rec sge_qsub sge qsub g.sge
sdone_id=$(awk '{print $3}' "$G/sge_qsub.txt")
rec sge_qsub_terse sge qsub -terse -N gsgefail -v GOLDEN_EXIT=3 g.sge
sfail_id=$(cat "$G/sge_qsub_terse.txt")
srun_id=$(PATH=$SGEP qsub -terse -N gsgerun -pe smp 4 -v GOLDEN_SLEEP=300 g.sge)
wait_sge "$srun_id" r
spend_id=$(PATH=$SGEP qsub -terse -N gsgepend -pe smp 2 g.sge)
stime_id=$(PATH=$SGEP qsub -terse -N gsgetime -l h_rt=00:00:05 -v GOLDEN_SLEEP=300 g.sge)
sleep 2
rec sge_qstat sge qstat
rec sge_qstat_u_all sge qstat -u '*'
rec sge_qstat_running_j sge qstat -j "$srun_id"
rec sge_qstat_pending_j sge qstat -j "$spend_id"
rec sge_qstat_xml sge qstat -xml
rec sge_qdel sge qdel "$srun_id"
wait_sge "$srun_id" gone
wait_sge "$stime_id" gone 60
wait_sge "$spend_id" gone 60
rec sge_qstat_empty sge qstat
for j in "$sdone_id" "$sfail_id" "$srun_id" "$stime_id"; do wait_qacct "$j"; done
rec sge_qacct_done sge qacct -j "$sdone_id"
rec sge_qacct_failed sge qacct -j "$sfail_id"
rec sge_qacct_killed sge qacct -j "$srun_id"
rec sge_qacct_timeout sge qacct -j "$stime_id"
rec sge_qstat_j_finished sge qstat -j "$sdone_id"
rec sge_qacct_unknown sge qacct -j 999999
rec sge_qdel_unknown sge qdel 999999
rec sge_qsub_error_bad_pe sge qsub -pe nosuchpe 2 g.sge

# ------------------------------------------------------------------------------------------- Slurm timeout + sacct
wait_state "$timeout_id" TIMEOUT 150
rec slurm_squeue_timeout slurm squeue -h --states=all -o '%i|%T|%r' -j "$timeout_id"
rec slurm_scontrol_show_job_timeout slurm scontrol show job -o "$timeout_id"
if [[ $(scontrol show config) == *accounting_storage/slurmdbd* ]]; then
  sleep 2   # slurmctld -> slurmdbd is asynchronous
  ids="$done_id,$fail_id,$run_id,$pend_id,$timeout_id"
  rec slurm_sacct_states slurm sacct -n -P -X -j "$ids" -o JobID,JobName,State,ExitCode,Elapsed,NNodes,NodeList
  rec slurm_sacct_steps slurm sacct -n -P -j "$done_id,$fail_id" -o JobID,JobName,State,ExitCode
  rec slurm_sacct_table slurm sacct -X -j "$ids"
  rec slurm_sacct_unknown slurm sacct -n -P -X -j 999999 -o JobID,State
fi

{
  cat <<EOF
# Golden scheduler outputs (REAL, recorded on the testbed)

Recorded by \`testbed/record-golden.sh\` on $(date -u +%Y-%m-%d) against the testbed (Slurm $(sinfo -V | awk '{print $2}')
in $TB_PODS netns pods, Slurm's PBS/Torque Perl wrappers from slurm-wlm-torque, Grid Engine 8.1.9 on host \`$(hostname)\`).
Re-record with \`testbed/record-golden.sh\` (testbed up; ~70 s). Job ids differ on every run.

- In the table a \`\\|\` is a literal \`|\` (Markdown escape); the commands ran in a scratch dir under \`\$HPC_TESTBED_DIR/work\`.
- \`NAME.txt\` is the command's **stdout** exactly; \`NAME.stderr.txt\` its stderr when there was any.
- \`PATH=\$HPC_TESTBED_PBS_BIN:\$PATH\` selects Slurm's PBS wrappers (\`qsub\` prints a bare id, no \`.server\`);
  \`PATH=\$HPC_TESTBED_SGE_BIN:\$PATH\` selects Grid Engine.
- Quirk seen while recording: in-script \`#PBS -l nodes=…\` wins over the wrapper's command-line \`-l nodes=…\`
  (sbatch applies the script's #PBS lines after the \`-N\` the wrapper passes); \`-N\`/\`-j oe\` on the command
  line win over the script (the wrapper passes \`-J\`/\`-o\`). \`pbswrap_qstat_f_queued.txt\` therefore shows nodect 2.
  \`qstat -f\` of a running job prints the *expected end* time as \`ctime\`.
- Job scripts used: \`sleep.sbatch\` (\`sleep 300\`), \`wrap.pbs\` (\`#PBS -l nodes=2:ppn=1\`, walltime 10 min, prints
  PBS_JOBID and the node file, sleeps \$GOLDEN_SLEEP), \`g.sge\` (\`#\$ -N gsge -cwd -j y\`, sleeps \$GOLDEN_SLEEP,
  exits \$GOLDEN_EXIT). Ids in this run: slurm done=$done_id failed=$fail_id running→cancelled=$run_id
  pending→cancelled=$pend_id timeout=$timeout_id; pbs running→deleted=$prun_id queued=$ppend_id finished=$pdone_id;
  sge done=$sdone_id failed(exit 3)=$sfail_id running→qdel=$srun_id pending=$spend_id h_rt-timeout=$stime_id.

| file | exact command | rc |
|---|---|---|
EOF
  printf '%s\n' "${rows[@]}"
} > "$G/README.md"
tb_say "recorded $(find "$G" -name '*.txt' | wc -l) files into $G"
