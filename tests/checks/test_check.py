"""`envkit check`: gates for CI, exit codes, JSON and GitHub formats."""

from __future__ import annotations

import json

import pytest

from conftest import envkit, snapshot_path


def test_requirements_hold_and_fail_on_a_replayed_mac():
    snap = str(snapshot_path("m3_max_macos14"))
    r = envkit("check", "--replay", snap, "--require", "torch>=2.5", "--require", "macos>=14", "--require", "mps",
               "--require", "python>=3.10")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4/4 gates hold" in r.stdout
    r = envkit("check", "--replay", str(snapshot_path("m1_pro_macos12")), "--require", "macos>=14", "--require", "mps")
    assert r.returncode == 1
    assert "FAIL macos>=14: macos 12.7.6 does not satisfy >=14" in r.stdout
    assert "FAIL mps:" in r.stdout and "13.0" in r.stdout


def test_json_output():
    r = envkit("check", "--replay", str(snapshot_path("linux_h100")), "--require", "driver>=550", "--require", "cuda>=12.4",
               "--require", "cuda", "--require", "torch<2.5", "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["ok"] is False
    res = {x["requirement"]: x for x in data["results"]}
    assert res["driver>=550"]["ok"] and res["driver>=550"]["found"] == "550.54.15"
    assert res["cuda>=12.4"]["ok"] and res["cuda"]["ok"]
    assert not res["torch<2.5"]["ok"] and res["torch<2.5"]["found"] == "2.5.1+cu124"


def test_github_annotations():
    r = envkit("check", "--replay", str(snapshot_path("intel_mac")), "--require", "mps", "--require", "torch>=2.3",
               "--format", "github")
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("::error title=envkit check::") for line in lines)


def test_github_annotations_point_at_the_line_are_escaped_merged_and_say_warnings(tmp_path):
    """A failed gate from pyproject.toml names its file and line; a value holding `%`, CR or LF stays
    one annotation (GitHub's escaping); a gate given twice is annotated once; doctor's warnings are
    ::warning (and `warn` in text, where they used to read `ok`); an invalid gate is an annotation too."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.envkit]\nrequire = [\n  "python>=3.10",\n'
                                             '  "torch>=99",\n]\n')
    r = envkit("check", "--replay", str(snapshot_path("intel_mac")), "--require", "torch>=99", "--format", "github", cwd=tmp_path)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 1 and lines == ["::error file=pyproject.toml,line=7,title=envkit check::torch>=99: torch 2.2.2 does "
                                           "not satisfy >=99"], r.stdout
    (tmp_path / "no-gates").mkdir()  # no gates: doctor's checks are judged
    r = envkit("check", "--replay", str(snapshot_path("linux_rocm_mi350x")), "--format", "github", cwd=tmp_path / "no-gates")
    assert any(line.startswith("::warning title=envkit check::rocm-xpu: ") for line in r.stdout.splitlines()), r.stdout
    r = envkit("check", "--replay", str(snapshot_path("linux_rocm_mi350x")), cwd=tmp_path / "no-gates")
    assert any(line.startswith("warn rocm-xpu: ") for line in r.stdout.splitlines()), r.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.envkit]\nrequire = ["X%0A::error::injected"]\n')
    r = envkit("check", "--format", "github", cwd=tmp_path)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stdout
    assert lines[0].startswith("::error file=pyproject.toml,line=2,title=envkit check%3A invalid gate::") and "X%250A" in lines[0]


def test_nightly_satisfies_a_lower_bound():
    r = envkit("check", "--replay", str(snapshot_path("m4_pro_nightly")), "--require", "torch>=2.10")
    assert r.returncode == 0, r.stdout


def test_pyproject_gates(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.envkit]\nrequire = ["python>=3.10", "mps"]\n')
    r = envkit("check", "--replay", str(snapshot_path("linux_no_gpu")), cwd=tmp_path)
    assert r.returncode == 1
    assert "ok   python>=3.10" in r.stdout and "FAIL mps: not a Mac" in r.stdout


@pytest.mark.parametrize("req,needle", [
    ("torch>>2", "invalid version specifier '>>2'"),
    ("torch=>2", "invalid version specifier"),
    ("frobnicate", "needs a version specifier"),
    ("", "invalid requirement"),
])
def test_invalid_gate_exits_2(req, needle):
    r = envkit("check", "--require", req)
    assert r.returncode == 2
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_pyproject_exits_2(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.envkit\nrequire = 1")
    r = envkit("check", cwd=tmp_path)
    assert r.returncode == 2 and "pyproject.toml" in r.stderr and "invalid TOML" in r.stderr


def test_no_gates_judges_doctor_checks_on_this_machine():
    r = envkit("check")
    assert r.returncode == 0, r.stdout
    assert "ok   torch:" in r.stdout


def test_a_misspelt_package_gate_names_the_installed_one():
    r = envkit("check", "--require", "torhc>=2", "--require", "pyyalm>=5")
    assert r.returncode == 1
    assert "FAIL torhc>=2: torhc is not installed (did you mean 'torch'?) (fix: --require 'torch>=2')" in r.stdout
    assert "FAIL pyyalm>=5: pyyalm is not installed (did you mean 'pyyaml'?) (fix: --require 'pyyaml>=5')" in r.stdout


def test_junit_report_has_a_case_per_gate_and_a_failure_for_each_that_did_not_hold():
    import xml.etree.ElementTree as ET

    r = envkit("check", "--replay", str(snapshot_path("intel_mac")), "--require", "torch>=99", "--require", "python>=3.8",
               "--format", "junit")
    suite = ET.fromstring(r.stdout)  # stdout holds the XML alone
    assert r.returncode == 1 and (suite.get("tests"), suite.get("failures")) == ("2", "1")
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["torch>=99"]


def test_drift_is_annotated_at_the_packages_entry_in_the_lock(tmp_path):
    from envkit.checks.annotations import drift_annotations

    lock = tmp_path / "pylock.toml"
    lock.write_text('lock-version = "1.0"\n\n[[packages]]\nname = "numpy"\nversion = "2.2.6"\n\n'
                    '[[packages]]\nname = "tqdm"\nversion = "4.67.1"\n')
    drift = {"changed_versions": {"numpy": {"lock": "2.2.6", "installed": "2.1.0"}}, "removed": {"tqdm": "4.67.1"},
             "added": {"rich": "15.0.0"}}
    assert drift_annotations(drift, str(lock)) == [
        f"::error file={lock},line=4,title=envkit lock drift::numpy: 2.2.6 in the lock, 2.1.0 installed",
        f"::error file={lock},line=8,title=envkit lock drift::tqdm 4.67.1 is in the lock but not installed",
        f"::error file={lock},title=envkit lock drift::rich 15.0.0 is installed but not in the lock"]
