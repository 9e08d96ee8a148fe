"""Text from a run folder, made safe to put on a terminal: a command, a folder name or a package's
URL that someone else wrote may hold a carriage return, ANSI escape sequences or Unicode's bidi
controls that redraw the screen, so that the user reads one command and approves another. Every
such character is shown as an escape (`\\r`, `\\x1b`, `\\u202e`), never interpreted; a long value is
cut with the count of what was left out; a list is shown with its full count."""

from __future__ import annotations

from envkit.errors import escaped

VALUE_MAX = 240  # characters of one value on the screen
LIST_MAX = 12  # items of one list

def shown(value, limit: int = VALUE_MAX) -> str:
    """`value` as text with every control and format character escaped, cut to `limit` characters
    (plus a note of how many more there were)."""
    text = value if isinstance(value, str) else str(value)
    out = escaped(text[: limit * 2].replace("\\", "\\\\"))
    extra = max(0, len(text) - limit * 2)
    if len(out) > limit:
        extra += len(out) - limit
        out = out[:limit]
    return out + (f"... ({extra:,} more characters)" if extra else "")


def shown_list(values, limit: int = LIST_MAX, each: int = 120) -> str:
    """`a, b, c ... and N more (M in all)`: every item escaped, the count never hidden."""
    items = list(values)
    head = ", ".join(shown(v, each) for v in items[:limit])
    return head + (f" ... and {len(items) - limit:,} more ({len(items):,} in all)" if len(items) > limit else "")


def shown_argv(argv) -> str:
    """A command as a shell would read it (shlex quoting), each argument escaped."""
    import shlex

    return " ".join(shown(shlex.quote(a), 400) for a in argv)
