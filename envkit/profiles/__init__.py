"""Tuned profiles: TOML files with inheritance, reasons and fact-dependent values.

A profile file (``profiles/<name>.toml``) looks like::

    description = "Apple M3 Max: bf16 on macOS 14+, batch scaled with unified memory"
    extends = "m3-pro"

    [env.OMP_NUM_THREADS]
    value = "{perf_cores}"
    reason = "one OpenMP thread per performance core"
    source = "docs/knowledge/apple-silicon.md (hw.perflevel0)"

    [train]
    batch_size = { value = "{max(4, min(64, memory_gb // 2))}", reason = "...", source = "..." }

Every setting is either a table ``{value, reason, source}`` or a bare value (user profiles may be
terse; shipped ones always give a reason and a source). ``{...}`` in a value is simple arithmetic
over the machine's facts (``Facts.template_values()``: perf_cores, cores, memory_gb, gpu_cores, ...),
evaluated by a small AST walker, never by ``eval``.

Search order for a name: ``./profiles`` (the project), the user's folder (``ENVKIT_CONFIG_DIR`` or
click's app dir, plus ``/profiles``), then the profiles shipped with envkit. A profile that
``extends`` its own name extends the next one down that order (a user's tweak of a shipped one).

``[requires]`` gates (``macos``, ``torch``, ``python``, ``compute_capability``) are checked against
the facts. An unmet one applies its ``otherwise`` overrides (e.g. bf16 -> fp32 below macOS 14)
and adds a warning; an unknown fact (a Mac profile resolved on Linux) leaves the values alone
and is reported as "unknown".
"""

from envkit.profiles.expr import ExprError, evaluate
from envkit.profiles.files import ProfileInfo, Setting, list_profiles, search_dirs
from envkit.resources import user_dir
from envkit.profiles.resolve import Profile, diff_profiles, load_profile
from envkit.profiles.schema import FACT_FALLBACKS, SCHEMA, SECTIONS, show_value

__all__ = ["Profile", "ProfileInfo", "Setting", "load_profile", "list_profiles", "diff_profiles", "search_dirs",
           "user_dir", "evaluate", "show_value", "SCHEMA", "SECTIONS", "FACT_FALLBACKS", "ExprError"]
