"""The run itself. Read in this order (train.yaml -> a validated Config is envkit/config/):
`launcher` (the parent: given a plan from envkit/plan/, the run's files, the child and its
signals), `torchrun` (the child's command line, one process or torchrun), `child` (the trainer's
process), `loop` (the loop, top to bottom). One training step is four files: `step` (train_step:
forward, backward, clip, step; `LossModule`), `state` (`TrainState`, the step clock,
`TrainResult` -> summary.json), `trainer` (what the step trains with: `Trainer`, built once;
`rewind` moves the data position), `recover` (resume, out-of-memory split, NaN rollback).
Beside them: `evaluate`, `speed` (torch settings, attention backend, compile), `models`, `optim`,
`checkpoint`, `distributed`, `auto_batch`/`batch_probe` (batch_size: auto)."""
