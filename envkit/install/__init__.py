"""Installing PyTorch: `envkit setup` (and `--lock`), `envkit lock`, `envkit check --lock`.

index/    reading package indexes
  pages.py          PEP 691 JSON / PEP 503 HTML pages, file:// indexes, folders of wheels
  pip_config.py     the sources pip itself is configured with (pip.conf, PIP_* variables)
  sources.py        the one order setup and lock look in (PyTorch's index, else pip's sources),
                    and offline, not there and found-elsewhere, each said as such
choice/   which torch build, and which exact versions of it
  model.py          Request (--torch), Choice (build, index, limits), where each build lives
  variants.py       the build this machine needs (Mac, CPU, AMD/Intel), from its facts
  cuda.py           the CUDA build an NVIDIA machine's driver and GPU run
  resolve.py        a request to exact wheels, read off the index (pip's sources when it is down)
act/      plan, execute, roll back
  interp.py         Interpreter: the Python installed into (its wheel tags, its distributions)
  plan.py           what setup will do, computed before anything happens (pure)
  execute.py        run the installer, fetch wheels into envkit's cache, verify torch
  apply.py          create the venv, install and verify, rolled back on failure or Ctrl-C
  rollback.py       put an environment back exactly as it was (hard links)
setup/    the `envkit setup` flow
  flow.py           facts -> profile -> build -> versions -> plan -> install -> outputs
  options.py        setup's inputs, checked before anything touches the disk
  outputs.py        what setup leaves: pylock.machine.toml, state, the resolved profile, env scripts
  managed.py        the managed environment (.envkit/state.json) other commands find
lock/     both lock formats, pylock.machine.toml (one machine) and pylock.toml (many), PEP 751 both
  model.py          the data: Wheel, Locked, TargetLock, Pick
  toml.py           the one TOML writer
  read.py           the one reader (any name, any age: envkit.lock, the old name, too)
  old_format.py     envkit.lock as written before (lock_version = 1), read into today's shape
  single.py         pylock.machine.toml's shape: a pylock of the machine setup ran on
  record.py         pylock.machine.toml from a setup: the installed set and each wheel's URL and sha256
  index_hashes.py   sha256s from the index where the installer reports none (uv)
  machine.py        the machine a lock was made on, and how this one differs
  select.py         this machine's part of a lock
  credentials.py    the one rule by which a private index's credential reaches a lock's fetches
  fetch.py          a lock's wheels, downloaded and checked against its sizes and sha256s
  install.py        the one install-from-lock flow (`envkit setup --lock`)
  drift.py          the one drift check (`envkit check --lock`)
  project.py        the project beside a lock, and what an environment holds for it (not drift)
  targets.py        the machines `envkit lock` writes for (platform + build)
  torch_pick.py     one public torch (and companions) for every target
  resolve.py        each target's closure: wheel metadata, uv for the rest
  grouping.py       the targets' closures as one pylock.toml (markers, dependency groups)
  flow.py           `envkit lock` as one function
  convert.py        `envkit lock --from pylock.machine.toml`
"""
