# For pyright alone (stubPath "typings", its default): the self-test's probe files import
# envkit/selftest/probe_kit.py under the name `envkit_probe_kit` (probes.py loads it by path in the
# child interpreter, where envkit is not importable), so that name is that module.
from envkit.selftest.probe_kit import *  # noqa: F403 - the probe kit's every public name, as the probe files see it
