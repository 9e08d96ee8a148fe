"""`envkit run`, `envkit validate`: the reference trainer's commands.

Nothing here imports torch: validation and --print-config read the YAML and doctor's facts;
training happens in a child process (envkit/train/run/launcher.py)."""

from __future__ import annotations

import json
import re
import sys

import click

from envkit.slurm.options import slurm_options

from envkit.errors import EnvkitError

def _print_config(cfg, as_json: bool) -> None:
    from envkit.train.run.config import render_rows

    if as_json:
        click.echo(json.dumps({"config": cfg.to_dict(), "origin": {k: o for k, _, o in cfg.rows()},
                               "profile": cfg.profile, "config_hash": cfg.config_hash()}, indent=2, default=str))
        return
    click.echo(f"# resolved config from {cfg.source} (profile: {cfg.profile or 'none'}); origin after '#'")
    for line in render_rows(cfg):
        click.echo(line)


_common = [
    click.argument("config", type=click.Path(dir_okay=False), required=False, default="train.yaml"),
    click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a value, e.g. --set training.lr=1e-4 (repeatable)."),
    click.option("--profile", "profile", help="Take defaults from this profile (default: the managed env's, else recommended)."),
]


def common(fn):
    for deco in reversed(_common):
        fn = deco(fn)
    return fn


@click.command()
@common
@click.option("--replay", type=click.Path(dir_okay=False), help="Hold the config against a recorded machine (doctor snapshot).")
@click.option("--json", "as_json", is_flag=True, help="Print the resolved config as JSON.")
def validate(config, overrides, profile, replay, as_json):
    """Check a train.yaml without running it: schema, types, ranges, paths, and the device and
    precision against this machine (or --replay SNAPSHOT). Exit 0 valid, 2 invalid."""
    from envkit.train.run.launcher import absolutise_paths, hold_against_machine, plan

    p = plan(config, overrides=overrides, profile_name=profile, replay=replay)
    absolutise_paths(p.cfg)
    warnings = hold_against_machine(p.cfg, p.facts)
    if as_json:
        _print_config(p.cfg, True)
        return
    for w in [*(p.notes or []), *warnings] + ([p.profile_note] if p.profile_note else []):
        click.echo(f"warning: {w}", err=True)
    c = p.cfg.values
    click.echo(f"{config}: valid ({c['model']['type']} on {c['dataset']['type']}"
               + (f"/{c['dataset']['task']}" if c['dataset']['type'] == 'synthetic' else "")
               + (f", {c['training']['epochs']} epochs" if c['training']['epochs'] else f", {c['training']['max_steps']} steps") + f", device {c['device']['type']}, precision {c['training']['precision']}, "
               f"profile {p.cfg.profile or 'none'})")


@click.command()
@common
@click.option("--run-id", help="Name of the run folder runs/<experiment>/<run-id>/ (resumed if it exists).")
@click.option("--resume", default="auto", show_default=True, metavar="auto|never|CHECKPOINT",
              help="auto: continue the newest unfinished run with the same config (refused, one line naming its PID, "
                   "while another process still trains it); never: always a new run.")
