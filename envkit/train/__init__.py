"""The embedded reference trainer behind `envkit run train.yaml`, in four rooms:

- `run/`: the run itself, inside the trainer's process: models, the step, the loop, the child
  process's entry, distributed setup, checkpoints (envkit/launch/ starts that process).
- `data/`: datasets and token files, the batch order, fetching the next batch ahead.
- `recovery/`: what the trainer survives on its own: out of memory, device faults, NaN guards.
- `watching/`: what a person watches: telemetry and heartbeat, the device sampler, hints, trackers,
  run folders as `runs`/`monitor`/`plot` read them, profiling, MFU.

Imports go one way: run -> data, recovery, watching -> `user_code` (tests/project/test_layers.py checks it).
Modules that import torch do so themselves; importing these packages stays cheap.
"""
