#!/usr/bin/env bash
# Submits an lpx batch job as an N-task Slurm array plus its merge step.
#   deploy/slurm/submit.sh N INPUT.jsonl OUT MODEL
set -euo pipefail
n=$1 input=$2 out=$3 model=$4
here=$(dirname "$0")
array=$(sbatch --parsable --array=0-$((n - 1)) "$here/lpx-batch-array.sbatch" "$input" "$out" "$model")
sbatch --parsable --dependency=afterany:"${array%%;*}" "$here/lpx-batch-merge.sbatch" "$out" "$n"