@click.option("--stop-after", type=click.IntRange(min=1), help="Stop cleanly after this step (checkpoint written); run again to resume.")
@click.option("--print-config", is_flag=True, help="Show the resolved config with each value's origin, then exit.")
@click.option("--json", "as_json", is_flag=True, help="With --print-config: JSON. Otherwise print summary.json at the end.")
@click.option("--selftest", is_flag=True, help="Run the quick self-test on the device first.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=1, show_default=True, help="Processes (GPUs) via torchrun, DDP.")
@click.option("--python", "python", help="Train with this interpreter (default: the managed env's, else this one).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True, help="Machines taking part (torchrun rendezvous).")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, help="This machine's rank; node 0 writes the run folder.")
@click.option("--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous address, on node 0 (needed with --nnodes > 1).")
@click.option("--rdzv-backend", default="static", show_default=True, help="torchrun's rendezvous backend (static keeps global rank 0 on node 0; c10d).")
@click.option("--rdzv-id", help="Rendezvous id shared by all nodes (default: the run id).")
@click.option("--profile-steps", "profile_steps", metavar="A:B",
              help="Record optimizer steps A to B with torch.profiler: a Chrome trace (profile_steps_A-B.json) in the run folder.")
@slurm_options
@click.pass_context
def run(ctx, config, overrides, profile, run_id, resume, stop_after, print_config, as_json, selftest, nproc_per_node, python,
        nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, profile_steps, **slurm_kw):
    """Train from a train.yaml with the embedded reference trainer.

    Writes runs/<experiment>/<run-id>/ (config, environment.json, metrics.jsonl, heartbeat.json,
    train.log, checkpoints/, summary.json). Exit 0 done, 1 training failed, 2 bad config.

    One process trains in a run folder: while one does, a second `envkit run` that would resume it
    (--resume auto or its --run-id) refuses, naming the PID and how to watch or stop it, rather than
    starting a new run; the trainer dies with `envkit run`, even on SIGKILL.

    With --slurm the run is submitted to a Slurm cluster instead (sbatch), into the same run
    folder: it checkpoints before the time limit or a preemption and requeues itself."""
    from envkit.slurm.options import check as check_slurm, pop_request
    from envkit.train.run import launcher

    slurm = pop_request(slurm_kw)
    debug = bool((ctx.obj or {}).get("debug"))
    window = launcher.parse_profile_steps(profile_steps)
    if run_id is not None:
        launcher.check_run_id(run_id)  # before anything else is said or done
    p = launcher.plan(config, overrides=overrides, profile_name=profile, python=python)
    launcher.absolutise_paths(p.cfg)
    launcher.experiment_dir(p.cfg)  # experiment.name is one folder inside the runs folder
    if print_config:
        _print_config(p.cfg, as_json)
        return
    if slurm is not None:  # the login node is not the machine that trains: the nodes hold the config against themselves
        from envkit.slurm.jobs import announce, run_job

        check_slurm(slurm, nnodes=nnodes)
        announce(run_job(p, p.cfg.source, overrides=overrides, profile=profile, python=python, run_id=run_id, resume=resume,
                         nproc=nproc_per_node, stop_after=stop_after, req=slurm), as_json)
        return
    warnings = launcher.hold_against_machine(p.cfg, p.facts)
    for w in [*(p.notes or []), *warnings] + ([p.profile_note] if p.profile_note else []):
        click.echo(f"warning: {w}", err=True)
    if p.managed is None and not python:
        click.echo(f"note: no `envkit setup` environment here: training with {sys.executable} "
                   "(`envkit setup` makes a managed one with the profile's torch)", err=True)
    if nproc_per_node > 1 and p.cfg.values["device"]["type"] == "mps":
        # One Apple GPU per machine, and neither gloo nor nccl carries MPS tensors (accelerate docs).
        raise EnvkitError(f"--nproc-per-node {nproc_per_node} cannot train on MPS: it is one device and gloo/nccl do not work with it",
                          where="device.type", fix="drop --nproc-per-node (CUDA uses NCCL, the CPU gloo)")
    nodes = _nodes(nnodes, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, run_id)
    from envkit.train.run.sharding import config_problem

    if problem := config_problem(p.cfg.values, nproc_per_node * nodes.nnodes):
        raise EnvkitError(problem[0], where=launcher._where(p.cfg, "training.parallel"), fix=problem[1])
    if nodes.nnodes > 1 and p.cfg.values["device"]["type"] == "mps":
        raise EnvkitError("--nnodes cannot train on MPS: gloo/nccl do not carry MPS tensors", where="device.type",
                          fix="CUDA machines use NCCL, CPUs gloo")
    run_id = run_id or (nodes.rdzv_id if nodes.nnodes > 1 else None)  # every node names the same run
    if selftest:
        _selftest(p)
    run_dir, resuming, note = launcher.choose_run_dir(p.cfg, run_id, resume)
    if note:
        click.echo(note, err=True)
    env = launcher.child_environ(p.profile, nproc_per_node)
    if resuming:
        saved = launcher.read_json(run_dir / "config.json") or {}
        if saved.get("config_hash") != p.cfg.config_hash():
            raise EnvkitError(f"run {run_dir.name} was started with a different config (hash {saved.get('config_hash')})",
                              where=str(run_dir), fix="restore that config, use another --run-id, or --resume never")
    _decide_auto_batch(p, launcher, resuming, saved if resuming else {}, nproc_per_node, nodes.nnodes)
    child_dir = run_dir
    owner = None
    if nodes.node_rank == 0:
        from envkit.fsutil import take_owner_lock

        if resuming:  # a folder whose owner died without a summary: say so in it before resuming
            from envkit.train.watching.runs_state import notice_killed, owner_lock_state

            if owner_lock_state(run_dir) == "free":
                notice_killed(run_dir, "envkit run")  # nothing when its summary is the newest word
        owner = take_owner_lock(run_dir, "envkit run")  # one process trains in a run folder; released when it dies
        launcher.write_run_files(p, run_dir, env)
    else:
        child_dir = launcher.stage_for_node(p, run_dir, nodes.node_rank)
    cmd = launcher.child_command(p.python, child_dir, stop_after=stop_after, resume=resume if resume not in ("auto",) else "auto",
                                 nproc=nproc_per_node, debug=debug, nodes=nodes,
                                 profile_steps=window)
    click.echo(f"{'resuming' if resuming else 'starting'} run {run_dir}", err=True)
    rc = launcher.launch(cmd, env, owner, stdout=sys.stderr if as_json else None)  # --json: stdout holds the JSON alone
    if nodes.node_rank > 0:
        import shutil

        shutil.rmtree(child_dir, ignore_errors=True)
        click.echo(f"node {nodes.node_rank}: training process exited with code {rc}; node 0 holds the run folder", err=True)
        raise SystemExit(0 if rc == 0 else 1)
    summary = launcher.read_json(run_dir / "summary.json")
    if as_json and summary:
        click.echo(json.dumps(summary, indent=2, default=str))
    if rc == 2:
        sys.exit(2)
    if rc != 0 and rc != 130 and (not summary or summary.get("status") in (None, "running")):
        # The child died without its own last word (a segfault, "Abort trap: 6", an OOM kill).
        if rc < 0:
            import signal as _signal

            try:
                how = f"was killed by {_signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        else:
            how = f"exited with code {rc}"
        click.echo(f"envkit: error: the training process {how} before finishing; its log is {run_dir / 'train.log'} "
                   f"(fix: run `envkit selftest` for the device, and `envkit run` again to resume from the last checkpoint)", err=True)
    if rc != 0:
        raise SystemExit(1 if rc not in (130,) else 130)


def _decide_auto_batch(p, launcher, resuming: bool, saved: dict, nproc: int, nnodes: int) -> None:
    """training.batch_size: auto -> a number, probed on this machine before the run (or, on resume,
    the number the run started with); said in one line before the run starts."""
    from envkit.train.run import auto_batch

    if not auto_batch.is_auto(p.cfg):
        return
    if resuming and auto_batch.keep_resumed(p.cfg, saved):
        click.echo(f"training.batch_size {p.cfg.values['training']['batch_size']}: decided by the probe when this run started", err=True)
        return
    if nnodes > 1:  # each machine would probe on its own and could decide differently
        raise EnvkitError("training.batch_size auto is decided per machine; with --nnodes every node needs the same number",
                          where=launcher._where(p.cfg, "training.batch_size"),
                          fix="run `envkit run` once on one node to see the probed batch, then --set training.batch_size=N on every node")
    choice = auto_batch.resolve(p.cfg, python=p.python, env=launcher.child_environ(p.profile, 1), child_entry=launcher.child_entry(),
                                torch_settings=dict(getattr(p.profile, "torch", {}) or {}) if p.profile else None,
                                world=nproc * nnodes, echo=lambda m: click.echo(m, err=True))
    click.echo(choice.note, err=True)


def _nodes(nnodes, node_rank, endpoint, backend, rdzv_id, run_id):
    from envkit.train.run.launcher import Nodes

    if nnodes > 1 and not endpoint:
        raise EnvkitError(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address, the same on every node)",
                          where="--rdzv-endpoint", fix="e.g. --rdzv-endpoint 10.0.0.1:29500")
    if node_rank >= nnodes:
        raise EnvkitError(f"--node-rank {node_rank} is not below --nnodes {nnodes}", where="--node-rank", fix=f"0 .. {nnodes - 1}")
    if endpoint and not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", endpoint):
        raise EnvkitError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT", where="--rdzv-endpoint", fix="e.g. 10.0.0.1:29500")
    return Nodes(nnodes, node_rank, endpoint, backend, rdzv_id or run_id)


def _selftest(p) -> None:
    from envkit.selftest import render_report, run_selftest

    dev = p.cfg.values["device"]["type"]
    report = run_selftest(python=p.python, device=dev if dev in ("mps", "cuda", "cpu") else "auto", profile=p.cfg.profile, quick=True)
    render_report(report, echo=lambda line: click.echo(line, err=True))  # stdout is --json's, or the trainer's
    if not getattr(report, "ok", False):
        raise EnvkitError("the self-test failed on this device; not training", where="--selftest",
                          fix="see the report above; `envkit doctor` and `envkit selftest` explain each failure")
