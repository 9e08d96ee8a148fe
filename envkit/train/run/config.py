"""train.yaml: schema, strict validation, `--set` overrides and where each value came from.

No torch here: `envkit validate` and `envkit run --print-config` stay fast.

Precedence (lowest first): built-in default < profile < YAML < `--set a.b=v`. Each resolved value
remembers its origin ("default", "profile:<name>", "yaml", "cli") for `--print-config`.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError
from envkit.train.data.paths import resolve_path
from envkit.train.run.schema import (  # noqa: F401 - the schema's names are part of config's face
    AUTO,
    DATASET_KEYS,
    DEVICES,
    F,
    Field,
    HASH_EXCLUDED,
    HASH_EXCLUDED_KEYS,
    MODEL_KEYS,
    PRECISIONS,
    PROFILE_KEYS,
    SCHEMA,
    SYNTHETIC_TASKS,
    TRACKERS,
)


class Section:
    """Attribute access to one section's values: cfg.training.lr."""

    def __init__(self, values: dict):
        self.__dict__.update(values)

    def get(self, key, default=None):
        return self.__dict__.get(key, default)


@dataclass
class Config:
    values: dict[str, dict[str, Any]]
    origin: dict[str, str] = field(default_factory=dict)  # "training.lr" -> "yaml"
    source: str = "train.yaml"
    profile: str | None = None
    # values decided when the run started ("training.batch_size": "auto" -> 64): the config hash
    # keeps what was declared, so a resumed run matches whatever a new probe would decide
    declared: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name):
        values = self.__dict__.get("values") or {}
        if name in values:
            return Section(values[name])
        raise AttributeError(name)

    def get(self, path: str):
        section, _, key = path.partition(".")
        return self.values[section][key]

    def to_dict(self) -> dict:
        return copy.deepcopy(self.values)

    def config_hash(self) -> str:
        slim = {s: {k: self.declared.get(f"{s}.{k}", v) for k, v in kv.items() if f"{s}.{k}" not in HASH_EXCLUDED_KEYS}
                for s, kv in self.values.items() if s not in HASH_EXCLUDED}
        return hashlib.sha256(json.dumps(slim, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def rows(self) -> list[tuple[str, Any, str]]:
        return [(f"{s}.{k}", v, self.origin.get(f"{s}.{k}", "default")) for s, kv in self.values.items() for k, v in kv.items()]

    @classmethod
    def from_resolved(cls, data: dict) -> "Config":
        """The child reads back what the parent wrote (config.json in the run folder)."""
        return cls(values=data["values"], origin=data.get("origin", {}), source=data.get("source", "config.json"),
                   profile=data.get("profile"), declared=data.get("declared", {}))

    def resolved(self) -> dict:
        return {"values": self.to_dict(), "origin": dict(self.origin), "source": self.source, "profile": self.profile,
                "declared": dict(self.declared), "config_hash": self.config_hash()}


# ---------------------------------------------------------------- loading


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
        data = yaml.safe_load(text)
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


def _did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(str(word), sorted(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # torch.manual_seed, tensors and checkpoints hold 64-bit integers


def coerce(value: Any, f: Field, where: str, *, from_text: bool = False):
    """Check (and, for --set text, convert) one value against its field. Raises EnvkitError."""
    if value is None:
        if f.nullable:
            return None
        raise EnvkitError(f"must not be empty (expected {f.kind})", where=where)
    kind = f.kind
    if from_text and isinstance(value, str):
        import yaml

        try:
            value = yaml.safe_load(value) if value.strip() else value
        except yaml.YAMLError:
            pass
        if value is None and f.nullable:
            return None
    if kind == "compile":
        if value is True or value is False or value == AUTO:
            return value
        raise EnvkitError(f"expected auto, true or false, got {value!r}", where=where)
    if kind == "int_auto":
        if value == AUTO:
            return value
        kind = "int"
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise EnvkitError(f"expected true or false, got {value!r}", where=where)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and not from_text:
                value = int(value)
            else:
                raise EnvkitError(f"expected an integer{' or auto' if f.kind == 'int_auto' else ''}, got {_show(value)}", where=where)
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str) and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+", value.strip()):
                value = float(value)  # YAML 1.1 reads `3e-4` (no dot) as a string
            else:
                raise EnvkitError(f"expected a number, got {_show(value)}", where=where)
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise EnvkitError("must be a finite number", where=where)
    elif kind in ("str", "name"):
        if not isinstance(value, str):
            raise EnvkitError(f"expected a string, got {_show(value)}", where=where)
        if kind == "name":
            from envkit.fsutil import check_name

            check_name(value, where)
    elif kind == "list":
        if not isinstance(value, list):
            raise EnvkitError(f"expected a list, got {_show(value)}", where=where)
        for item in value if f.choices is not None else ():
            if item not in f.choices:
                raise EnvkitError(f"{item!r} is not one of {', '.join(map(str, f.choices))}{_did_you_mean(item, f.choices)}",
                                  where=where)
        return value
    elif kind == "dict":
        if not isinstance(value, dict):
            raise EnvkitError(f"expected a mapping, got {_show(value)}", where=where)
    if f.choices is not None and value not in f.choices:
        raise EnvkitError(f"{value!r} is not one of {', '.join(map(str, f.choices))}{_did_you_mean(value, f.choices)}", where=where)
    if kind == "int" and not INT_MIN <= value <= INT_MAX:
        raise EnvkitError(f"{value} is outside the range the trainer can use ({INT_MIN} .. {INT_MAX}, a 64-bit integer)", where=where,
                          fix=f"use a value up to {INT_MAX}" + (" (any seed in 0 .. 2**63-1 is as good as another)" if where.endswith("seed") else ""))
    if kind in ("int", "float"):
        if f.gt is not None and not value > f.gt:
            raise EnvkitError(f"must be greater than {f.gt:g}, got {value:g}", where=where)
        if f.min is not None and value < f.min:
            raise EnvkitError(f"must be at least {f.min:g}, got {value:g}", where=where)
        if f.max is not None and value > f.max:
            raise EnvkitError(f"must be at most {f.max:g}, got {value:g}", where=where)
    return value


def _show(value) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


def parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise EnvkitError(f"--set {text!r}: expected section.key=value", fix="e.g. --set training.lr=1e-4")
    key, _, value = text.partition("=")
    return key.strip(), value


def _field(path: str, where_prefix: str) -> Field:
    section, dot, key = path.partition(".")
    if not dot or not key:
        raise EnvkitError(f"'{path}' is not a section.key path" + _did_you_mean(path, [f"{s}.{k}" for s in SCHEMA for k in SCHEMA[s]]),
                          where=where_prefix)
    if section not in SCHEMA:
        raise EnvkitError(f"unknown section '{section}'{_did_you_mean(section, SCHEMA)}", where=f"{where_prefix}: {path}")
    if key not in SCHEMA[section]:
        raise EnvkitError(f"unknown key '{key}' in section '{section}'{_did_you_mean(key, SCHEMA[section])}",
                          where=f"{where_prefix}: {path}", fix=f"valid keys: {', '.join(SCHEMA[section])}")
    return SCHEMA[section][key]


def load_config(path: str | Path | None, *, overrides: list[str] = (), profile=None, data: dict | None = None) -> Config:
    """Resolve a train.yaml: defaults < profile < YAML < --set. `profile` is a loaded Profile (or None)."""
    src = str(path) if path is not None else "<defaults>"
    values = {s: {k: copy.deepcopy(f.default) for k, f in fields.items()} for s, fields in SCHEMA.items()}
    origin: dict[str, str] = {}
    pname = getattr(profile, "name", None)

    if profile is not None:
        for (psec, pkey), cpath in PROFILE_KEYS.items():
            pd = getattr(profile, psec, None) or {}
            if pkey in pd and pd[pkey] is not None:
                try:
                    v = coerce(pd[pkey], _field(cpath, "profile"), f"profile {pname}: {psec}.{pkey}")
                except EnvkitError:
                    continue  # a profile value this schema does not take: keep the default
                s, k = cpath.split(".")
                values[s][k] = v
                origin[cpath] = f"profile:{pname}"

    if data is None and path is not None:
        data = read_yaml(path)
    for section, kv in (data or {}).items():
        if section not in SCHEMA:
            raise EnvkitError(f"unknown section '{section}'{_did_you_mean(section, SCHEMA)}", where=f"{src}: {section}",
                              fix=f"sections: {', '.join(SCHEMA)}")
        if kv is None:
            continue
        if not isinstance(kv, dict):
            raise EnvkitError(f"section '{section}' must be a mapping of keys, got {_show(kv)}", where=f"{src}: {section}")
        for key, value in kv.items():
            f = _field(f"{section}.{key}", src)
            v = coerce(value, f, f"{src}: {section}.{key}")
            if not _defer_auto(values, origin, f"{section}.{key}", v, "yaml"):
                values[section][key] = v
                origin[f"{section}.{key}"] = "yaml"

    for text in overrides:
        key, raw = parse_override(text)
        f = _field(key, "--set")
        s, k = key.split(".")
        v = coerce(raw, f, f"--set {key}", from_text=True)
        if not _defer_auto(values, origin, key, v, "cli"):
            values[s][k] = v
            origin[key] = "cli"

    cfg = Config(values=values, origin=origin, source=src, profile=pname)
    check_consistency(cfg)
    return cfg


def _defer_auto(values: dict, origin: dict, path: str, value, who: str) -> bool:
    """`auto` means "let envkit decide", and where the profile has decided (precision bf16 on an
    M3 Max, compile on a Hopper GPU) its tuned value is that decision: keep it."""
    prev = origin.get(path, "")
    s, k = path.split(".")
    if value == AUTO and prev.startswith("profile:") and values[s][k] != AUTO:
        origin[path] = f"{prev.split(' ')[0]} ({who} said auto)"
        return True
    return False


def _where(cfg: Config, path: str) -> str:
    o = cfg.origin.get(path, "default")
    if o == "cli":
        return f"--set {path}"
    if o.startswith("profile:") and "said auto" in o:
        return f"{cfg.source}: {path} (auto, taken from profile {o.split(':', 1)[1].split(' ')[0]})"
    if o.startswith("profile:"):
        return f"profile {o.split(':', 1)[1]}: {path}"
    return f"{cfg.source}: {path}"


def is_factory(name: str) -> bool:
    return ":" in name and bool(re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", name))


def check_consistency(cfg: Config) -> None:
    """Rules across keys: model/dataset types, keys that do not apply, dataset paths, head sizes."""
    m, d, t = cfg.values["model"], cfg.values["dataset"], cfg.values["training"]
    mtype, dtype = m["type"], d["type"]
    if mtype not in MODEL_KEYS and not is_factory(mtype):
        raise EnvkitError(f"unknown model type {mtype!r}{_did_you_mean(mtype, MODEL_KEYS)}", where=_where(cfg, "model.type"),
                          fix="use gpt, mlp, cnn, resnet18, resnet34, resnet50 or 'package.module:factory'")
    if dtype not in DATASET_KEYS and not is_factory(dtype):
        raise EnvkitError(f"unknown dataset type {dtype!r}{_did_you_mean(dtype, DATASET_KEYS)}", where=_where(cfg, "dataset.type"),
                          fix="use synthetic, text, npz, tokens, cifar10, cifar100, imagefolder or 'package.module:factory'")
    if mtype in MODEL_KEYS:
        for key in m:
            if cfg.origin.get(f"model.{key}") in ("yaml", "cli") and key not in MODEL_KEYS[mtype]:
                raise EnvkitError(f"'{key}' does not apply to model type {mtype}", where=_where(cfg, f"model.{key}"),
                                  fix=f"{mtype} takes: {', '.join(sorted(MODEL_KEYS[mtype] - {'type'}))}")
    elif m["kwargs"] is None:
        m["kwargs"] = {}
    if dtype in DATASET_KEYS:
        for key in d:
            if cfg.origin.get(f"dataset.{key}") in ("yaml", "cli") and key not in DATASET_KEYS[dtype]:
                raise EnvkitError(f"'{key}' does not apply to dataset type {dtype}", where=_where(cfg, f"dataset.{key}"),
                                  fix=f"{dtype} takes: {', '.join(sorted(DATASET_KEYS[dtype] - {'type'}))}")
    if dtype == "synthetic":
        task = d["task"]
        if task not in SYNTHETIC_TASKS:
            raise EnvkitError(f"unknown synthetic task {task!r}{_did_you_mean(task, SYNTHETIC_TASKS)}", where=_where(cfg, "dataset.task"),
                              fix="arithmetic (for gpt), teacher (for mlp), images (for cnn)")
        want = SYNTHETIC_TASKS[task]
        if mtype in MODEL_KEYS and mtype != want and not (want == "cnn" and mtype.startswith("resnet")):
            raise EnvkitError(f"synthetic task {task} trains a {want} model, not {mtype}", where=_where(cfg, "dataset.task"),
                              fix=f"set dataset.task to {[k for k, v in SYNTHETIC_TASKS.items() if v == mtype][0]}")
    if dtype in ("text", "npz"):
        p = d["path"]
        if not p:
            raise EnvkitError(f"dataset type {dtype} needs a path", where=_where(cfg, "dataset.path"))
        full = resolve_path(cfg, p)
        if not full.exists():
            raise EnvkitError(f"dataset path {p!r} does not exist" + (f" (looked at {full})" if str(full) != p else ""),
                              where=_where(cfg, "dataset.path"), fix="point dataset.path at a text file/folder (text) or an .npz file (npz)")
        if dtype == "npz" and full.is_dir():
            raise EnvkitError("npz dataset path is a folder; expected an .npz file", where=_where(cfg, "dataset.path"))
        if dtype == "text" and mtype in ("mlp", "cnn"):
            raise EnvkitError(f"a text dataset trains a language model (gpt), not {mtype}", where=_where(cfg, "model.type"))
    if dtype == "tokens":
        from envkit.train.data.tokens import check_token_folder

        if mtype in ("mlp", "cnn"):
            raise EnvkitError(f"a tokens dataset trains a language model (gpt), not {mtype}", where=_where(cfg, "model.type"))
        if not d["path"]:
            raise EnvkitError("dataset type tokens needs a path (a folder with train.bin and val.bin)", where=_where(cfg, "dataset.path"))
        batch = t["batch_size"] if isinstance(t["batch_size"], int) else 1  # auto: decided when the run starts
        check_token_folder(resolve_path(cfg, d["path"]), d["dtype"], d["vocab_size"], batch_tokens=batch * (m["block_size"] + 1),
                           where_path=_where(cfg, "dataset.path"))
    if dtype in ("cifar10", "cifar100", "imagefolder"):
        _check_image_dataset(cfg, dtype, mtype)
    if mtype == "gpt" and m["n_embd"] % m["n_head"]:
        raise EnvkitError(f"n_embd {m['n_embd']} is not divisible by n_head {m['n_head']}", where=_where(cfg, "model.n_embd"))
    if t["min_lr"] is not None and t["min_lr"] > t["lr"]:
        raise EnvkitError(f"min_lr {t['min_lr']:g} is above lr {t['lr']:g}", where=_where(cfg, "training.min_lr"))
    if t["precision"] == "fp16" and cfg.values["device"]["type"] == "cpu":
        raise EnvkitError("fp16 autocast on the CPU is slow and unscaled; use fp32 or bf16 there", where=_where(cfg, "training.precision"))


def _check_image_dataset(cfg: Config, dtype: str, mtype: str) -> None:
    from envkit.train.data.cifar_files import check_folder

    if mtype in ("gpt", "mlp"):
        raise EnvkitError(f"a {dtype} dataset trains an image model (resnet18, cnn), not {mtype}", where=_where(cfg, "model.type"))
    path = cfg.values["dataset"]["path"]
    if not path:
        raise EnvkitError(f"dataset type {dtype} needs a path", where=_where(cfg, "dataset.path"),
                          fix="the unpacked binary folder (cifar) or a folder with train/ and val/ class folders (imagefolder)")
    if dtype != "imagefolder":
        check_folder(resolve_path(cfg, path), dtype, where=_where(cfg, "dataset.path"))


def render_rows(cfg: Config) -> list[str]:
    width = max(len(k) for k, _, _ in cfg.rows())
    out = []
    for key, value, origin in cfg.rows():
        shown = json.dumps(value) if not isinstance(value, str) else value
        out.append(f"{key:<{width}}  {shown:<24}  # {origin}")
    return out


def to_yaml(cfg: Config) -> str:
    import yaml

    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=False)
