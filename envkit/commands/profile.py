"""`envkit profile list|show|diff`."""

from __future__ import annotations

import click

from envkit.checks.recommend import recommend_profile
from envkit.console import console, is_tty, print_json
from envkit.profiles import diff_profiles, list_profiles, load_profile, show_value
from envkit.profiles.query import ProfileQuery, shown, text_lines

REPLAY = click.option("--replay", "replay", type=click.Path(dir_okay=False),
                      help="Resolve against a recorded snapshot (envkit doctor --record) instead of this machine.")


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
    q = ProfileQuery(as_json=as_json, replay=replay)
    rec, warning = recommend_profile(q.facts())
    infos = list_profiles()
    if q.as_json:
        print_json({"recommended": rec, "warning": warning,
                    "profiles": [{**i.to_dict(), "recommended": i.name == rec} for i in infos]})
        return
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
    q = ProfileQuery(name=name, resolved=resolved, as_json=as_json, replay=replay)
    p, d = shown(q)
    if q.as_json:
        print_json(d)
        return
    for line in text_lines(p, d, q.against_machine):
        click.echo(line)
    for w in d["warnings"]:
        click.echo(f"warning: {w}", err=True)


@profile.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print the differences as JSON.")
@REPLAY
def diff(a: str, b: str, as_json: bool, replay: str | None) -> None:
    """The settings where profiles A and B differ (values resolved against this machine or --replay)."""
    q = ProfileQuery(as_json=as_json, replay=replay)
    facts = q.facts()
    pa, pb = load_profile(a, facts=facts), load_profile(b, facts=facts)
    rows = diff_profiles(pa, pb)
    if q.as_json:
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
