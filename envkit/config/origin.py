"""Where a config value came from: the built-in default, a profile, train.yaml, `--set`, or what the
run derived when it started. Shown after `#` by `--print-config`, and written into config.json and
record.json as text ("default", "yaml", "cli", "profile:<name>", "profile:<name> (yaml said auto)",
or what decided a derived value): `str()` writes that text and `Origin.parse` reads it back, so run
folders of every envkit read the same."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

OriginKind = Literal["default", "profile", "yaml", "cli", "derived"]
PRECEDENCE: dict[str, int] = {"default": 0, "profile": 1, "yaml": 2, "cli": 3}  # a derived value is no one's word: 0
_SAID_AUTO = re.compile(r"(?P<name>[^ ]*) \((?P<who>yaml|cli) said auto\)")


@dataclass(frozen=True, slots=True)
class Origin:
    kind: OriginKind
    detail: str | None = None  # profile: its name; derived: what decided the value ("auto: ...")
    said_auto: Literal["yaml", "cli"] | None = None  # profile: train.yaml or --set said auto, and the profile's value was kept

    @classmethod
    def profile(cls, name: str | None) -> Origin:
        return cls("profile", str(name))

    @classmethod
    def derived(cls, why: str) -> Origin:
        return cls("derived", why)

    @classmethod
    def parse(cls, text: str) -> Origin:
        """The origin a config.json or record.json wrote as text (the inverse of str())."""
        if text in ("default", "yaml", "cli"):
            return cls(text)
        if text.startswith("profile:"):
            rest = text.removeprefix("profile:")
            said = _SAID_AUTO.fullmatch(rest)
            if said:
                return cls("profile", said["name"], said_auto="yaml" if said["who"] == "yaml" else "cli")
            return cls("profile", rest)
        return cls("derived", text)

    def __str__(self) -> str:
        if self.kind == "profile":
            return f"profile:{self.detail}" + (f" ({self.said_auto} said auto)" if self.said_auto else "")
        if self.kind == "derived":
            return self.detail or "derived"
        return self.kind

    @property
    def by_user(self) -> bool:
        """Set in train.yaml or with --set (a profile's word or a default is not the user's)."""
        return self.kind in ("yaml", "cli")

    @property
    def level(self) -> int:
        """Its rank in the precedence default < profile < YAML < --set (a later word wins)."""
        return PRECEDENCE.get(self.kind, 0)


DEFAULT = Origin("default")
YAML = Origin("yaml")
CLI = Origin("cli")
