"""Resolving a profile: merge its chain, evaluate fact expressions, check [requires]."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.profiles.expr import ExprError, fmt_number, has_template, names_in, render_value
from envkit.profiles.files import Setting, ProfileFile, ProfileOrigin, all_profile_names, profile_candidates, parse_profile_file, safe_resolve
from envkit.profiles.schema import FACT_FALLBACKS, NAME_RE, SCHEMA, SECTIONS, NULLABLE, coerce_setting, did_you_mean, show_plain

@dataclass
class Profile:
    name: str
    description: str
    path: Path
    origin: ProfileOrigin
    chain: list[str]  # this profile first, then its parents up to base
    settings: dict[str, dict[str, Setting]]  # merged, as declared
    env: dict[str, str] = field(default_factory=dict)
    torch: dict = field(default_factory=dict)
    dataloader: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    requires: dict = field(default_factory=dict)
    requirement_status: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changed: dict[tuple[str, str], str] = field(default_factory=dict)  # (section, key) -> why the value differs from the declared one
    facts_source: str | None = None

    def section(self, name: str) -> dict:
        return getattr(self, name)

    def child_environ(self, base: dict | None = None) -> dict[str, str]:
        """What a child process (trainer, selftest) gets: os.environ (or `base`) plus the profile's
        variables where the user did not export them: an exported value wins, as in `envkit exec`
        (a Slurm job's `OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK`, a shared machine's limit).
        environment.json names the variables the user's value won (`user_env`)."""
        env = dict(os.environ if base is None else base)
        for name, value in self.env.items():
            if not env.get(name):
                env[name] = str(value)
        return env

    def user_kept(self, base: dict | None = None) -> dict[str, str]:
        """The profile's variables the user exported with another value: {name: the user's value}."""
        env = os.environ if base is None else base
        return {n: env[n] for n, v in self.env.items() if env.get(n) and env[n] != str(v)}

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "name": self.name, "description": self.description, "path": str(self.path), "origin": self.origin,
            "extends": self.chain[1] if len(self.chain) > 1 else None, "chain": self.chain,
            "facts": self.facts_source,
        }
        for section in SECTIONS:
            values = self.section(section)
            rows = {}
            for key, s in self.settings.get(section, {}).items():
                row = {"value": values.get(key, s.value), "declared": s.value, "reason": s.reason, "source": s.source,
                       "origin": s.origin, "inherited": s.origin != self.name}
                if (section, key) in self.changed:
                    row["changed"] = self.changed[(section, key)]
                rows[key] = row
            out[section] = rows
        out["requirements"] = self.requirement_status
        out["warnings"] = self.warnings
        return out


_LIVE_FACTS: list = []


def _live_facts():
    if not _LIVE_FACTS:
        try:
            from envkit.facts import gather

            _LIVE_FACTS.append(gather(runtime=False, gpu_detail=False))
        except Exception:  # facts are best effort here: fall back to fixed values with a warning
            _LIVE_FACTS.append(None)
    return _LIVE_FACTS[0]


