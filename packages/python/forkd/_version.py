"""The one version number shared by every forkd package (tests/test_packaging.py checks it
against package.json and pyproject.toml)."""

VERSION = "0.1.0"
