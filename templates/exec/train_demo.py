"""A training script of your own, run by `envkit exec -- python train_demo.py`: it logs its loss
through envkit.track, so the run folder's metrics.jsonl, `envkit runs` and `envkit plot` show it.
Outside `envkit exec`, envkit.track.log does nothing."""

import envkit.track

for step in range(1, 4):
    loss = 1.0 / step
    print(f"step {step} loss {loss:.3f}")
    envkit.track.log(step=step, loss=loss)
