#!/bin/bash
# Slurm TaskProlog installed by hpc-launch testbed/up.sh as /etc/slurm/hpc-testbed-pbs-taskprolog.sh.
# Slurm adds every "export NAME=VALUE" line this prints to the task's environment; we use that to give jobs
# submitted through Slurm's qsub wrapper the environment a PBS job has (PBS_JOBID, PBS_NODEFILE, ...).
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
nodefile=@NODEFILE_DIR@/pbs_nodefile.$SLURM_JOB_ID
# PBS node file: one line per task slot (nodes=3:ppn=2 -> a a b b c c). Written only by the batch step
# (SLURM_STEP_ID unset there): srun steps carry their own SLURM_TASKS_PER_NODE and would clobber it.
# Always rewritten, because job ids start over when the controller state is wiped.
if [ -z "${SLURM_STEP_ID:-}" ] || [ "${SLURM_STEP_ID:-}" = batch ]; then
  mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  idx=0
  IFS=, read -ra groups <<< "${SLURM_TASKS_PER_NODE:-1}"
  {
    for g in "${groups[@]}"; do
      if [[ $g =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then per=${BASH_REMATCH[1]}; reps=${BASH_REMATCH[2]}
      else per=$g; reps=1; fi
      for ((r = 0; r < reps; r++)); do
        for ((k = 0; k < per; k++)); do printf '%s\n' "${hosts[$idx]}"; done
        idx=$((idx + 1))
      done
    done
  } > "$nodefile.tmp.$$" && mv -f "$nodefile.tmp.$$" "$nodefile"
fi
echo "export PBS_JOBID=$SLURM_JOB_ID"
echo "export PBS_JOBNAME=$SLURM_JOB_NAME"
echo "export PBS_NODEFILE=$nodefile"
echo "export PBS_O_WORKDIR=$SLURM_SUBMIT_DIR"
echo "export PBS_O_HOST=$SLURM_SUBMIT_HOST"
echo "export PBS_QUEUE=$SLURM_JOB_PARTITION"
echo "export PBS_O_QUEUE=$SLURM_JOB_PARTITION"
echo "export PBS_NUM_NODES=${SLURM_JOB_NUM_NODES:-1}"
echo "export PBS_NP=${SLURM_NTASKS:-1}"
echo "export PBS_ENVIRONMENT=PBS_BATCH"
