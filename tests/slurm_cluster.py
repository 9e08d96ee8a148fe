"""A real Slurm cluster for the tests: Debian's slurm-wlm and munge, started as root in a temporary
folder (no /etc/slurm, no systemd). One node runs slurmd on this machine; two nodes run one slurmd
each in a network namespace of its own (10.77.N.2 behind a bridge), so a rendezvous between them
really crosses hosts. Everything is stopped by PID at the end and nothing outside the folder (and the
namespaces, removed again) is touched.

    with SlurmCluster(tmp_path, nodes=2) as c:
        subprocess.run(["sbatch", ...], env=c.env)

Why each setting (slurm.conf(5)): proctrack/linuxproc and task/none need no cgroup hierarchy;
SlurmdParameters=config_overrides lets two slurmd on one machine each declare its CPUs;
MinJobAge keeps finished jobs in `scontrol show job`/`squeue --states=all` (no accounting
database here, so `sacct` does not answer: envkit falls back to them and the heartbeat)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

MUNGE_KEY = Path("/etc/munge/munge.key")
NEEDED = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel")


def missing() -> str | None:
    """Why a cluster cannot start here (None when it can)."""
    absent = [t for t in NEEDED if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if absent:
        return f"Slurm/munge not installed ({', '.join(absent)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "a test Slurm cluster runs its daemons as root"
    if not MUNGE_KEY.is_file():
        return f"{MUNGE_KEY} missing (the munge package makes it)"
    return None


def missing_netns() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2's `ip` is missing: two test nodes need network namespaces"
    # a name of this process's own: a probe left by a killed test run must not make this one skip
    name = f"envkit-probe-{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _name_servers() -> list[str]:
    """The IPv4 name servers of /etc/resolv.conf (a namespace shares the file)."""
    try:
        lines = Path("/etc/resolv.conf").read_text().splitlines()
    except OSError:
        return []
    found = [line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1]
    # once each: a second `ip route add` of the same address fails ("File exists") and the cluster with it
    return list(dict.fromkeys(a for a in found if a.count(".") == 3 and all(part.isdigit() for part in a.split("."))))


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    def __init__(self, folder: Path, nodes: int = 1, cpus: int | None = None):
        self.dir = Path(folder) / "slurm"
        # Unix sockets (munge's, slurmstepd's in the spool folder) must have paths under 108 bytes
        self.short = Path(tempfile.mkdtemp(prefix="eks-", dir="/tmp"))
        self.nodes = nodes
        self.cpus = cpus or max(2, os.cpu_count() or 2)
        tag = f"{os.getpid() % 10000}{int(time.time() * 1000) % 1000}"
        self.names = ["envkit-c"] if nodes == 1 else [f"ek{tag}n{i}" for i in range(nodes)]
        self.netns = [] if nodes == 1 else list(self.names)
        self.bridge = f"ekb{tag}"[:15]
        self.procs: list[subprocess.Popen] = []
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # ------------------------------------------------------------------ set-up

    def node_addr(self, i: int) -> str:
        return "127.0.0.1" if self.nodes == 1 else f"10.77.{i + 1}.2"

    @property
    def ctl_addr(self) -> str:
        return "127.0.0.1" if self.nodes == 1 else "10.77.0.1"

    def _write_conf(self) -> None:
        d = self.dir
        for sub in ("state", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for n in self.names:
            (self.short / f"spool-{n}").mkdir(parents=True, exist_ok=True)
        host = socket.gethostname()
        nodes = "\n".join(f"NodeName={n} NodeAddr={self.node_addr(i)} NodeHostname={n} CPUs={self.cpus} "
                          f"Sockets=1 CoresPerSocket={self.cpus} ThreadsPerCore=1 State=UNKNOWN"
                          for i, n in enumerate(self.names))
        self.conf.write_text(f"""\
