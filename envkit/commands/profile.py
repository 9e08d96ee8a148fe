"""`envkit profile list|show|diff`."""

from __future__ import annotations

import click

from envkit.errors import EnvkitError

REPLAY = click.option("--replay", "replay", type=click.Path(dir_okay=False),
                      help="Resolve against a recorded snapshot (envkit doctor --record) instead of this machine.")


def _facts(replay: str | None):
    from envkit.facts import gather

    try:
        return gather(replay, runtime=False, gpu_detail=bool(replay))
    except FileNotFoundError:
        raise EnvkitError("no such snapshot", where=replay, fix="ls tests/snapshots/ or record one: envkit doctor --record FILE")


def _recommended(facts) -> tuple[str, str | None]:
    from envkit.checks.recommend import recommend_profile

    return recommend_profile(facts)


def _resolve_name(name: str | None, facts) -> tuple[str, str | None]:
    if name in (None, "auto"):
        return _recommended(facts)
    return name, None


@click.group()
def profile() -> None:
    """List, show and compare the tuned profiles.

    Profiles are TOML files found in ./profiles (this project), the user folder
    (ENVKIT_CONFIG_DIR/profiles or click's app dir, e.g. ~/.config/envkit/profiles) and the ones
    shipped with envkit, in that order: the first file of a name wins.
    """


@profile.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@REPLAY
def list_cmd(as_json: bool, replay: str | None) -> None:
    """Every profile, what it is for, and which one this machine (or the snapshot) gets."""
    from envkit.profiles import list_profiles

    facts = _facts(replay)
    rec, warning = _recommended(facts)
    infos = list_profiles()
    if as_json:
        from envkit.console import print_json

        print_json({"recommended": rec, "warning": warning,
                    "profiles": [{**i.to_dict(), "recommended": i.name == rec} for i in infos]})
        return
    from envkit.console import console, is_tty

    if is_tty():
        from rich.table import Table

        t = Table(box=None, pad_edge=False)
        t.add_column(" ")
        t.add_column("profile", style="bold")
        t.add_column("for")
        t.add_column("from", style="dim")
        for i in infos:
            mark = "[magenta]→[/]" if i.name == rec else ""
            t.add_row(mark, i.name, i.description, i.origin if not i.overrides else f"{i.origin} (overrides {len(i.overrides)})")
        c = console()
        c.print(t)
        c.print(f"\n→ this machine gets [bold magenta]{rec}[/]" + (f"  [yellow]({warning})[/]" if warning else ""))
    else:
        width = max(len(i.name) for i in infos) if infos else 10
        for i in infos:
            mark = "*" if i.name == rec else " "
            origin = "" if i.origin == "shipped" else f"  [{i.origin}: {i.path}]"
            click.echo(f"{mark} {i.name:<{width}}  {i.description}{origin}")
        click.echo(f"\n* this machine gets {rec}" + (f" (warning: {warning})" if warning else ""))


@profile.command("show")
@click.argument("name", required=False)
@click.option("--resolved", is_flag=True, help="Resolve {facts} and [requires] against this machine (or --replay).")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON (values, reasons, sources, origins).")
@REPLAY
def show(name: str | None, resolved: bool, as_json: bool, replay: str | None) -> None:
    """Show profile NAME (default: the one this machine gets) with a reason for every setting.

    Values inherited from a parent profile are marked with the parent's name.
    """
    from envkit.profiles import SECTIONS, load_profile, show_value

    facts = _facts(replay) if (replay or resolved or name in (None, "auto")) else None
    name, warning = _resolve_name(name, facts)
    p = load_profile(name, facts=facts if (resolved or replay) else None)
    d = p.to_dict()
    if warning:
        d["warnings"] = [warning, *d["warnings"]]
    if as_json:
        from envkit.console import print_json

        if not (resolved or replay):
            for section in SECTIONS:
                for row in d[section].values():
                    row["value"] = row["declared"]
        print_json(d)
        return
    click.echo(f"{p.name}: {p.description}")
    click.echo(f"  file: {p.path} ({p.origin})")
    if len(p.chain) > 1:
        click.echo(f"  extends: {' -> '.join(p.chain[1:])}")
    if resolved or replay:
        click.echo(f"  resolved against: {p.facts_source or 'this machine'}")
    for section in SECTIONS:
        rows = d[section]
        if not rows:
            continue
        click.echo(f"\n[{section}]")
        width = max(len(k) for k in rows)
        for key, row in rows.items():
            if section == "requires":
                value = row["declared"]
            else:
                value = row["value"] if (resolved or replay) else row["declared"]
            shown = show_value(value)
            if (resolved or replay) and "{" in str(row["declared"]) and section != "requires":
                shown += f"   (declared {show_value(row['declared'])})"
            inherited = f"   [from {row['origin']}]" if row["inherited"] else ""
            click.echo(f"  {key:<{width}} = {shown}{inherited}")
            if row["reason"]:
                click.echo(f"  {'':<{width}}   # {row['reason']}")
            if row["source"]:
                click.echo(f"  {'':<{width}}   # source: {row['source']}")
            if row.get("changed"):
                click.echo(f"  {'':<{width}}   ! {row['changed']}")
    if resolved or replay:
        _show_requirements(d["requirements"])
    for w in d["warnings"]:
        click.echo(f"warning: {w}", err=True)


def _show_requirements(reqs: list[dict]) -> None:
    if reqs:
        click.echo("\nrequirements:")
        for r in reqs:
            actual = r["actual"] or "unknown"
            click.echo(f"  {r['key']} {r['spec']}: {r['status']} (machine: {actual})"
                       + (f": {', '.join(r['applied'])} instead" if r.get("applied") else "")
                       + (f" ({r['note']})" if r.get("note") else ""))


@profile.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@REPLAY
def diff(a: str, b: str, as_json: bool, replay: str | None) -> None:
    """The settings where profiles A and B differ (values resolved against this machine or --replay)."""
    from envkit.profiles import diff_profiles, load_profile, show_value

    facts = _facts(replay)
    pa, pb = load_profile(a, facts=facts), load_profile(b, facts=facts)
    rows = diff_profiles(pa, pb)
    if as_json:
        from envkit.console import print_json

        print_json({"a": pa.name, "b": pb.name, "facts": pa.facts_source, "differences": rows})
        return
    if not rows:
        click.echo(f"{pa.name} and {pb.name} resolve to the same settings")
        return
    wk = max(len(f"{r['section']}.{r['key']}") for r in rows)
    wa = max(len(pa.name), *(len("-" if r["a_missing"] else show_value(r["a"])) for r in rows))
    click.echo(f"{'setting':<{wk}}  {pa.name:<{wa}}  {pb.name}")
    for r in rows:
        va = "-" if r["a_missing"] else show_value(r["a"])
        vb = "-" if r["b_missing"] else show_value(r["b"])
        click.echo(f"{r['section'] + '.' + r['key']:<{wk}}  {va:<{wa}}  {vb}")
