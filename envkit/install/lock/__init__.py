"""Everything about locks, for both formats: pylock.machine.toml (a PEP 751 lock of the one machine
`envkit setup` ran on, single.py, record.py) and pylock.toml (one lock for many machines,
`envkit lock`: targets.py, torch_pick.py, resolve.py, grouping.py, flow.py).

Both are written by one TOML writer (toml.py) and read by one reader (read.py; envkit.lock, the
machine lock's name before, too, in either format: old_format.py). Installing either is one flow
(install.py: select.py picks this machine's part, fetch.py downloads and checks every wheel, with a
private index's credential applied by one rule, credentials.py); drift from either is one check
(drift.py)."""
