"""The command line: thin. Each command lives in envkit/commands/<name>.py and is imported only
when used, so `envkit --help` stays fast and never imports torch."""

from __future__ import annotations

import importlib
import sys

import click

from envkit import __version__
from envkit.errors import EnvkitError

# name -> (module:attribute, one-line help shown by `envkit --help` without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("envkit.commands.doctor:doctor", "Detect the machine, Python and PyTorch, and judge them (with a fix for every problem)."),
    "check": ("envkit.commands.check:check", "Version gates for CI: fast, exit codes, --json / --format github."),
    "setup": ("envkit.commands.setup:setup", "Create or reuse a venv, install PyTorch from the right index, write env scripts and a lock."),
    "lock": ("envkit.commands.lock:lock", "Write one pylock.toml (PEP 751) with the same torch for the Mac, the CUDA box and the CPU box."),
    "selftest": ("envkit.commands.selftest:selftest", "Prove the device works: numbers, autocast, compile, DataLoader, memory."),
    "profile": ("envkit.commands.profile:profile", "List, show and compare the tuned profiles."),
    "env": ("envkit.commands.env:env", "Print or write the profile's environment for your shell."),
    "run": ("envkit.commands.train:run", "Train with the embedded reference trainer from a train.yaml."),
    "validate": ("envkit.commands.train:validate", "Check a train.yaml without running it."),
    "exec": ("envkit.commands.exec:exec_", "Run your own training command in the managed env, with a run folder, heartbeat and restarts."),
    "stop": ("envkit.commands.exec:stop", "Stop a running run (`envkit run` or `exec`): SIGINT, then SIGTERM after a grace period."),
    "init": ("envkit.commands.init:init", "Write a ready train.yaml from a template."),
    "sweep": ("envkit.commands.sweep:sweep", "Train every combination of a train.yaml's sweep.grid, or of your command's --grid; a table per group."),
    "reproduce": ("envkit.commands.reproduce:reproduce",
                  "Make a recorded run again in a fresh venv from its lock and compare the metrics step by step."),
    "runs": ("envkit.commands.runs:runs", "A table of training runs with status, steps and best val loss."),
    "monitor": ("envkit.commands.monitor:monitor", "Live view of a run from its heartbeat and metrics."),
    "plot": ("envkit.commands.plot:plot", "Write loss and throughput curves of a run as a PNG."),
    "bench": ("envkit.commands.bench:bench", "Measure the optimization ladder here: CPU, device, bf16, compile, profile settings."),
    "tune": ("envkit.commands.tune:tune", "Measure settings within a time budget and write the winner as this machine's profile."),
}

# Options people reach for that are config values: the line says where each lives (click's own
# suggestion, by spelling, would send `--max-steps` to `--profile-steps`).
CONFIG_OPTIONS = {
    "--max-steps": "The run's length is a config value: --set training.max_steps=N; --stop-after N stops a run early "
                   "at step N (checkpointed, run again to resume).",
    "--steps": "The run's length is a config value: --set training.max_steps=N; --stop-after N stops a run early.",
    "--lr": "The learning rate is a config value: --set training.lr=3e-4.",
    "--batch-size": "The batch size is a config value: --set training.batch_size=32 (or auto).",
    "--epochs": "The run's length is a config value: --set training.max_steps=N or training.epochs=N.",
    "--device": "The device is a config value: --set device.type=cuda (or cpu, mps, auto).",
    "--seed": "The seed is a config value: --set experiment.seed=N.",
}

# Run by envkit's own sbatch script inside a Slurm job; not listed by `envkit --help`.
HIDDEN: dict[str, str] = {
    "slurm-batch": "envkit.commands.slurm_job:slurm_batch",
    "slurm-node": "envkit.commands.slurm_job:slurm_node",
    "slurm-probe": "envkit.commands.slurm_job:slurm_probe",
}


class LazyGroup(click.Group):
    """Commands are listed from COMMANDS and imported on first use. Every module named there ships
    with envkit: a failing import is a bug to see, not a command to hide."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS and name not in HIDDEN:
            return None
        module, _, attr = (COMMANDS[name][0] if name in COMMANDS else HIDDEN[name]).partition(":")
        return getattr(importlib.import_module(module), attr)

    def resolve_command(self, ctx, args):
        """An unknown command names the nearest ones (`envkit exce` -> exec), as click does for options."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            near = difflib.get_close_matches(name, list(COMMANDS), n=3, cutoff=0.6)
            ctx.fail(f"No such command {name!r}." + (f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else "")
                     + " (`envkit --help` lists them)")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)



@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envkit")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """envkit: PyTorch on Apple Silicon (MPS), CUDA and CPU, set up and checked for real.

    Start with `envkit doctor`, then `envkit setup`, `envkit selftest`, `envkit run train.yaml`.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    _STATE["debug"] = debug


# --debug as click parsed it for envkit itself: a `--debug` in the user's own command after `--`
# (`envkit exec -- python train.py --debug`) is theirs and never turns envkit's errors into tracebacks.
_STATE = {"debug": False}


def _wants_json(args: list[str]) -> bool:
    """--json among envkit's own arguments (not in a command after `--`)."""
    own = args[: args.index("--")] if "--" in args else args
    return "--json" in own


def _json_error(exc: EnvkitError) -> None:
    """--json is a contract on every exit code: an error is a JSON object on stdout too (the one line
    stays on stderr for people), printed through the one JSON printer."""
    from envkit.console import print_json

    line = exc.one_line()
    print_json({"error": {"message": exc.message, "where": exc.where, "fix": exc.fix,
                          "line": line.removeprefix("envkit: error: ")}, "exit_code": exc.exit_code})


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    _STATE["debug"] = False
    try:
        rc = cli.main(args=args, prog_name="envkit", standalone_mode=False)
    except EnvkitError as exc:
        if _STATE["debug"]:
            raise
        click.echo(exc.one_line(), err=True)
        if _wants_json(args):
            _json_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("envkit: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if isinstance(exc, click.NoSuchOption) and exc.option_name in CONFIG_OPTIONS:
            exc = click.UsageError(f"No such option: {exc.option_name}. {CONFIG_OPTIONS[exc.option_name]}", ctx=exc.ctx)
        exc.show()
        sys.exit(2 if exc.exit_code == 2 else exc.exit_code)
    except KeyboardInterrupt:
        click.echo("envkit: interrupted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(rc or 0)
