"""The eckpt command that the wheel installs with the package (scripts/wheel.sh): on the
environment's PATH, the released build (no fault injection), with its man pages and completions."""

import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

COMMAND = Path(sysconfig.get_path("scripts")) / "eckpt"


def run(*args):
    # Without the developer's configuration files.
    env = {**os.environ, "HOME": "/nonexistent", "XDG_CONFIG_HOME": "/nonexistent"}
    env["ECKPT_SITE_CONFIG"] = "/nonexistent/eckpt.toml"
    return subprocess.run([COMMAND, *args], capture_output=True, text=True, timeout=60, env=env)


def test_the_wheel_installs_the_command_next_to_python():
    assert COMMAND.is_file() and os.access(COMMAND, os.X_OK), COMMAND
    version = run("--version")
    assert version.returncode == 0, version.stderr
    # The command and the package are one version: the wheel's.
    assert version.stdout.strip() == f"eckpt {metadata.version('eckpt')}"


def test_the_command_is_the_released_build():
    debug = run("debug")
    assert debug.returncode == 2 and "unrecognized subcommand 'debug'" in debug.stderr, debug.stderr


def test_man_pages_and_completions_are_installed_under_the_prefix():
    share = Path(sys.prefix) / "share"
    for page in ("eckpt.1", "eckpt-run.1", "eckpt-bench-cluster.1"):
        assert (share / "man" / "man1" / page).is_file(), page
    assert (share / "bash-completion" / "completions" / "eckpt").is_file()
    assert (share / "zsh" / "site-functions" / "_eckpt").read_text().startswith("#compdef eckpt")
