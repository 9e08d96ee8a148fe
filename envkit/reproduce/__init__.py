"""`envkit reproduce RUN_DIR`: make a recorded run again and say whether it came out the same.
`check.py` holds the run's record (record/) against what is here now (`--check`); `venv.py` builds
a fresh venv from the run's pylock.toml; `restore.py` puts the code back; `rerun.py` trains again
beside the original; `metrics.py` compares the two step by step; `verdict.py` says what "the same"
means and judges; `session.py` runs it all and records the outcome in the original run folder."""
