"""One task per node (`envkit slurm-node RECORD`, started by srun): find node 0's address and the
job's port, check that every node reaches node 0 before torchrun waits on it, then become the
same `envkit run`/`envkit exec` as on one machine, with the rendezvous options filled in.

Why these choices (the commonest ways multi-node jobs hang, from pytorch, accelerate and Lightning
issue trackers):
- The address is Slurm's NodeAddr for the first node of SLURM_JOB_NODELIST (`scontrol show node`),
  resolved here: a node's hostname may not resolve on the other nodes, and `localhost` never works.
- Ranks follow SLURM_NODEID with torchrun's static rendezvous, so node 0 is global rank 0 (the
  one that writes the run folder); c10d orders nodes by their address string instead.
- The port comes from the job id (two jobs sharing a node do not collide) and is checked free.
- GLOO_SOCKET_IFNAME, unless set, names the interface that reaches node 0: gloo otherwise binds
  to whatever the hostname resolves to, which on many clusters is not the interconnect."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.slurm.batch import this_task
from envkit.slurm.submit import read_record

PORT_BASE, PORT_SPAN = 15000, 15000  # below Linux's ephemeral range (32768-60999)
PROBE_TIMEOUT = float(os.environ.get("ENVKIT_SLURM_PROBE_TIMEOUT", "180"))


def rendezvous_port(job_id: str) -> int:
    digits = "".join(ch for ch in job_id if ch.isdigit()) or "0"
    return PORT_BASE + (int(digits) * 2) % PORT_SPAN  # even: the pre-flight probe takes port + 1


def scontrol(*args: str) -> str:
    out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise EnvkitError(f"scontrol {' '.join(args)}: {(out.stderr or out.stdout).strip()}", where="slurm",
                          fix="`envkit doctor --slurm` checks that Slurm's commands answer from the nodes")
    return out.stdout


def first_node() -> str:
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST", "")
    names = scontrol("show", "hostnames", nodelist).split()
    if not names:
        raise EnvkitError(f"no node names in SLURM_JOB_NODELIST={nodelist!r}", where="slurm", fix="run inside a Slurm job")
    return names[0]


def node_address(name: str) -> str:
    """NodeAddr (what slurmctld itself uses to reach the node), resolved to an IP address here."""
    fields = dict(tok.split("=", 1) for tok in scontrol("show", "node", "-o", name).split() if "=" in tok)
    addr = fields.get("NodeAddr") or name
    try:
        return str(socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])  # AF_INET: (host, port), host a str
    except socket.gaierror as exc:
        raise EnvkitError(f"node 0 ({name}) has address {addr!r}, which does not resolve on {socket.gethostname()}: {exc}",
                          where="slurm", fix="the cluster's NodeAddr should be an IP address or a name every node resolves") from None


def interface_towards(addr: str) -> str | None:
    """The network interface this node uses to reach addr (Linux), or None."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((addr, 9))  # UDP: nothing is sent; the kernel picks the route and source address
        local = s.getsockname()[0]
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(packed[20:24]) == local:
                return name
    return None


def check_port_free(port: int) -> None:
    for p in (port, port + 1):
        with socket.socket() as s:
            try:
                s.bind(("", p))
            except OSError as exc:
                raise EnvkitError(f"port {p} on node 0 ({socket.gethostname()}) is taken: {exc.strerror}", where="slurm",
                                  fix="another job or service holds it; resubmit (the port follows the job id)") from None


def meet(addr: str, port: int, node_rank: int, nnodes: int, timeout: float = PROBE_TIMEOUT) -> None:
    """Every node reaches node 0 before torchrun starts (which would otherwise wait 15 minutes on a
    wrong address): node 0 listens on port + 1 until every other node has said hello, then answers
    each one; a node that cannot connect says so in one line."""
    probe = port + 1
    deadline = time.monotonic() + timeout
    if node_rank == 0:
        with socket.socket() as srv:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("", probe))
            srv.listen(nnodes)
            seen, conns = set(), []
            while len(seen) < nnodes - 1:
                srv.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    missing = sorted(set(range(1, nnodes)) - seen)
                    raise EnvkitError(f"node(s) {missing} did not reach node 0 at {addr}:{probe} within {timeout:.0f} s",
                                      where="slurm", fix="a firewall between the nodes, or NodeAddr not on the network they share: "
                                      "`envkit doctor --slurm` checks it") from None
                conn.settimeout(30)
                seen.add(int(conn.recv(16).decode().strip() or 0))
                conns.append(conn)
            for conn in conns:
                conn.sendall(b"go\n")
                conn.close()
        return
    last = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, probe), timeout=5) as c:
                c.sendall(f"{node_rank}\n".encode())
                c.settimeout(max(1.0, deadline - time.monotonic()))
                if c.recv(8).startswith(b"go"):
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise EnvkitError(f"node {node_rank} ({socket.gethostname()}) cannot reach node 0 at {addr}:{probe}: {last}", where="slurm",
                      fix="check that the nodes share a network on that address (`envkit doctor --slurm`)")


def command_for_this_node(record: dict, env: dict) -> list[str]:
    task = this_task(record)
    argv = list(task["argv"])
    nnodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    if nnodes > 1:
        node_rank = int(env["SLURM_NODEID"])
        job = env.get("SLURM_JOB_ID", "0")
        addr = node_address(first_node())
        port = rendezvous_port(job)
        if node_rank == 0:
            check_port_free(port)
        meet(addr, port, node_rank, nnodes)
        argv += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--rdzv-endpoint", f"{addr}:{port}",
                 "--rdzv-id", f"slurm-{job}"]
        if "GLOO_SOCKET_IFNAME" not in env:
            iface = interface_towards(addr)
            if iface:
                os.environ["GLOO_SOCKET_IFNAME"] = iface
    return argv


def main(record_path: str) -> int:
    record = read_record(Path(record_path))
    py = record.get("python") or sys.executable
    if not Path(py).exists():
        raise EnvkitError(f"envkit's Python {py} is not visible on {socket.gethostname()}", where="slurm",
                          fix="put the venv on a filesystem every node mounts (home or a project share, not /tmp)")
    argv = command_for_this_node(record, dict(os.environ))
    os.chdir(record["cwd"])
    node = os.environ.get("SLURM_NODEID", "0")
    print(f"envkit slurm: node {node} ({socket.gethostname()}): envkit {' '.join(argv[:2])} ...", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "envkit", *argv])
    return 0  # not reached
