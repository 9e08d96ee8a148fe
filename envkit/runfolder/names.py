"""The names of the files in a run folder: the one place they are spelt. Every module that writes
or reads one (the trainer, exec's supervisor, `runs`, `monitor`, `sweep`, Slurm, `reproduce`, and
`envkit.track` in a user's script) names it through here. Plain strings, no imports: this module
sits with the shared helpers below every stage (tests/project/test_layers.py)."""

CONFIG = "config.json"  # what ran: the resolved config (envkit run) or the command (envkit exec)
CONFIG_YAML = "config.yaml"  # the resolved config for people
ENVIRONMENT = "environment.json"  # where it ran (redacted)
SUMMARY = "summary.json"  # how it ended
HEARTBEAT = "heartbeat.json"  # how it goes, rewritten every few seconds
METRICS = "metrics.jsonl"  # one row per logged step
OPENED = "opened.jsonl"  # the files the command opened (envkit/exec/opened.py spells it too: it imports nothing)
DATA = "data.json"  # the data the command read, fingerprinted (envkit/exec/reads.py)
SETTINGS = "settings.json"  # what a script recorded of its own settings (envkit.track.config)
TRAIN_LOG = "train.log"
SUPERVISOR_LOG = "supervisor.log"  # a detached exec run's supervisor (envkit/exec/detach.py)
STALL_PREFIX = "stall-"  # stall-<time>.json: what a stalled exec run printed last, and its stacks
FAULTS = "faults.jsonl"
CHECKPOINTS = "checkpoints"
RECORD = "record.json"  # what it takes to make the run again (record/start.py)
LOCK = "pylock.toml"  # the training interpreter's environment
CODE_DIR = "code"  # patches and untracked files
SEAL = "record.seal"  # whether this machine wrote the record unchanged (seal.py)
PENDING = ".record-pending.json"  # the record being written
REPRODUCTIONS = "reproductions.json"  # each `envkit reproduce` of this run and its outcome
OWNER_LOCK = ".owner.lock"  # held by the process that trains or supervises in the folder (owner.py)
