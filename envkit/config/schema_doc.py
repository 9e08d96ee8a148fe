"""docs/reference/train-yaml.md, generated from the schema's own data (`schema.py`): every section
and key with its type, default, allowed values and help, which keys apply to which built-in model
and dataset, which defaults a profile supplies, and which keys a resumed run may change.

    python -m envkit.config.schema_doc            # rewrite docs/reference/train-yaml.md
    python -m envkit.config.schema_doc --check    # exit 1 when the file differs (what CI's test does)

No torch, no YAML: only the schema is read, so the page cannot say what the code does not do."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from envkit.config.schema import (
    DATASET_KEYS,
    HASH_EXCLUDED,
    HASH_EXCLUDED_KEYS,
    MODEL_KEYS,
    PROFILE_KEYS,
    SCHEMA,
    SYNTHETIC_TASKS,
    Field,
)

OUTPUT = Path("docs") / "reference" / "train-yaml.md"

def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _yaml(value: Any) -> str:
    """A default as it would be written in train.yaml."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)) and not value:
        return "[]" if isinstance(value, list) else "{}"
    if value == "":
        return '""'
    return str(value)


def _type(field: Field) -> str:
    kind = field.kind.doc
    return f"{kind} or `null`" if field.nullable else kind


def _allowed(field: Field) -> str:
    parts = []
    if field.choices:
        parts.append(", ".join(f"`{c}`" for c in field.choices))
    if field.gt is not None:
        parts.append(f"> {_yaml(field.gt)}")
    if field.min is not None:
        parts.append(f">= {_yaml(field.min)}")
    if field.max is not None:
        parts.append(f"<= {_yaml(field.max)}")
    return "; ".join(parts)


def _applies(section: str, key: str) -> str:
    table = {"model": MODEL_KEYS, "dataset": DATASET_KEYS}.get(section)
    if table is None or key == "type":
        return ""
    names = [name for name, keys in table.items() if key in keys]
    return ", ".join(f"`{n}`" for n in names) if names else "`package.module:factory`"


def _profile_key(path: str) -> str:
    for (section, key), target in PROFILE_KEYS.items():
        if target == path:
            return f"{section}.{key}"
    return ""


def render() -> str:
    lines = [
        "# train.yaml reference",
        "",
        "<!-- Generated from envkit/config/schema.py by `python -m envkit.config.schema_doc`: do not edit by",
        "     hand. tests/docs/test_docs.py fails when this file differs from the generator's output. -->",
        "",
        "Every key `envkit run`, `envkit validate` and `envkit sweep` accept, generated from the schema the",
        "trainer validates with (`envkit/config/schema.py`). An unknown section or key is an error with a",
        "\"did you mean\"; a value of the wrong type or out of range names the key and the file (exit 2).",
        "[Training](../training.md) explains how the keys work together.",
        "",
        "**Where a value comes from** (lowest first): the default below < the profile < train.yaml <",
        "`--set section.key=value`. `envkit run train.yaml --print-config` shows each resolved value with",
        "its origin. A key whose *profile* column names a profile setting takes that setting's value when",
        "the profile has one, and `auto` in train.yaml then means the profile's value.",
        "",
        "**Which keys apply.** A `model` or `dataset` key that does not apply to the chosen `type` is an",
        "error, not silently ignored: the *applies to* column lists the built-in types that read it (a",
        "`package.module:factory` type is not checked). The synthetic dataset's tasks go with a model:",
        ", ".join(f"`{task}` with `{model}`" for task, model in SYNTHETIC_TASKS.items()) + ".",
        "",
    ]
    for section, fields in SCHEMA.items():
        lines += [f"## {section}", ""]
        applies = section in ("model", "dataset")
        header = "| key | type | default | allowed | profile |" + (" applies to |" if applies else "") + " help |"
        lines += [header, "|" + " --- |" * header.count(" |")]
        for key, field in fields.items():
            row = [f"`{section}.{key}`", _type(field), f"`{_yaml(field.default)}`", _allowed(field),
                   f"`{_profile_key(f'{section}.{key}')}`" if _profile_key(f"{section}.{key}") else ""]
            if applies:
                row.append(_applies(section, key))
            row.append(field.help)
            lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    kept = sorted(HASH_EXCLUDED_KEYS | {f"{s}.*" for s in HASH_EXCLUDED})
    lines += [
        "## Resuming with changed keys",
        "",
        "`envkit run --resume auto` continues a run whose config hash matches. These keys are left out of the",
        "hash (they change how a run is named, watched, saved or sped up, not what it computes), so changing",
        "them does not stop a resume:",
        "",
        ", ".join(f"`{k}`" for k in kept) + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.splitlines()[0] if __doc__ else None  # None under python -OO
    parser = argparse.ArgumentParser(prog="python -m envkit.config.schema_doc", description=summary)
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"default {OUTPUT}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current != text:
            print(f"{args.output} is out of date: run python -m envkit.config.schema_doc", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
