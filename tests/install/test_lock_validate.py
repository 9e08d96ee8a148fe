"""A lock runs nothing it does not name: every value envkit reads from a lock (pylock.machine.toml,
envkit.lock in either format, pylock.toml) is checked before any installer sees it. A version that
smuggles a line into pip's requirements file (`1.17.0\\n/path/to/a/project` made pip build that
folder, running its build code; `\\n--extra-index-url http://...` sent pip to another index), a URL
of another scheme, a hash that is no hash, a missing key: one line naming the file and the entry,
exit 2, no venv made, nothing installed.

The end-to-end case installs from a real index on 127.0.0.1 (tests/localindex.py) into a real
venv; the project the lock smuggles in builds with a PEP 517 backend of its own (no build
requirements, as tests/install/test_lock_project.py's: pip runs it offline), which writes a marker file
the moment pip imports it."""

from __future__ import annotations

import platform
import sys

import pytest

from conftest import envkit
from localindex import installed

HEX64 = "a" * 64
WHEEL_URL = "https://download.pytorch.org/whl/cpu/torch-2.6.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
MACHINE = (f'system = "{platform.system()}"\narch = "{platform.machine()}"\n'
           f'python_minor = "{sys.version_info[0]}.{sys.version_info[1]}"\nbackend = "cpu"\n')

# pylock.machine.toml as `envkit setup` writes it (a pylock of this one machine); the third versions-only
# entry is the one most cases break
ENVKIT_LOCK = f'''lock-version = "1.0"
created-by = "envkit"

[[packages]]
name = "torch"
version = "2.6.0+cpu"
marker = "sys_platform == 'linux'"
wheels = [{{ url = "{WHEEL_URL}", hashes = {{ sha256 = "{HEX64}" }} }}]

[tool.envkit]
envkit = "0.1.0"

[[tool.envkit.versions-only]]
name = "numpy"
version = "2.2.6"

[[tool.envkit.versions-only]]
name = "filelock"
version = "3.16.1"

[[tool.envkit.versions-only]]
name = "jinja2"
version = "3.1.4"
sha256 = "{HEX64}"

[tool.envkit.platform]
{MACHINE}
[tool.envkit.profile]
name = "cpu"

[tool.envkit.source]
torch = "2.6.0"
index_urls = ["https://mirror.example/simple"]
'''

# envkit.lock as envkit wrote it before (lock_version = 1)
OLD_LOCK = f'''lock_version = 1
envkit = "0.1.0"

[platform]
{MACHINE}
[profile]
name = "cpu"

[source]
torch = "2.6.0"
index_urls = ["https://mirror.example/simple"]

[env]

[[package]]
name = "torch"
version = "2.6.0+cpu"
sha256 = "{HEX64}"
url = "{WHEEL_URL}"

[[package]]
name = "numpy"
version = "2.2.6"
'''

# a lock of many machines, as `envkit lock` or any other tool writes one
PYLOCK = f'''lock-version = "1.0"
created-by = "a test"

[[packages]]
name = "torch"
version = "2.6.0+cpu"
index = "https://download.pytorch.org/whl/cpu"
wheels = [{{ url = "{WHEEL_URL}", size = 10, hashes = {{ sha256 = "{HEX64}" }} }}]

[tool.envkit]
indexes = ["https://mirror.example/simple"]
'''

