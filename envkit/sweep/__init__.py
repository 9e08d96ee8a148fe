"""`envkit sweep`: every combination of a config's `sweep.grid` as an ordinary run folder, then a
table per group (mean and std across seeds). A stage after plan: each combination is planned
by envkit/plan/ and started through `envkit run`'s parent side (envkit/launch/launcher.py); it
reads what the runs wrote."""
