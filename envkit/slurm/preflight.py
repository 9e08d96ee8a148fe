"""`envkit doctor --slurm`: what makes multi-node jobs hang or fail, checked before a job waits in
the queue: Slurm's commands answer, the partition exists with the GPUs asked for, envkit's Python
runs on the compute nodes (a short srun probe), node 0's address resolves and is reachable from
the others and the job's port is free there (the same code the job itself runs: node.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from envkit.checks.verdict import Check
from envkit.errors import EnvkitError
from envkit.slurm import node

GROUP = "Slurm"
COMMANDS = ("sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel")


def _run(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _words(p: subprocess.CompletedProcess | None) -> str:
    if p is None:
        return "no answer (timed out)"
    lines = [ln.strip() for ln in (p.stderr or p.stdout).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {p.returncode}"


def check_commands() -> Check:
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    if absent:
        return Check("slurm-commands", "fail", f"not on PATH: {', '.join(absent)}", group=GROUP,
                     fix="run on the cluster's login node, or `module load slurm`")
    return Check("slurm-commands", "pass", f"{', '.join(COMMANDS)} on PATH", group=GROUP)


def check_controller() -> Check:
    p = _run(["scontrol", "ping"])
    if p is None or p.returncode != 0 or "UP" not in p.stdout:
        return Check("slurmctld", "fail", f"the controller does not answer: {_words(p)}", group=GROUP,
                     fix="check SLURM_CONF and that slurmctld runs (`scontrol ping`); ask the cluster's admins")
    return Check("slurmctld", "pass", p.stdout.strip().splitlines()[0], group=GROUP)


def partitions() -> list[dict]:
    p = _run(["sinfo", "-h", "-o", "%P|%a|%D|%G"])
    out = []
    for line in (p.stdout.splitlines() if p and p.returncode == 0 else []):
        name, avail, nodes, gres = (line.split("|") + ["", "", ""])[:4]
        out.append({"name": name.rstrip("*"), "default": name.endswith("*"), "up": avail == "up",
                    "nodes": int(nodes) if nodes.isdigit() else 0, "gpus": _gpus(gres)})
    return out


def _gpus(gres: str) -> int:
    """`gpu:h100:8(S:0-1)` or `gpu:4` -> 8 / 4; 0 without GPUs."""
    best = 0
    for part in gres.split(","):
        bits = part.split("(")[0].split(":")
        if bits and bits[0] == "gpu" and bits[-1].isdigit():
            best = max(best, int(bits[-1]))
    return best


def check_partition(name: str | None, nodes: int, gpus: int) -> tuple[Check, dict | None]:
    parts = partitions()
    chosen = next((p for p in parts if p["name"] == name), None) if name else next((p for p in parts if p["default"]), None)
    known = ", ".join(p["name"] for p in parts) or "none"
    if chosen is None:
        what = f"partition {name!r} does not exist" if name else "no default partition"
        return Check("partition", "fail", f"{what} (partitions: {known})", group=GROUP,
                     fix="--partition one of those (`sinfo -s` lists them)"), None
    problems = []
    if not chosen["up"]:
        problems.append("it is not up")
    if chosen["nodes"] < nodes:
        problems.append(f"it has {chosen['nodes']} node(s), the job asks {nodes}")
    if gpus and chosen["gpus"] < gpus:
        problems.append(f"its nodes have {chosen['gpus']} GPU(s) each, the job asks {gpus}")
    msg = f"partition {chosen['name']}: {chosen['nodes']} node(s), {chosen['gpus']} GPU(s) per node"
    if problems:
        return Check("partition", "fail", f"{msg}: {'; '.join(problems)}", group=GROUP,
                     fix="another --partition, fewer --nodes or --gpus-per-node"), chosen
    return Check("partition", "pass", msg, group=GROUP), chosen


def probe_nodes(partition: str | None, nodes: int, timeout: float = 120) -> list[Check]:
    """srun one envkit task per node (`envkit slurm-probe`): envkit's Python runs there, node 0's
    address resolves and the nodes meet on the job's port, as a job's nodes will."""
    cmd = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--immediate=60", "--time=5", "--job-name=envkit-probe",
           *([f"--partition={partition}"] if partition else []), sys.executable, "-m", "envkit", "slurm-probe"]
    p = _run(cmd, timeout=timeout)
    reports = []
    for line in (p.stdout.splitlines() if p else []):
        try:
            reports.append(json.loads(line))
        except ValueError:
            continue
    if p is None or p.returncode != 0 or len(reports) < nodes:
        if not reports:
            return [Check("nodes-run-envkit", "fail", f"`srun ... {sys.executable} -m envkit` on {nodes} node(s): {_words(p)}", group=GROUP,
                          fix="put envkit's venv on a filesystem every node mounts (home or a project share, not /tmp); "
                              "a partition with free nodes (--immediate waited 60 s)")]
        bad = [r for r in reports if not r.get("ok")]
        msg = "; ".join(f"node {r.get('node')}: {r.get('error')}" for r in bad) or _words(p)
        return [Check("nodes-run-envkit", "pass", f"envkit runs on {len(reports)} node(s)", group=GROUP),
                Check("rendezvous", "fail", msg, group=GROUP,
                      fix="NodeAddr must be an address every node reaches; open the job's ports between the nodes")]
    hosts = ", ".join(sorted({r["host"] for r in reports}))
    checks = [Check("nodes-run-envkit", "pass", f"envkit's Python ({sys.executable}) runs on {len(reports)} node(s): {hosts}", group=GROUP)]
    r0 = next(r for r in reports if r["node"] == 0)
    if nodes == 1:
        checks.append(Check("rendezvous", "pass", f"one node: address {r0['addr']}, port {r0['port']} free (several nodes: "
                            "--nodes 2 checks that they reach each other)", group=GROUP))
    else:
        checks.append(Check("rendezvous", "pass", f"{nodes} nodes reached node 0 at {r0['addr']}:{r0['port'] + 1}; "
                            f"port {r0['port']} free there", group=GROUP))
    return checks


def run_checks(partition: str | None = None, nodes: int = 1, gpus: int = 0) -> list[Check]:
    checks = [check_commands()]
    if checks[0].status == "fail":
        return checks
    checks.append(check_controller())
    if checks[-1].status == "fail":
        return checks
    part, chosen = check_partition(partition, nodes, gpus)
    checks.append(part)
    if part.status == "fail":
        return checks
    return checks + probe_nodes(partition, nodes)


def probe_main() -> int:
    """Inside `srun` (envkit slurm-probe): one JSON line per node."""
    import os
    import socket

    rank = int(os.environ.get("SLURM_NODEID", "0"))
    nnodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 1)
    report = {"node": rank, "host": socket.gethostname(), "ok": True}
    try:
        report["addr"] = node.node_address(node.first_node())
        report["port"] = node.rendezvous_port(os.environ.get("SLURM_JOB_ID", "0"))
        if rank == 0:
            node.check_port_free(report["port"])
        if nnodes > 1:
            node.meet(report["addr"], report["port"], rank, nnodes, timeout=60)
    except EnvkitError as exc:
        report.update(ok=False, error=exc.message)
    print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1
