"""What a person watches while a run trains and after: `telemetry` (log, progress, heartbeat,
metrics.jsonl), `device_sampler` (GPU/CPU figures from outside the step), `watch` (the sampler,
hints and trackers together), `diagnose` (hints from the numbers), `trackers` (tensorboard,
wandb), run folders for `runs`, `monitor`, `plot`: `folder_status` (a run's status, from the run
folder's files as envkit/runfolder/ reads them) and `curves`, `run_end` (how
`envkit run` ends for the shell), `profiling` and `trace_breakdown` (`--profile-steps`), `mfu`
(model FLOPs utilisation)."""
