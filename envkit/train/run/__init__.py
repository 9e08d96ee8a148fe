"""The run itself. Read in this order: `schema` and `config` (train.yaml -> a validated Config),
`launcher` (the parent: run folder, environment, child or torchrun), `child` (the trainer's
process), `loop` (top to bottom: data, model, optimizer, resume, the loop), `step` (forward + loss,
one compiled graph), `models`, `checkpoint`, `distributed`."""
