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
never used, trusted folder or not (`refuse_inside`)."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

from envkit.runfolder.bounded import RunFolderError
from envkit.runfolder.folder import RunFolder
from envkit.runfolder import names
from envkit.runfolder.records import RunRecord

_FIX_INSIDE = "a record names paths of the machine that made the run; this one points into the folder it came in"


class NeedsConsent(RunFolderError):
    """An unverified run folder, no terminal to ask on and no --yes: nothing was run or built."""


def _local_index(url: str) -> Path | None:
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        return Path(parts.path or url)
    return None


def refuse_inside(folder: RunFolder, rec: RunRecord, lock=None) -> None:
    """One line, exit 2, where the record or lock names a path inside the run folder as something
    to run, import, build or work in."""
    named = [(names.RECORD, "python", rec.python), (names.RECORD, "cwd", rec.cwd)]
    named += [(names.RECORD, f"code folder ({c.role})", c.folder) for top in rec.code for c in top.all()]
    named += [(names.RECORD, f"environment.local[{i}].folder ({d.name})", d.folder) for i, d in enumerate(rec.local)]
    if lock is not None:
        named += [("pylock.toml", "index", str(_local_index(u))) for u in lock.index_urls if _local_index(u) is not None]
        named += [("pylock.toml", f"packages ({p.name}) path", p.path) for p in lock.picks() if p.path]
    for file, key, value in named:
        if value and folder.contains(value):
            raise RunFolderError(f"{key} is {value}, inside the run folder itself: envkit never runs, imports or builds "
                                 "what a run folder carries", where=str(folder.file(file)), fix=_FIX_INSIDE)


def _patch_files(folder: RunFolder, patch: str | None) -> list[str]:
    if not patch:
        return []
    try:
        text = folder.file(patch).read_bytes()[: 16 << 20].decode(errors="replace")
    except OSError:
        return ["(its patch cannot be read)"]
    return sorted({line[len("diff --git a/"):].split(" b/", 1)[0] for line in text.splitlines() if line.startswith("diff --git a/")})


def plan_lines(folder: RunFolder, rec: RunRecord, lock) -> list[str]:
    """What reproducing the folder runs and builds, one fact a line."""
    import shlex

    out = []
    if rec.kind == "exec":
        out.append(f"command: {shlex.join(rec.command)}")
    else:
        out.append("command: envkit run with the run's recorded config" + (f" and profile {rec.profile}" if rec.profile else ""))
    out.append(f"working directory: {rec.cwd or folder.path.parent}")
    for c in (c for top in rec.code for c in top.all()):
        if not c.commit:
            continue
        changed = _patch_files(folder, c.patch)
        out.append(f"code ({c.role}): {c.folder} at commit {c.commit[:12]}"
                   + (f", with the run's changes to {len(changed)} file(s): {', '.join(changed[:8])}"
                      + (" ..." if len(changed) > 8 else "") if changed else "")
                   + (f"; untracked files added: {', '.join(c.untracked[:8])}" + (" ..." if len(c.untracked) > 8 else "")
                      if c.untracked_archive else "")
                   + ("; put first on PYTHONPATH as envkit itself" if c.role == "envkit" else ""))
    if lock is not None:
        picks = lock.picks()
        hosts = sorted({urlsplit(p.url).netloc for p in picks if p.url and urlsplit(p.url).scheme in ("http", "https")})
        out.append(f"packages: {len(picks)} from pylock.toml" + (f", wheels from {', '.join(hosts)}" if hosts else ""))
        by_version = [p.name for p in picks if not p.has_file]
        if by_version:
            out.append(f"found by version on the indexes (pip may build one from source, running its build backend): "
                       f"{', '.join(by_version[:12])}" + (" ..." if len(by_version) > 12 else ""))
        local_files = [f"{p.name} ({p.path or p.url})" for p in picks
                       if p.path or (p.url and urlsplit(p.url).scheme not in ("http", "https"))]
        if local_files:
            out.append("wheels from local files: " + ", ".join(local_files[:8]))
        indexes = [u for u in lock.index_urls if _local_index(u) is not None]
        if indexes:
            out.append("local package indexes: " + ", ".join(indexes))
    for d in rec.local:
        out.append(f"built and installed from its code (its build backend runs): {d.name} {d.version or ''} "
                   f"from {d.folder or 'an unnamed place'}".rstrip())
    return out


def ask(folder: RunFolder, rec: RunRecord, lock, *, yes: bool, say, interactive: bool | None = None) -> str:
    """Return how the reproduction may go on ("verified" or "accepted"), or raise NeedsConsent."""
    verdict = folder.trust
    if verdict.trusted:
        return "verified"
    lines = plan_lines(folder, rec, lock)
    say(f"{folder.path} is not a run folder this machine wrote unchanged ({verdict.why}); reproducing it runs and builds:")
    for line in lines:
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
    raise NeedsConsent(f"not reproduced: the folder is not one this machine wrote unchanged ({verdict.why}), and there is no "
                       "terminal to ask on; nothing was run or built", where=str(folder.path),
                       fix="read what it would run (above, or `envkit reproduce --check`), then run again with --yes")
