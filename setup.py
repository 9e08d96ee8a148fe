from setuptools import find_packages, setup

# profiles/ and templates/ (top level) ship as envkit._profiles / envkit._templates (package-dir in
# pyproject.toml); find_packages cannot see them under those names, so they are added here.
setup(packages=find_packages(include=["envkit", "envkit.*"]) + ["envkit._profiles", "envkit._templates"])
