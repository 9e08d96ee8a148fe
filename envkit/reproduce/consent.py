"""What a reproduction will run and build, shown before it does, and the user's yes.

A run folder this machine wrote and can verify unchanged (runfolder/seal.py) reproduces what the
user ran themselves: no question. Any other folder (sent by someone, edited after the run, from an
envkit that did not seal) is someone else's data: its command, its code (the commit and the files
its patch changes, its untracked files), the packages and where they come from, and anything that
would be built from source or installed from a local folder (a build backend runs then) are shown,
and the reproduction goes on only with a yes on a terminal or --yes. Without a terminal and
without --yes it stops, exit 2, having run and built nothing.

Paths a record names are facts about the machine that made the run: one that lies inside the run
folder itself (an interpreter, a code folder, a working directory, a local package, an index) is
never used, trusted folder or not (check.py: `refuse_inside`).

Everything shown comes from the plan (plan.py), every value from the folder escaped."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from envkit.reproduce.plan import Plan, local_index
from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.seal import RESULTS
from envkit.runfolder.shown import shown, shown_argv, shown_list
from envkit.runfolder.snapshot import RunSnapshot



class NeedsConsent(RunFolderError):
    """An unverified run folder, no terminal to ask on and no --yes: nothing was run or built."""


def plan_lines(plan: Plan) -> list[str]:
    """What reproducing the folder runs and builds, one fact a line, every value from the folder
    escaped (runfolder/shown.py) and every list with its full count."""
    rec, out = plan.record, []
    if plan.kind == "exec":
        out.append(f"command: {shown_argv(plan.command)}")
    else:
        out.append("command: envkit run with the run's recorded config" + (f" and profile {shown(rec.profile)}" if rec.profile else ""))
    out.append(f"working directory: {shown(plan.cwd)}")
    if plan.processes > 1:
        out.append(f"processes: {plan.processes}")
    if plan.imports:
        out.append(f"the config's own code, imported and called: {shown_list(plan.imports)}")
    for c in (c for top in plan.code for c in top.all()):
        where = "used where it is (in the recorded state)" if c.in_place else f"checked out in {shown(c.tree)}"
        if c.from_tree:
            where += f" (the commit is gone from the repository; its tree {shown(str(c.state.tree)[:12])} is there)"
        line = f"code ({shown(c.state.role)}): {shown(c.state.folder)} at commit {str(c.state.commit)[:12]}, {where}"
        if c.patch_files:
            line += f"; the run's patch changes {len(c.patch_files)} file(s): {shown_list(c.patch_files)}"
        if c.patch_links:
            line += f"; it makes symbolic links: {shown_list(c.patch_links)}"
        if c.archive_files:
            line += f"; untracked files added: {shown_list(c.archive_files)}"
        if c.state.role == "envkit":
            line += "; put first on PYTHONPATH as envkit itself"
        out.append(line)
    if plan.data:
        linked = [d for d in plan.data if plan.inside(d) is not None]
        out.append(f"data checked before training: {shown_list(plan.data)}"
                   + (f"; linked read-only into the worktree: {shown_list(linked)}" if linked else ""))
    lock = plan.lock
    picks = lock.picks()
    hosts = sorted({urlsplit(p.url).netloc for p in picks if p.url and urlsplit(p.url).scheme in ("http", "https")})
    out.append(f"packages: {len(picks)} from pylock.toml, into {'the venv ' + shown(plan.venv) if plan.venv_given else 'a venv in envkit cache'}"
               + (f", wheels from {shown_list(hosts)}" if hosts else ""))
    if lock.index_urls:
        out.append(f"package indexes pip reads: {shown_list(lock.index_urls)}")
    by_version = [p.name for p in picks if not p.has_file]
    if by_version:
        out.append(f"found by version on the indexes (pip may build one from source, running its build backend): "
                   f"{shown_list(by_version)}")
    local_files = [f"{p.name} ({p.path or p.url})" for p in picks
                   if p.path or (p.url and urlsplit(p.url).scheme not in ("http", "https"))]
    if local_files:
        out.append("wheels from local files: " + shown_list(local_files, 8))
    indexes = [u for u in lock.index_urls if local_index(u)]
    if indexes:
        out.append("local package indexes: " + shown_list(indexes))
    for d in rec.local:
        out.append(f"built and installed from its code (its build backend runs): {shown(d.name)} {shown(d.version or '')} "
                   f"from {shown(d.folder or 'an unnamed place')}".rstrip())
    if plan.env:
        out.append("variables set: " + shown_list(f"{k}={v}" for k, v in sorted(plan.env.items())))
    if plan.other_machine:
        out.append(f"recorded on another machine ({shown_list(plan.other_machine)}): a lock for this machine is made from it")
    facts = ", ".join(f"{k} {shown(v, 60)}" for k, v in sorted(plan.verdict_facts.items()))
    out.append(f"compared against: {plan.steps_compared} logged steps of its metrics.jsonl"
               + (f"; its summary.json says {facts}" if facts else ""))
    return out


def ask(plan: Plan, *, yes: bool, say, interactive: bool | None = None) -> str:
    """Return how the reproduction may go on ("verified" or "accepted"), or raise NeedsConsent.
    A folder verifies when its record and, where the run left them, its results are this machine's."""
    folder = plan.folder
    verdict = folder.trust
    if verdict.trusted and (verdict.results or not _results_present(folder)):
        return "verified"
    why = verdict.why if not verdict.trusted else "its results (summary.json, metrics.jsonl) are not sealed: the run did not end on its own"
    say(f"{shown(folder.path)} is not a run folder this machine wrote unchanged ({why}); reproducing it runs and builds:")
    for line in plan_lines(plan):
        say(f"  {line}")
    if yes:
        say("--yes: going on")
        return "accepted"
    interactive = sys.stdin.isatty() and sys.stderr.isatty() if interactive is None else interactive
    if interactive:
        import click

        if click.confirm("Run and build all of this?", default=False, err=True):
            return "accepted"
        raise NeedsConsent("not reproduced: you said no; nothing was run or built", where=str(folder.path),
                           fix="`envkit reproduce --check` compares without running anything")
    raise NeedsConsent(f"not reproduced: the folder is not one this machine wrote unchanged ({why}), and there is no "
                       "terminal to ask on; nothing was run or built", where=str(folder.path),
                       fix="read what it would run (above, or `envkit reproduce --check`), then run again with --yes")


def _results_present(folder: RunSnapshot) -> bool:
    return any(n in folder.files for n in RESULTS)