def _load_chain(name: str) -> list[ProfileFile]:
    """The profile and its parents, child first. Same-name `extends` reaches the next folder down."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise EnvkitError(f"not a profile name: {name!r}", where=str(name), fix="envkit profile list")
    chain: list[ProfileFile] = []
    seen: list[str] = []
    cands = profile_candidates(name)
    if not cands:
        names = all_profile_names()
        raise EnvkitError(f"unknown profile{did_you_mean(name, names)}", where=name, fix="envkit profile list")
    current = parse_profile_file(name, cands[0][1], cands[0][0])
    while True:
        key = str(safe_resolve(current.path))
        if key in seen:
            cycle = " -> ".join([*(f.name for f in chain), current.name])
            raise EnvkitError(f"extends forms a cycle: {cycle}", where=str(current.path),
                              fix="make one of these profiles extend base (or nothing)")
        seen.append(key)
        chain.append(current)
        parent = current.extends
        if not parent:
            return chain
        pc = profile_candidates(parent)
        if parent == current.name:  # extend the next one of the same name down the search order
            paths = [str(safe_resolve(p)) for _, p in pc]
            idx = paths.index(key) + 1 if key in paths else len(pc)
            pc = pc[idx:]
        if not pc:
            names = all_profile_names()
            raise EnvkitError(f"extends unknown profile {parent!r}{did_you_mean(parent, names)}", where=str(current.path),
                              fix="envkit profile list shows the names")
        current = parse_profile_file(parent, pc[0][1], pc[0][0])
        if len(chain) > 32:
            raise EnvkitError("extends chain is longer than 32 profiles", where=str(current.path))


def load_profile(name: str, facts=None) -> Profile:
    """The profile `name` with its parents merged and its values resolved against `facts`
    (an envkit.facts.Facts; None: this machine's facts, detected only if a value needs them)."""
    chain = _load_chain(name)
    merged: dict[str, dict[str, Setting]] = {s: {} for s in SECTIONS}
    for f in reversed(chain):
        for section in SECTIONS:
            merged[section].update(f.settings.get(section, {}))
    top = chain[0]
    description = next((f.description for f in chain if f.description), "")
    p = Profile(top.name, description, top.path, top.origin, [f.name for f in chain], merged)

    for section, fields in SCHEMA.items():
        missing = [k for k in fields if k not in merged[section]]
        if missing:
            raise EnvkitError(f"[{section}] lacks {', '.join(missing)} after inheritance", where=str(top.path),
                              fix='extend "base" (directly or through another profile), which defines every setting')

    needs_facts = bool(merged["requires"]) or any(has_template(s.value) for sec in merged.values() for s in sec.values())
    if facts is None and needs_facts:
        facts = _live_facts()
    p.facts_source = getattr(facts, "source", None) if facts is not None else None
    values = _fact_values(facts, p)

    for section in SECTIONS:
        if section == "requires":
            continue
        out = {}
        for key, s in merged[section].items():
            where = f"{s.path}: [{section}] {key}"
            try:
                v = render_value(s.value, values)
            except ExprError as exc:
                raise EnvkitError(str(exc), where=where, fix="use {fact} names from `envkit profile show --help`")
            if section == "env":
                v = fmt_number(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                if not isinstance(v, str):
                    raise EnvkitError(f"an environment value must be text, not {v!r}", where=where)
            else:
                v = coerce_setting(section, key, v, where)
            out[key] = v
        setattr(p, section, out)
    p.requires = {k: s.value for k, s in merged["requires"].items()}
    _check_requirements(p, facts)
    _normalise_dataloader(p)
    return p


def _fact_values(facts, p: Profile) -> dict[str, Any]:
    raw = facts.template_values() if facts is not None else {}
    values: dict[str, Any] = {}
    used = set()
    for sec in p.settings.values():
        for s in sec.values():
            used |= names_in(s.value)
    for n in set(raw) | set(FACT_FALLBACKS):
        v = raw.get(n)
        if v is None:
            v = FACT_FALLBACKS.get(n)
            if n in used and v is not None:
                where = "the replayed machine" if facts is not None and facts.source != "live" else "this machine"
                p.warnings.append(f"{n} is unknown on {where}: using {v}")
        values[n] = v
    return values


def _actual(key: str, facts) -> str | None:
    if facts is None:
        return None
    if key == "macos":
        return facts.os.version if facts.is_macos else None
    if key == "torch":
        return facts.torch.base_version
    if key == "python":
        return facts.python.version
    if key == "compute_capability":
        ccs = [g.compute_capability for g in facts.nvidia_gpus if g.compute_capability]
        if not ccs:
            return None
        from packaging.version import Version

        from envkit.checks.gates import V

        return str(min(ccs, key=lambda c: V(c) or Version("0")))
    return None


def _check_requirements(p: Profile, facts) -> None:
    from packaging.specifiers import SpecifierSet
    from envkit.checks.gates import V

    for key, s in p.settings["requires"].items():
        actual = _actual(key, facts)
        row = {"key": key, "spec": s.value, "actual": actual, "reason": s.reason, "source": s.source, "origin": s.origin}
        av = V(actual)
        if av is None:
            row["status"] = "unknown"
            label = "a Mac" if key == "macos" else key
            row["note"] = f"cannot check {key} {s.value} here (not {label})" if key == "macos" else f"{key} unknown: not checked"
        elif SpecifierSet(s.value, prereleases=True).contains(av, prereleases=True):
            row["status"] = "met"
        else:
            row["status"] = "unmet"
            applied = []
            for section, table in (s.otherwise or {}).items():
                for k, v in table.items():
                    where = f"{s.path}: [requires] {key} otherwise {section}.{k}"
                    v = coerce_setting(section, k, v, where) if section in SCHEMA else str(v)
                    old = p.section(section).get(k)
                    p.section(section)[k] = v
                    p.changed[(section, k)] = f"requires {key} {s.value}, the machine has {actual}: {old} -> {v}"
                    applied.append(f"{section}.{k} = {show_plain(v)}")
            row["applied"] = applied
            what = f": {', '.join(applied)} instead" if applied else ""
            p.warnings.append(f"{p.name} requires {key} {s.value} ({s.reason or 'see the profile'}) but the machine has {actual}{what}")
        p.requirement_status.append(row)


def _normalise_dataloader(p: Profile) -> None:
    dl = p.dataloader
    if dl.get("num_workers") != 0:
        return
    for key, off in (("persistent_workers", False), ("prefetch_factor", None)):
        if dl.get(key) not in (off, None):
            p.changed[("dataloader", key)] = f"num_workers is 0: torch rejects {key} without workers"
            p.warnings.append(f"dataloader.{key} = {show_plain(dl[key])} needs num_workers > 0: using {show_plain(off)}")
            dl[key] = off


def diff_profiles(a: Profile, b: Profile) -> list[dict]:
    """Settings whose resolved value differs (or exists in one only)."""
    rows = []
    for section in SECTIONS:
        va, vb = a.section(section), b.section(section)
        for key in sorted(set(va) | set(vb)):
            x, y = va.get(key, NULLABLE), vb.get(key, NULLABLE)
            if x != y or type(x) is not type(y):
                sa, sb = a.settings[section].get(key), b.settings[section].get(key)
                rows.append({"section": section, "key": key,
                             "a": None if x is NULLABLE else x, "b": None if y is NULLABLE else y,
                             "a_missing": x is NULLABLE, "b_missing": y is NULLABLE,
                             "a_reason": sa.reason if sa else "", "b_reason": sb.reason if sb else ""})
    return rows