J3 = "[[tool.envkit.versions-only]] entry 3 (jinja2)"
T1 = "[[packages]] entry 1 (torch)"
# (lock, the text replaced, what replaces it, the entry the error names, a word of the problem)
CASES = {
    "a newline and a path in a version": (ENVKIT_LOCK, 'version = "3.1.4"', 'version = "3.1.4\\n/tmp/evilpkg"', J3, "version"),
    "an --extra-index-url in a version": (ENVKIT_LOCK, 'version = "3.1.4"',
                                          'version = "3.1.4\\n--extra-index-url http://127.0.0.1:9/simple"', J3, "version"),
    "-e PATH as the version": (ENVKIT_LOCK, 'version = "3.1.4"', 'version = "-e /tmp/evilpkg"', J3, "version"),
    "a path as the version": (ENVKIT_LOCK, 'version = "3.1.4"', 'version = "/tmp/evilpkg"', J3, "version"),
    "a version with a space": (ENVKIT_LOCK, 'version = "3.1.4"', 'version = "3.1.4 --pre"', J3, "version"),
    "a version that is a number": (ENVKIT_LOCK, 'version = "3.1.4"', "version = 3", J3, "version"),
    "no version": (ENVKIT_LOCK, 'version = "3.1.4"\n', "", J3, "has no version"),
    "no name": (ENVKIT_LOCK, 'name = "jinja2"\n', "", "[[tool.envkit.versions-only]] entry 3:", "has no name"),
    "a name that is a list": (ENVKIT_LOCK, 'name = "jinja2"', 'name = ["x"]', "[[tool.envkit.versions-only]] entry 3:", "name"),
    "an option in a name": (ENVKIT_LOCK, 'name = "jinja2"', 'name = "jinja2 --index-url http://127.0.0.1:9/simple"',
                            "[[tool.envkit.versions-only]] entry 3:", "name"),
    "a sha256 that is no hex": (ENVKIT_LOCK, f'sha256 = "{HEX64}"\n', f'sha256 = "{"z" * 64}"\n', J3, "sha256"),
    "a sha256 of the wrong length": (ENVKIT_LOCK, f'sha256 = "{HEX64}"\n', f'sha256 = "{"a" * 40}"\n', J3, "sha256"),
    "a javascript: wheel URL": (ENVKIT_LOCK, f'url = "{WHEEL_URL}"', 'url = "javascript:alert(1)//torch-2.6.0-py3-none-any.whl"',
                                T1, "wheel 1 url"),
    "an ftp: wheel URL": (ENVKIT_LOCK, f'url = "{WHEEL_URL}"', 'url = "ftp://mirror.example/torch-2.6.0-py3-none-any.whl"',
                          T1, "wheel 1 url"),
    "a newline in a wheel URL": (ENVKIT_LOCK, f'url = "{WHEEL_URL}"',
                                 'url = "https://mirror.example/x\\n--index-url http://e/torch-2.6.0-py3-none-any.whl"',
                                 T1, "wheel 1 url"),
    "a wheel hash of the wrong length": (ENVKIT_LOCK, f'sha256 = "{HEX64}" }} }}]', f'sha256 = "{"a" * 63}" }} }}]', T1, "sha256"),
    "a wheel name outside the cache": (ENVKIT_LOCK, f'{{ url = "{WHEEL_URL}"', f'{{ name = "../../.bashrc", url = "{WHEEL_URL}"',
                                       T1, "wheel 1 name"),
    "a bad marker": (ENVKIT_LOCK, "marker = \"sys_platform == 'linux'\"", 'marker = "sys_platform =="', T1, "marker"),
    "a newline in a package's version": (ENVKIT_LOCK, 'version = "2.6.0+cpu"', 'version = "2.6.0+cpu\\n/tmp/evilpkg"', T1, "version"),
    "an option in an index URL": (ENVKIT_LOCK, 'index_urls = ["https://mirror.example/simple"]',
                                  'index_urls = ["https://mirror.example/simple --trusted-host evil"]', "[tool.envkit.source]",
                                  "index_urls[1]"),
    "an old lock's version": (OLD_LOCK, 'version = "2.2.6"', 'version = "2.2.6\\n/tmp/evilpkg"', "[[package]] entry 2 (numpy)",
                              "version"),
    "an old lock's URL": (OLD_LOCK, f'url = "{WHEEL_URL}"', 'url = "file:"', "[[package]] entry 1 (torch)", "url"),
    "an old lock's sha256": (OLD_LOCK, f'sha256 = "{HEX64}"', 'sha256 = "abc"', "[[package]] entry 1 (torch)", "sha256"),
    "a pylock's package index": (PYLOCK, 'index = "https://download.pytorch.org/whl/cpu"', 'index = "javascript:alert(1)"', T1,
                                 "index"),
    "a pylock's indexes": (PYLOCK, 'indexes = ["https://mirror.example/simple"]', 'indexes = ["ftp://mirror.example/simple"]',
                           "[tool.envkit]", "indexes[1]"),
    "a pylock's wheel size": (PYLOCK, "size = 10", 'size = "10; rm -rf ~"', T1, "size"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_in_a_lock_stops_setup_before_anything_is_made(tmp_path, case):
    lock, line, replacement, entry, field = CASES[case]
    assert lock.count(line) == 1  # the case changes one place of a valid lock
    name = "pylock.toml" if lock is PYLOCK else "envkit.lock" if lock is OLD_LOCK else "pylock.machine.toml"
    (tmp_path / name).write_text(lock.replace(line, replacement))
    venv = tmp_path / "venv"
    r = envkit("setup", "--lock", name, "--yes", "--no-selftest", "--installer", "pip", "--venv", str(venv), cwd=tmp_path,
               env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr  # one line, no traceback
    assert lines[0].startswith(f"envkit: error: {name}: {entry}"), lines[0]
    assert field in lines[0], lines[0]
    assert not venv.exists() and not (tmp_path / "cache").exists()  # no venv made, nothing downloaded: pip never ran


def test_the_same_locks_unbroken_are_read(tmp_path):
    """The locks the cases break, as written: read whole (the cases fail by their one change)."""
    from envkit.install.lock.read import read

    for name, text in (("pylock.machine.toml", ENVKIT_LOCK), ("envkit.lock", ENVKIT_LOCK), ("old/envkit.lock", OLD_LOCK),
                       ("pylock.toml", PYLOCK)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
        assert read(tmp_path / name).versions["torch"] == "2.6.0+cpu"


EVIL_BACKEND = '''"""A build backend that runs the moment pip imports it: what a lock must never make pip do."""
from pathlib import Path

Path(__file__).resolve().parent.parent.joinpath("PWNED").write_text("pip ran the lock's project")


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    raise RuntimeError("never built")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("never built")
'''


def test_a_lock_that_smuggles_a_project_into_pips_requirements_runs_nothing(server, venv, tmp_path):
    """`envkit setup --lock` of a pylock.machine.toml whose versions-only torch pin carries a second line,
    the path of a local project: before, pip read it as a requirement of its own and built the
    project (its build code ran, here writing PWNED) before envkit rolled the install back."""
    evil = tmp_path / "evilpkg"
    evil.mkdir()
    (evil / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n'
                                         '[project]\nname = "evilpkg"\nversion = "1"\n')
    (evil / "evil_backend.py").write_text(EVIL_BACKEND)
    (tmp_path / "pylock.machine.toml").write_text(
        f'lock-version = "1.0"\ncreated-by = "envkit"\npackages = []\n\n[tool.envkit]\nenvkit = "0.1.0"\n\n'
        f'[[tool.envkit.versions-only]]\nname = "torch"\nversion = "2.6.0+cpu\\n{evil}"\n\n'  # TOML's \n: a newline
        f'[tool.envkit.platform]\n{MACHINE}\n[tool.envkit.profile]\nname = "cpu"\n\n'
        f'[tool.envkit.source]\ntorch = "2.6.0"\nindex_urls = ["{server.url("json")}"]\n')
    before = installed(venv)
    r = envkit("setup", "--lock", "pylock.machine.toml", "--yes", "--no-selftest", "--installer", "pip", "--venv", str(venv), cwd=tmp_path,
               env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=240)
    assert not (tmp_path / "PWNED").exists(), r.stdout + r.stderr
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [(
        f"envkit: error: pylock.machine.toml: [[tool.envkit.versions-only]] entry 1 (torch): version '2.6.0+cpu\\n{evil}' is not a "
        "PEP 440 version (fix: a PEP 440 version, e.g. 1.26.4 or 2.13.0+cpu; write it again with `envkit setup` (without --lock), "
        "or restore it from version control; do not install a lock you do not trust)")]
    assert installed(venv) == before == {}


@pytest.mark.parametrize("command", [["setup", "--lock", "pylock.machine.toml", "--yes", "--venv", "venv"],
                                     ["check", "--lock", "pylock.machine.toml"], ["lock", "--from", "pylock.machine.toml"]])
def test_every_command_that_reads_a_lock_gets_it_checked(tmp_path, command):
    """One reader checks, so each command refuses the same lock with the same line."""
    lock, line, replacement, entry, _ = CASES["a newline and a path in a version"]
    (tmp_path / "pylock.machine.toml").write_text(lock.replace(line, replacement))
    r = envkit(*command, cwd=tmp_path, env={"ENVKIT_CACHE_DIR": str(tmp_path / "cache")}, timeout=120)
    assert (r.returncode, r.stdout) == (2, ""), r.stdout + r.stderr
    assert r.stderr.splitlines() == [f"envkit: error: pylock.machine.toml: {entry}: version '3.1.4\\n/tmp/evilpkg' is not a PEP 440 "
                                     "version (fix: a PEP 440 version, e.g. 1.26.4 or 2.13.0+cpu; write it again with `envkit "
                                     "setup` (without --lock), or restore it from version control; do not install a lock you do "
                                     "not trust)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pylock.machine.toml"]  # no venv, no cache, no pylock.toml
