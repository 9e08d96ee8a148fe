"""The parent side of a run (no torch here): what envkit's own process does to start a planned
run and see it to its end. Above envkit/plan/ (it takes a `Plan`) and below the commands that
use it (`run`, `sweep`, `exec`, `bench`); the trainer's process itself is envkit/train/.

    launcher.py    a Plan's run: its files, the batch decided, the child started, signals passed on
    torchrun.py    the child's command line: one process, or torchrun with the rendezvous
    spawn.py       a child that dies with envkit's process (PR_SET_PDEATHSIG and a pipe)
    auto_batch.py  training.batch_size: auto, probed in child processes and chosen
"""
