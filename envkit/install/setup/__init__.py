"""The `envkit setup` flow: its inputs (options.py), the install from facts to verified torch
(flow.py), and what it leaves behind (outputs.py: pylock.machine.toml, the managed environment's state
in managed.py, the resolved profile, env scripts). With --lock, the lock stack installs instead."""
