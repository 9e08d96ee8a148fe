"""The run itself, in the trainer's process (train.yaml -> a validated Config is envkit/config/;
the parent that starts this process, its command line and its signals are envkit/launch/). Read
in this order: `child` (the trainer's process), `loop` (the loop, top to bottom). One training
step is four files: `step` (train_step: forward, backward, clip, step; `LossModule`), `state` (`TrainState`, the step clock,
`TrainResult` -> summary.json), `trainer` (what the step trains with: `Trainer`, frozen, built
whole and resumed by `build`; `rewind` moves the data position), `recover` (out-of-memory split,
NaN rollback). `checkpointer` is the one door to checkpoints (save, resume, roll back, retention;
its backends `checkpoint` and `sharded_checkpoint`). Beside them: `evaluate`, `speed` (torch
settings, attention backend, compile), `models`, `optim`, `distributed`, `batch_probe` (one
probing step for batch_size: auto, which envkit/launch/auto_batch.py decides), `stopping` and
`parent_watch` (how the trainer stops)."""
