"""`envkit selftest`: prove the device works before anyone trains on it.

    report = run_selftest(device="auto", profile=None, quick=False)
    render_report(report)          # rich table on a terminal, plain lines otherwise
    report.ok, report.to_dict()

The probes (probes.py) run in the target interpreter (the managed env's Python, else this one),
with the profile's environment, in child processes under per-probe timeouts (runner.py). session.py
picks the device and the precision and collects the results (results.py); settings.py picks the
interpreter and the profile. Nothing here imports torch.

Testing hooks (for envkit's own tests, documented in docs/doctor.md):
  ENVKIT_SELFTEST_INJECT="matmul=crash,softmax=hang,layernorm=wrong"  crash|segv|hang|wrong|raise
  ENVKIT_SELFTEST_TIMEOUT_SCALE=0.5      multiply every probe's timeout
  ENVKIT_SELFTEST_TIMEOUTS="softmax=3"   one probe's timeout in seconds
"""

from envkit.selftest.report import render_report
from envkit.selftest.results import ProbeResult, SelftestReport
from envkit.selftest.session import DEVICES, PROBES, resolve_device, resolve_precision, run_selftest

__all__ = ["PROBES", "DEVICES", "ProbeResult", "SelftestReport", "run_selftest", "render_report", "resolve_device",
           "resolve_precision"]
