"""What a run folder keeps so that the run can be made again (`envkit reproduce`), written once
when the run starts, by `envkit run` (each sweep combination and Slurm job too) and `envkit exec`:

    pylock.toml    the training interpreter's environment as a PEP 751 lock (envlock.py)
    record.json    the code state (code.py), the data identity (data.py), the config with its
                   overrides and derived values, what determinism was asked for (start.py)
    code/          the patch of uncommitted changes and the small untracked source files

One public call, `start.write_run_record`, from each place a run folder is made. A record that
cannot be completed (offline, no git, a data path gone) says what is missing and the run goes on.
`files.py` names the files, for the readers (`envkit reproduce`, `envkit runs`)."""
