"""`envkit reproduce RUN_DIR`: make a recorded run again and say whether it came out the same.
`check.py` holds the run's record (record/) against what is here now (`--check`); `venv.py` builds
a fresh venv from the run's pylock.toml, or from the lock `elsewhere.py` makes for this machine when
the run was recorded on another kind of machine; `restore.py` puts the code back; `local.py`
installs the run's local and editable distributions again from that code; `rerun.py` trains again
beside the original; `metrics.py` compares the two step by step; `verdict.py` says what "the same"
means and judges; `session.py` runs it all and records the outcome in the original run folder."""
