"""What the trainer survives on its own: `faults` (out of memory -> split the micro-batch, a device
fault -> restart on a fallback device, and the ENVKIT_TRAIN_INJECT hook that tests use), `guards`
(a non-finite loss -> roll back or stop; an unusable device -> refuse or fall back)."""
