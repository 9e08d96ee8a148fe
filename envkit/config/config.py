"""train.yaml resolved into a typed, frozen config: defaults < profile < YAML < `--set`, each value
remembering where it came from, and beside it what the run derived when it started.

No torch here: `envkit validate` and `envkit run --print-config` stay fast.

Precedence (lowest first): built-in default < profile < YAML < `--set a.b=v`. Each resolved value
remembers its origin (an `Origin`, origin.py: the default, a profile, YAML, --set, or derived) for `--print-config`.

`Config.declared` is what was asked for (a TrainConfig of frozen section dataclasses, schema.py); the
config hash covers it alone. `Config.derived` holds the values a run decides when it starts
(training.batch_size auto -> 64 by the probe, max_steps from epochs, the resolved precision): one run
has one hash whatever it derived. `cfg.training`, `cfg.model`, ... are the sections as the run uses
them: the declared values with the derived ones in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from envkit.errors import EnvkitError
from envkit.runfolder import names
from envkit.config.paths import resolve_path
from envkit.config.origin import CLI, DEFAULT, YAML, Origin
from envkit.config.coerce import coerce, field_for, meant, parse_override, read_yaml, unknown_key
from envkit.config.kinds import describe_value, did_you_mean
from envkit.config.schema import (  # noqa: F401 - the schema's names are part of config's face
    AUTO,
    DATASET_KEYS,
    F,
    Field,
    HASH_EXCLUDED,
    HASH_EXCLUDED_KEYS,
    HASHED_WHEN_SET,
    MODEL_KEYS,
    MOOT_WHEN,
    PROFILE_KEYS,
    SCHEMA,
    SECTIONS,
    SYNTHETIC_TASKS,
    Checkpoint,
    Dataloader,
    Dataset,
    Device,
    DeviceType,
    Eval,
    Experiment,
    Logging,
    Model,
    Precision,
    Sweep,
    Tracker,
    TrainConfig,
    Training,
)
from envkit.config.cifar_files import CifarKind, check_folder
from envkit.config.token_files import check_token_folder


def _split(path: str) -> tuple[str, str]:
    section, _, key = path.partition(".")
    if section not in SCHEMA or key not in SCHEMA[section]:
        raise KeyError(path)
    return section, key


def _with(tc: TrainConfig, changes: dict[str, Any]) -> TrainConfig:
    """tc with {"section.key": value} in place (a new TrainConfig: sections are frozen)."""
    by_section: dict[str, dict[str, Any]] = {}
    for path, value in changes.items():
        section, key = _split(path)
        by_section.setdefault(section, {})[key] = value
    return dataclasses.replace(tc, **{s: dataclasses.replace(getattr(tc, s), **kv) for s, kv in by_section.items()})


def sections_dict(tc: TrainConfig) -> dict[str, dict[str, Any]]:
    """{section: {key: value}} in schema order (a deep copy: lists and mappings are the caller's)."""
    return {s: {k: _copy(getattr(getattr(tc, s), k)) for k in SCHEMA[s]} for s in SCHEMA}


def _copy(value):
    return json.loads(json.dumps(value)) if isinstance(value, (list, dict)) else value


def hash_of(values: dict[str, dict[str, Any]]) -> str:
    """The config hash of {section: {key: value}}: what a resumed run must match. The same bytes
    as every envkit before the typed config hashed, so old run folders keep resuming."""
    def hashed(key: str, value) -> bool:
        return key not in HASH_EXCLUDED_KEYS and not (key in HASHED_WHEN_SET and value is None)

    slim = {s: {k: v for k, v in kv.items() if hashed(f"{s}.{k}", v)} for s, kv in values.items() if s not in HASH_EXCLUDED}
    return hashlib.sha256(json.dumps(slim, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Config:
    declared: TrainConfig = field(default_factory=TrainConfig)  # what was asked for: hashed, printed
    origin: dict[str, Origin] = field(default_factory=dict)  # "training.lr" -> Origin("yaml"); a key not here is a default
    source: str = "train.yaml"
    profile: str | None = None
    # values decided when the run started ("training.batch_size" -> 64 for auto, "training.max_steps" from
    # epochs): beside the declared config, never in its hash, so a resumed run matches whatever it decides
    derived: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # warnings the config itself gives (a value it makes moot), printed by the command
    run: TrainConfig = field(init=False, repr=False, compare=False)  # declared, with derived values in place

    def __post_init__(self):
        object.__setattr__(self, "run", _with(self.declared, self.derived) if self.derived else self.declared)

    # -- the sections as the run uses them
    experiment = property(lambda self: self.run.experiment)
    dataset = property(lambda self: self.run.dataset)
    model = property(lambda self: self.run.model)
    training = property(lambda self: self.run.training)
    eval = property(lambda self: self.run.eval)
    checkpoint = property(lambda self: self.run.checkpoint)
    logging = property(lambda self: self.run.logging)
    device = property(lambda self: self.run.device)
    dataloader = property(lambda self: self.run.dataloader)
    sweep = property(lambda self: self.run.sweep)

    def get(self, path: str):
        """The value at "section.key" as the run uses it (for keys named by data: sweep grids)."""
        section, key = _split(path)
        return getattr(getattr(self.run, section), key)

    def origin_of(self, path: str) -> Origin:
        return self.origin.get(path, DEFAULT)

    def origin_texts(self) -> dict[str, str]:
        """The origins as config.json and record.json hold them ("training.lr" -> "yaml")."""
        return {path: str(o) for path, o in self.origin.items()}

    def replace(self, path: str, value, origin: Origin | None = None) -> "Config":
        """A config declaring `value` at path (hashed like any declared value); the origin is kept unless given."""
        origins = {**self.origin, **({path: origin} if origin is not None else {})}
        return dataclasses.replace(self, declared=_with(self.declared, {path: value}), origin=origins)

    def replace_many(self, changes: dict[str, Any]) -> "Config":
        """A config declaring each {"section.key": value} of changes (origins kept)."""
        return dataclasses.replace(self, declared=_with(self.declared, changes))

    def derive(self, path: str, value, origin: Origin | None = None) -> "Config":
        """A config whose run uses `value` at path, decided at start: recorded in `derived`, outside the hash."""
        _split(path)
        origins = {**self.origin, **({path: origin} if origin is not None else {})}
        return dataclasses.replace(self, derived={**self.derived, path: value}, origin=origins)

    def to_dict(self) -> dict:
        """The declared config as {section: {key: value}} (config.yaml, --print-config --json)."""
        return sections_dict(self.declared)

    def run_dict(self) -> dict:
        """The sections as the run uses them, as {section: {key: value}} (trackers, hints)."""
        return sections_dict(self.run)

    def config_hash(self) -> str:
        return hash_of(self.to_dict())

    def hashes_accepted(self) -> set[str]:
        """This config's hash, and the one envkit before the typed config wrote into an epochs run's
        checkpoints (taken after max_steps was set from epochs): such a run still resumes."""
        out = {self.config_hash()}
        if "training.max_steps" in self.derived:
            out.add(hash_of(sections_dict(_with(self.declared, {"training.max_steps": self.derived["training.max_steps"]}))))
        return out

    def rows(self) -> list[tuple[str, Any, str]]:
        return [(f"{s}.{k}", v, str(self.origin_of(f"{s}.{k}"))) for s, kv in self.to_dict().items() for k, v in kv.items()]

    @classmethod
    def from_resolved(cls, data: dict) -> "Config":
        """The child reads back what the parent wrote (config.json in the run folder). A config.json
        written before the typed config held the run's values with "declared" naming what they
        replaced; read into the same two parts."""
        values, derived = data["values"], dict(data.get("derived") or {})
        if "derived" not in data:
            derived = {p: values[p.split(".")[0]][p.split(".")[1]] for p in data.get("declared") or {}}
            values = {s: {k: (data["declared"] or {}).get(f"{s}.{k}", v) for k, v in kv.items()} for s, kv in values.items()}
        declared = TrainConfig(**{s: SECTIONS[s](**{k: v for k, v in kv.items() if k in SCHEMA[s]})
                                  for s, kv in values.items() if s in SECTIONS})
        origin = {path: Origin.parse(str(text)) for path, text in (data.get("origin") or {}).items()}
        return cls(declared=declared, origin=origin, source=data.get("source", names.CONFIG),
                   profile=data.get("profile"), derived=derived)

    def resolved(self) -> dict:
        return {"values": self.to_dict(), "derived": dict(self.derived), "origin": self.origin_texts(), "source": self.source,
                "profile": self.profile, "config_hash": self.config_hash()}


# ---------------------------------------------------------------- loading


def load_config(path: str | Path | None, *, overrides: Sequence[str] = (), profile=None, data: dict | None = None) -> Config:
    """Resolve a train.yaml: defaults < profile < YAML < --set. `profile` is a loaded Profile (or None)."""
    src = str(path) if path is not None else "<defaults>"
    values: dict[str, Any] = {}  # "section.key" -> value, over the defaults
    origin: dict[str, Origin] = {}
    pname = getattr(profile, "name", None)

    if profile is not None:
        for (psec, pkey), cpath in PROFILE_KEYS.items():
            pd = getattr(profile, psec, None) or {}
            if pkey in pd and pd[pkey] is not None:
                try:
                    v = coerce(pd[pkey], field_for(cpath, "profile"), f"profile {pname}: {psec}.{pkey}")
                except EnvkitError:
                    continue  # a profile value this schema does not take: keep the default
                values[cpath] = v
                origin[cpath] = Origin.profile(pname)

    if data is None and path is not None:
        data = read_yaml(path)
    for section, kv in (data or {}).items():
        if section not in SCHEMA:  # a misspelt section, a key at the top, or a section of its own (optimizer: {weight_decay: ...})
            inner = next(iter(kv), None) if isinstance(kv, dict) and kv and not did_you_mean(section, SCHEMA) else None
            if inner is not None and meant(str(inner), None):
                raise unknown_key("", str(inner), f"{src}: {section}", from_set=False, what=f"unknown section '{section}'")
            raise unknown_key(section if did_you_mean(section, SCHEMA) else "", section, f"{src}: {section}", from_set=False,
                              what=f"unknown section '{section}'")
        if kv is None:
            continue
        if not isinstance(kv, dict):
            raise EnvkitError(f"section '{section}' must be a mapping of keys, got {describe_value(kv)}", where=f"{src}: {section}")
        for key, value in kv.items():
            f = field_for(f"{section}.{key}", src)
            v = coerce(value, f, f"{src}: {section}.{key}")
            if not _defer_auto(values, origin, f"{section}.{key}", v, "yaml"):
                values[f"{section}.{key}"] = v
                origin[f"{section}.{key}"] = YAML

    for text in overrides:
        key, raw = parse_override(text)
        f = field_for(key, "--set")
        v = coerce(raw, f, f"--set {key}", from_text=True)
        if not _defer_auto(values, origin, key, v, "cli"):
            values[key] = v
            origin[key] = CLI

    cfg = Config(declared=_with(TrainConfig(), values), origin=origin, source=src, profile=pname)
    cfg = dataclasses.replace(cfg, notes=tuple(moot_values(cfg)))
    return check_consistency(cfg)


def _said_by(cfg: Config, path: str) -> str:
    o = cfg.origin_of(path)
    return "--set" if o.kind == "cli" else cfg.source if o.kind == "yaml" else f"profile {o.detail}" if o.kind == "profile" else str(o)


def moot_values(cfg: Config) -> list[str]:
    """A value the user set that another value makes moot (schema.MOOT_WHEN): refused (one line,
    exit 2) where setting both can only be a mistake, else one warning line each (returned)."""
    notes = []
    for path, decider, when, why, refusal_fix in MOOT_WHEN:
        mine = cfg.origin_of(path)
        value, decided = cfg.get(path), cfg.get(decider)
        section, key = _split(path)
        if not mine.by_user or value == SCHEMA[section][key].default:
            continue  # not the user's word, or one that changes nothing
        if mine.level < cfg.origin_of(decider).level:
            continue  # the decider was set later (--set over the file): the later word wins, as promised
        if not (decided is not None if when == "set" else decided != AUTO if when == "number" else decided in when):
            continue
        told = f"{_show_value(value)} {'would be ignored' if refusal_fix else 'has no effect'}: " \
               f"{decider} is {_show_value(decided)} ({_said_by(cfg, decider)}), and {why}"
        if refusal_fix:
            raise EnvkitError(told, where=where_set(cfg, path), fix=refusal_fix.format(value=value))
        notes.append(f"{where_set(cfg, path)}: {told}")
    return notes


def _show_value(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _defer_auto(values: dict, origin: dict[str, Origin], path: str, value, who: Literal["yaml", "cli"]) -> bool:
    """`auto` means "let envkit decide", and where the profile has decided (precision bf16 on an
    M3 Max, compile on a Hopper GPU) its tuned value is that decision: keep it."""
    prev = origin.get(path, DEFAULT)
    if value == AUTO and prev.kind == "profile" and values.get(path, AUTO) != AUTO:
        origin[path] = dataclasses.replace(prev, said_auto=who)
        return True
    return False


def where_set(cfg: Config, path: str) -> str:
    """Where a value was set, for an error naming it: `--set KEY`, `FILE: KEY` or `profile NAME: KEY`."""
    o = cfg.origin_of(path)
    if o.kind == "cli":
        return f"--set {path}"
    if o.kind == "profile" and o.said_auto:
        return f"{cfg.source}: {path} (auto, taken from profile {o.detail})"
    if o.kind == "profile":
        return f"profile {o.detail}: {path}"
    return f"{cfg.source}: {path}"


def is_factory(name: str) -> bool:
    return ":" in name and bool(re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", name))


def per_process_batch(cfg: Config, world: int) -> Config:
    """training.global_batch_size: batch_size per process from the process count, derived (outside
    the config hash), so a checkpoint of this config resumes on another process count with the same
    global batch, and the same steps. cfg itself without it. One EnvkitError when the processes and
    the accumulation do not divide it (a global batch rounded would not be the one asked for)."""
    t = cfg.training
    total = t.global_batch_size
    if total is None:
        return cfg
    share = world * t.grad_accum
    if total % share:
        near = max(share, round(total / share) * share)
        raise EnvkitError(f"training.global_batch_size {total} does not split over {world} process{'es' if world > 1 else ''} "
                          f"x grad_accum {t.grad_accum} (a multiple of {share} does)", where=where_set(cfg, "training.global_batch_size"),
                          fix=f"--set training.global_batch_size={near}, or another --nproc-per-node or training.grad_accum")
    return cfg.derive("training.batch_size", total // share,
                      origin=Origin.derived(f"global_batch_size: {total} over {world} process{'es' if world > 1 else ''} x {t.grad_accum} accum"))


def check_consistency(cfg: Config) -> Config:
    """Rules across keys: model/dataset types, keys that do not apply, dataset paths, head sizes.
    Returns cfg, a factory model's empty kwargs made a mapping."""
    m, d, t = cfg.model, cfg.dataset, cfg.training
    mtype, dtype = m.type, d.type
    if mtype not in MODEL_KEYS and not is_factory(mtype):
        raise EnvkitError(f"unknown model type {mtype!r}{did_you_mean(mtype, MODEL_KEYS)}", where=where_set(cfg, "model.type"),
                          fix="use gpt, mlp, cnn, resnet18, resnet34, resnet50 or 'package.module:factory'")
    if dtype not in DATASET_KEYS and not is_factory(dtype):
        raise EnvkitError(f"unknown dataset type {dtype!r}{did_you_mean(dtype, DATASET_KEYS)}", where=where_set(cfg, "dataset.type"),
                          fix="use synthetic, text, npz, tokens, cifar10, cifar100, imagefolder or 'package.module:factory'")
    if mtype in MODEL_KEYS:
        for key in SCHEMA["model"]:
            if cfg.origin_of(f"model.{key}").by_user and key not in MODEL_KEYS[mtype]:
                raise EnvkitError(f"'{key}' does not apply to model type {mtype}", where=where_set(cfg, f"model.{key}"),
                                  fix=f"{mtype} takes: {', '.join(sorted(MODEL_KEYS[mtype] - {'type'}))}")
    elif m.kwargs is None:
        cfg = cfg.replace("model.kwargs", {})
    if dtype in DATASET_KEYS:
        for key in SCHEMA["dataset"]:
            if cfg.origin_of(f"dataset.{key}").by_user and key not in DATASET_KEYS[dtype]:
                raise EnvkitError(f"'{key}' does not apply to dataset type {dtype}", where=where_set(cfg, f"dataset.{key}"),
                                  fix=f"{dtype} takes: {', '.join(sorted(DATASET_KEYS[dtype] - {'type'}))}")
    if dtype == "synthetic":
        task = d.task
        if task not in SYNTHETIC_TASKS:
            raise EnvkitError(f"unknown synthetic task {task!r}{did_you_mean(task, SYNTHETIC_TASKS)}", where=where_set(cfg, "dataset.task"),
                              fix="arithmetic (for gpt), teacher (for mlp), images (for cnn)")
        want = SYNTHETIC_TASKS[task]
        if mtype in MODEL_KEYS and mtype != want and not (want == "cnn" and mtype.startswith("resnet")):
            raise EnvkitError(f"synthetic task {task} trains a {want} model, not {mtype}", where=where_set(cfg, "dataset.task"),
                              fix=f"set dataset.task to {[k for k, v in SYNTHETIC_TASKS.items() if v == mtype][0]}")
    if dtype in ("text", "npz"):
        p = d.path
        if not p:
            raise EnvkitError(f"dataset type {dtype} needs a path", where=where_set(cfg, "dataset.path"))
        full = resolve_path(cfg, p)
        if not full.exists():
            raise EnvkitError(f"dataset path {p!r} does not exist" + (f" (looked at {full})" if str(full) != p else ""),
                              where=where_set(cfg, "dataset.path"), fix="point dataset.path at a text file/folder (text) or an .npz file (npz)")
        if dtype == "npz" and full.is_dir():
            raise EnvkitError("npz dataset path is a folder; expected an .npz file", where=where_set(cfg, "dataset.path"))
        if dtype == "text" and mtype in ("mlp", "cnn"):
            raise EnvkitError(f"a text dataset trains a language model (gpt), not {mtype}", where=where_set(cfg, "model.type"))
    if dtype == "tokens":
        if mtype in ("mlp", "cnn"):
            raise EnvkitError(f"a tokens dataset trains a language model (gpt), not {mtype}", where=where_set(cfg, "model.type"))
        if not d.path:
            raise EnvkitError("dataset type tokens needs a path (a folder with train.bin and val.bin)", where=where_set(cfg, "dataset.path"))
        batch = t.batch_size if isinstance(t.batch_size, int) else 1  # auto: decided when the run starts
        check_token_folder(resolve_path(cfg, d.path), d.dtype, d.vocab_size, batch_tokens=batch * (m.block_size + 1),
                           where_path=where_set(cfg, "dataset.path"))
    if dtype in ("cifar10", "cifar100", "imagefolder"):
        _check_image_dataset(cfg, dtype, mtype)
    if mtype == "gpt" and m.n_embd % m.n_head:
        raise EnvkitError(f"n_embd {m.n_embd} is not divisible by n_head {m.n_head}", where=where_set(cfg, "model.n_embd"))
    if t.min_lr is not None and t.min_lr > t.lr:
        raise EnvkitError(f"min_lr {t.min_lr:g} is above lr {t.lr:g}", where=where_set(cfg, "training.min_lr"))
    if t.precision == "fp16" and cfg.device.type == "cpu":
        raise EnvkitError("fp16 autocast on the CPU is slow and unscaled; use fp32 or bf16 there", where=where_set(cfg, "training.precision"))
    return cfg


def _check_image_dataset(cfg: Config, dtype: CifarKind | Literal["imagefolder"], mtype: str) -> None:
    if mtype in ("gpt", "mlp"):
        raise EnvkitError(f"a {dtype} dataset trains an image model (resnet18, cnn), not {mtype}", where=where_set(cfg, "model.type"))
    path = cfg.dataset.path
    if not path:
        raise EnvkitError(f"dataset type {dtype} needs a path", where=where_set(cfg, "dataset.path"),
                          fix="the unpacked binary folder (cifar) or a folder with train/ and val/ class folders (imagefolder)")
    if dtype != "imagefolder":
        check_folder(resolve_path(cfg, path), dtype, where=where_set(cfg, "dataset.path"))


def render_rows(cfg: Config) -> list[str]:
    width = max(len(k) for k, _, _ in cfg.rows())
    out = []
    for key, value, origin in cfg.rows():
        shown = json.dumps(value) if not isinstance(value, str) else value
        out.append(f"{key:<{width}}  {shown:<24}  # {origin}")
    return out


def summary_line(cfg: Config) -> str:
    """What the config trains, in the words of `envkit validate`'s one line: the model on the data,
    the run's length, the device, the precision and the profile."""
    d, t = cfg.dataset, cfg.training
    return (f"{cfg.model.type} on {d.type}" + (f"/{d.task}" if d.type == "synthetic" else "")
            + (f", {t.epochs} epochs" if t.epochs else f", {t.max_steps} steps")
            + f", device {cfg.device.type}, precision {t.precision}, profile {cfg.profile or 'none'}")


def to_yaml(cfg: Config) -> str:
    import yaml

    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=False)
