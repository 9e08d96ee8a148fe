"""`envkit sweep`: every combination of a config's `sweep.grid` as an ordinary run folder, then a
table per group (mean and std across seeds). A stage after train: it orchestrates `envkit run`'s
parent side (envkit/train/run/launcher.py) and reads what the runs wrote."""
