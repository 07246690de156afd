"""The slurm backend: an allocation held (allocation), its client commands (commands), each task a job step (node),
the run around it (run), and the batch script for `sbatch` users (sbatch_script)."""
