"""`envkit exec`: the user's own command run inside the managed environment, with a run folder,
a heartbeat from outside the process, restarts and a stall watchdog. A stage after train (it uses
train/watching for the heartbeat and the device sampler) and before bench.

environment.py  which profile, which variables, which interpreter (and who won each variable)
torch_check.py  is the managed env's torch still the build setup installed?
start_files.py  a run's start files: config.json, environment.json and the record
supervise.py    the process: tee to train.log, heartbeat, signals, stall watchdog, restarts
detach.py       --detach and `envkit stop`
"""