ClusterName=envkit-test
SlurmctldHost={host}({self.ctl_addr})
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.short / "munge.sock"}
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation={d / "state"}
SlurmdSpoolDir={self.short}/spool-%n
SlurmctldPidFile={d / "slurmctld.pid"}
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d / "log" / "slurmctld.log"}
SlurmdLogFile={d}/log/slurmd-%n.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=20
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _netns(self) -> None:
        def run(*a):
            subprocess.run(a, check=True, capture_output=True)

        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", "10.77.0.1/16", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i, ns in enumerate(self.netns):
            a, b = f"{ns}a"[:15], f"{ns}b"[:15]
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            run("ip", "link", "set", a, "master", self.bridge)
            run("ip", "link", "set", a, "up")
            run("ip", "link", "set", b, "netns", ns)
            run("ip", "-n", ns, "addr", "add", f"{self.node_addr(i)}/16", "dev", b)
            run("ip", "-n", ns, "link", "set", b, "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", ns, "route", "add", "default", "via", "10.77.0.1")
            for server in _name_servers():
                # A name lookup from a node (c10d asks for each peer's host name) fails at once, as where
                # the names resolve nowhere, instead of after the resolver's timeouts: the default route
                # led to this machine's name server, which a namespace's packets never reach, and each
                # lookup waited 2 x 5 s (30 s of the two-node job's start).
                run("ip", "-n", ns, "route", "add", "unreachable", f"{server}/32")

    def _start(self, cmd: list[str], name: str, ns: str | None = None) -> subprocess.Popen:
        if ns:  # nsenter, not `ip netns exec`: that one mounts a fresh /sys without the cgroup tree slurmd reads
            cmd = ["nsenter", f"--net=/run/netns/{ns}", *cmd]
        log = open(self.dir / "log" / f"{name}.out", "ab")
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self, timeout: float = 60) -> "SlurmCluster":
        self._write_conf()
        if self.netns:
            self._netns()
        d = self.dir
        self._start([_sbin("munged"), "-F", "--force", f"--socket={self.short / 'munge.sock'}", f"--key-file={MUNGE_KEY}",
                     f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'log' / 'munged.log'}",
                     f"--seed-file={d / 'munged.seed'}"], "munged")
        self._wait(lambda: (self.short / "munge.sock").exists(), 15, "munged did not start")
        self.start_ctld()
        for i, n in enumerate(self.names):
            self._start([_sbin("slurmd"), "-D", "-N", n, "-f", str(self.conf)], f"slurmd-{n}", self.netns[i] if self.netns else None)
        self._wait(self._nodes_idle, timeout, "the nodes did not become idle")
        return self

    def start_ctld(self) -> None:
        self.ctld = self._start([_sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(lambda: self.scontrol("ping").returncode == 0 and "UP" in self.scontrol("ping").stdout, 30,
                   "slurmctld did not answer")

    def stop_ctld(self) -> None:
        self.ctld.send_signal(signal.SIGTERM)
        try:
            self.ctld.wait(20)
        except subprocess.TimeoutExpired:
            self.ctld.kill()
            self.ctld.wait()

    def _nodes_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True).stdout.split()
        return out.count("idle") == self.nodes

    def _wait(self, ok, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if ok():
                    return
            except OSError:
                pass
            for p in self.procs:
                if p.poll() is not None:
                    break
            time.sleep(0.2)
        logs = "\n".join(f"--- {f.name}\n{f.read_text()[-2000:]}" for f in sorted((self.dir / "log").glob("*")) if f.is_file())
        self.stop()
        raise RuntimeError(f"test Slurm cluster: {what} within {timeout:.0f} s\n{logs}")

    # ------------------------------------------------------------------ use

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True)

    def job(self, job_id: str) -> dict:
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...)."""
        out = self.scontrol("show", "job", "-o", str(job_id)).stdout
        fields = {}
        for tok in out.split():
            if "=" in tok:
                k, v = tok.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def wait_job(self, job_id: str, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"),
                 timeout: float = 600) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            j = self.job(job_id)
            if j.get("JobState") in states:
                return j
            if "launch_failed" in j.get("Reason", ""):  # Slurm holds it: it would wait forever
                raise RuntimeError(f"job {job_id} could not start: {j.get('Reason')} (logs in {self.dir / 'log'})")
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} not in {states} within {timeout:.0f} s: {self.job(job_id)}")

    def job_pids(self, job_id: str) -> list[int]:
        """Every process of the job on this machine: those whose environment holds its SLURM_JOB_ID
        (slurmstepd sets it for the batch step and every task; `scontrol listpids` would need the
        node's own name as the host name)."""
        mark = f"SLURM_JOB_ID={job_id}".encode()
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if mark in fh.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                continue
        return pids

    def release_requeued(self, job_id: str, restarts: int = 1, timeout: float = 300) -> None:
        """Slurm holds a requeued job back for about two minutes (its BeginTime): an admin's
        `scontrol update StartTime=now` (its begin time) lets it start at once, so the tests need not wait."""
        end, seen = time.monotonic() + timeout, None
        while time.monotonic() < end:
            j = self.job(job_id)
            # Released once no process of the first attempt is left (other jobs may keep the node
            # busy), and 2 s after the requeue: slurmd revokes the first attempt's credential at the
            # requeue and compares times in whole seconds, so a second attempt launched within the same
            # second is killed ("Killing non-startable batch JobId=N: Job credential revoked" in
            # slurmctld.log), which Slurm's own two-minute BeginTime never meets.
            if int(j.get("Restarts", 0)) >= restarts and j.get("JobState") == "PENDING":
                seen = seen or time.monotonic()
                # an array task's processes carry its own JobId (SLURM_JOB_ID), not "ARRAY_TASK"
                if time.monotonic() - seen >= 2.0 and not self.job_pids(j.get("JobId", job_id)):
                    self.scontrol("update", f"JobId={job_id}", "StartTime=now")
                    return
            if j.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED"):
                return
            time.sleep(0.3)

    # ------------------------------------------------------------------ tear-down

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if self.netns:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        shutil.rmtree(self.short, ignore_errors=True)
        self.procs.clear()

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
