"""What `envkit profile list|show|diff` were asked, as one typed record (the command line parsed
once, at the edge), and what they show: the facts a profile is resolved against (this machine's or
a recorded snapshot's), the profile the machine gets, and a profile shown with a reason for every
setting."""

from __future__ import annotations

from dataclasses import dataclass

from envkit.checks.recommend import recommend_profile
from envkit.errors import EnvkitError
from envkit.facts import gather
from envkit.facts.model import Facts
from envkit.profiles.resolve import Profile, load_profile
from envkit.profiles.schema import SECTIONS, Section, show_value


@dataclass(frozen=True, kw_only=True)
class ProfileQuery:
    """`envkit profile`'s options, one field per option (commands/profile.py's click parameters, by name)."""

    name: str | None = None  # show's NAME; None or auto: the one this machine gets
    resolved: bool = False  # show --resolved: {facts} and [requires] against this machine
    as_json: bool = False
    replay: str | None = None  # a recorded snapshot (envkit doctor --record) instead of this machine

    @property
    def against_machine(self) -> bool:
        """Values resolved against the facts (--resolved, or any --replay), not shown as declared."""
        return self.resolved or bool(self.replay)

    def facts(self) -> Facts:
        try:
            return gather(self.replay, runtime=False, gpu_detail=bool(self.replay))
        except FileNotFoundError:
            raise EnvkitError("no such snapshot", where=self.replay, fix="ls tests/snapshots/ or record one: envkit doctor --record FILE")


def shown(q: ProfileQuery) -> tuple[Profile, dict]:
    """`profile show`: the profile asked for (or the machine's), loaded against the facts when
    asked, and its dict with the recommendation's warning first."""
    if q.name is None or q.name == "auto":  # the one these facts get, and a warning about the choice (or None)
        facts = q.facts()
        name, warning = recommend_profile(facts)
    else:
        facts = q.facts() if q.against_machine else None
        name, warning = q.name, None
    p = load_profile(name, facts=facts if q.against_machine else None)
    d = p.to_dict()
    if warning:
        d["warnings"] = [warning, *d["warnings"]]
    if q.as_json and not q.against_machine:
        for section in SECTIONS:
            for row in d[section].values():
                row["value"] = row["declared"]
    return p, d


def text_lines(p: Profile, d: dict, against_machine: bool) -> list[str]:
    """`profile show`'s text: the file, its parents, then each setting with its reason and source."""
    lines = [f"{p.name}: {p.description}", f"  file: {p.path} ({p.origin})"]
    if len(p.chain) > 1:
        lines.append(f"  extends: {' -> '.join(p.chain[1:])}")
    if against_machine:
        lines.append(f"  resolved against: {p.facts_source or 'this machine'}")
    for section in SECTIONS:
        if d[section]:
            lines += [f"\n[{section}]", *_setting_lines(section, d[section], against_machine)]
    if against_machine:
        lines += requirement_lines(d["requirements"])
    return lines


def _setting_lines(section: Section, rows: dict, against_machine: bool) -> list[str]:
    width = max(len(k) for k in rows)
    lines = []
    for key, row in rows.items():
        value = row["value"] if against_machine and section != "requires" else row["declared"]
        shown = show_value(value)
        if against_machine and "{" in str(row["declared"]) and section != "requires":
            shown += f"   (declared {show_value(row['declared'])})"
        inherited = f"   [from {row['origin']}]" if row["inherited"] else ""
        lines.append(f"  {key:<{width}} = {shown}{inherited}")
        if row["reason"]:
            lines.append(f"  {'':<{width}}   # {row['reason']}")
        if row["source"]:
            lines.append(f"  {'':<{width}}   # source: {row['source']}")
        if row.get("changed"):
            lines.append(f"  {'':<{width}}   ! {row['changed']}")
    return lines


def requirement_lines(reqs: list[dict]) -> list[str]:
    if not reqs:
        return []
    return ["\nrequirements:", *(f"  {r['key']} {r['spec']}: {r['status']} (machine: {r['actual'] or 'unknown'})"
                                 + (f": {', '.join(r['applied'])} instead" if r.get("applied") else "")
                                 + (f" ({r['note']})" if r.get("note") else "") for r in reqs)]
