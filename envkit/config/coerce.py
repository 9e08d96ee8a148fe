"""Reading train.yaml's text into values: the YAML file, `--set a.b=v`, and each value checked (and,
from --set text, converted) against its schema Field. Every failure is one EnvkitError naming the
file or flag and the key. No torch."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.config.kinds import did_you_mean
from envkit.config.schema import SCHEMA, Field
from envkit.resources import data_file, load_toml


def read_yaml(path: str | Path) -> dict:
    """The file as a dict; every failure is one EnvkitError naming the file (and line/column)."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise EnvkitError("file not found", where=str(path), fix="`envkit init train.yaml` writes a ready one")
    if p.is_dir():
        raise EnvkitError("is a folder, not a YAML file", where=str(path))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvkitError(f"cannot read: {exc}", where=str(path))
    try:
        data = safe_load_bounded(text, str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        loc = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise EnvkitError(f"YAML syntax error: {problem}", where=loc,
                          fix="check indentation and colons on that line (`envkit init` shows a valid layout)")
    if data is None:
        raise EnvkitError("the file is empty", where=str(path),
                          fix="`envkit init train.yaml` writes a ready config (sections: experiment, dataset, model, training, device)")
    if not isinstance(data, dict):
        raise EnvkitError(f"expected a mapping of sections (experiment, dataset, model, training, ...), got a {type(data).__name__}",
                          where=str(path), fix="`envkit init train.yaml` shows the layout")
    return data


MAX_YAML_NODES = 100_000  # a train.yaml has hundreds; an alias bomb of depth 7 expands to tens of millions


def safe_load_bounded(text: str, where: str):
    """yaml.safe_load, after counting the nodes the document holds once its aliases are expanded:
    aliases cost nothing to load (they share one object) but every copy, hash and config.json write
    expands them, so a 1 KB "billion laughs" file would take gigabytes. Counted on the composed node
    graph, each node's expanded size once (memoised), so the bomb is measured without being built."""
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return None
    sizes: dict[int, int] = {}

    def size(node, depth: int = 0) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > 200:  # absurd nesting: no config is this deep (and Python's stack is not endless)
            raise EnvkitError("YAML nesting is deeper than 200 levels", where=where,
                              fix="write the values out instead of aliasing them")
        sizes[id(node)] = MAX_YAML_NODES + 1  # while counting: a node that refers to itself is too big
        children = node.value if isinstance(node.value, list) else []  # a mapping's are (key, value) pairs
        total = 1
        for child in (n for c in children for n in (c if isinstance(c, tuple) else (c,))):
            total += size(child, depth + 1)
            if total > MAX_YAML_NODES:
                break
        sizes[id(node)] = total
        return total

    if size(root) > MAX_YAML_NODES:
        raise EnvkitError(f"the YAML expands to more than {MAX_YAML_NODES:,} values once its aliases (*name) are "
                          "expanded: refused before anything is built (an alias bomb takes gigabytes)", where=where,
                          fix="write the values out, or alias fewer times")
    return yaml.safe_load(text)


_ALIASES: dict[str, str] | None = None


def aliases() -> dict[str, str]:
    """The names users bring from nanoGPT, Hugging Face and Lightning -> the envkit key each means
    (envkit/data/config_aliases.toml, with where each comes from)."""
    global _ALIASES
    if _ALIASES is None:
        _ALIASES = dict(load_toml(data_file("config_aliases.toml"))["aliases"])
    return _ALIASES


def meant(key: str, section: str | None) -> str | None:
    """The section.key a user most likely meant by an unknown `key` (in `section`, or at the top
    level): a known alias in the same section, the same key in another section, a close spelling in
    the section, then an alias elsewhere."""
    alias = aliases().get(key)
    if alias and section and alias.startswith(f"{section}."):
        return alias
    homes = [s for s in SCHEMA if key in SCHEMA[s]]
    if len(homes) == 1:
        return f"{homes[0]}.{key}"
    close = difflib.get_close_matches(key, sorted(SCHEMA[section]), n=1, cutoff=0.6) if section in SCHEMA else []
    if close:
        return f"{section}.{close[0]}"
    return alias


def unknown_key(section: str, key: str, where: str, from_set: bool, what: str | None = None) -> EnvkitError:
    """One line for a key train.yaml does not have (`section` "" for a bare name: a top-level key of
    the YAML, or `--set NAME=...`), with what was meant and how to write it."""
    if what is None:
        what = (f"unknown key '{key}' in section '{section}'" if section in SCHEMA else f"unknown section '{section}'" if section
                else f"'{key}' is not a section.key path" if from_set else f"unknown section '{key}'")
    misspelt = did_you_mean(section, SCHEMA) if section and section not in SCHEMA else ""
    target = None if misspelt else meant(key, section or None)
    if target is None:
        fix = f"valid keys: {', '.join(SCHEMA[section])}" if section in SCHEMA else f"sections: {', '.join(SCHEMA)}"
        return EnvkitError(what + misspelt, where=where, fix=fix)
    tsection, tkey = target.split(".")
    if from_set:
        fix = f"--set {target}=VALUE"
    elif tsection == section:
        fix = f"rename {key} to {tkey} in section {section}"
    else:
        fix = f"write {key} as {tkey} in section {tsection}" if tkey != key else f"move {key} into section {tsection}"
    return EnvkitError(f"{what} (did you mean '{tkey if tsection == section else target}'?)", where=where, fix=fix)


def coerce(value: Any, f: Field, where: str, *, from_text: bool = False):
    """Check (and, for --set text, convert) one value against its field, by the field's kind of
    value (kinds.py). Raises EnvkitError."""
    if value is None:
        if f.nullable:
            return None
        raise EnvkitError(f"must not be empty (expected {f.kind.name})", where=where)
    if from_text and isinstance(value, str):
        import yaml

        try:
            value = safe_load_bounded(value, where) if value.strip() else value
        except yaml.YAMLError:
            pass
        if value is None and f.nullable:
            return None
    return f.kind.convert(value, f, where, from_text=from_text)


def parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise EnvkitError(f"--set {text!r}: expected section.key=value", fix="e.g. --set training.lr=1e-4")
    key, _, value = text.partition("=")
    return key.strip(), value


def field_for(path: str, where_prefix: str) -> Field:
    """The Field at section.key, or one line naming the unknown section or key (with a did-you-mean)."""
    section, dot, key = path.partition(".")
    from_set = where_prefix.startswith("--set")
    if not dot or not key:
        if meant(path, None) is not None:
            raise unknown_key("", path, where_prefix, from_set)
        raise EnvkitError(f"'{path}' is not a section.key path" + did_you_mean(path, [f"{s}.{k}" for s in SCHEMA for k in SCHEMA[s]]),
                          where=where_prefix)
    if section not in SCHEMA or key not in SCHEMA[section]:
        raise unknown_key(section, key, f"{where_prefix}: {path}", from_set)
    return SCHEMA[section][key]
