"""`--slurm`: the same run, exec or sweep submitted to a Slurm cluster (options.py: what the user
asks for; script.py: the sbatch file; submit.py: sbatch and the job record; batch.py: the job's
own step, which passes signals on and requeues; node.py: one task per node, which starts envkit
there with torchrun's rendezvous at the first node; cancel.py: `envkit stop`; preflight.py:
`envkit doctor --slurm`). `envkit runs` reads a run's job through runfolder/slurm_state.py."""
