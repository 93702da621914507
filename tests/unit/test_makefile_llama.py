"""The test tools' install step of the Makefile (issue 38, row 12), read with `make -n`, which
prints the commands without running any: llama-cpp-python is built once per machine into a
folder outside the clone, with pip's build output shown, and installed from there after."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def recipe(home: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The commands `make` would run to install the test tools into a fresh venv."""
    # `make test` is what runs the suite, so make is there wherever this runs.
    assert shutil.which("make") is not None, "make is not installed (apt-get install make)"
    venv = tmp_path_factory.mktemp("clone") / ".venv"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}  # no XDG_CACHE_HOME
    done = subprocess.run(["make", "-n", "-B", "-C", str(ROOT), f"VENV={venv}",
                           f"{venv}/.installed-test"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.replace("\\\n", " ")


def commands(recipe: str, pattern: str) -> list[str]:
    """The shell commands (split at ;, && and newlines) that match `pattern`."""
    return [c.strip() for c in re.split(r"\n|;|&&", recipe) if re.search(pattern, c)]


def pinned_llama() -> str:
    test_extra = re.search(r"^test = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(),
                           re.M | re.S)
    assert test_extra
    found = re.search(r'"(llama-cpp-python[^"]*)"', test_extra.group(1))
    assert found, "the test tools no longer include llama-cpp-python"
    return found.group(1)


def wheel_folder(recipe: str) -> Path:
    (build,) = commands(recipe, r"pip wheel")
    found = re.search(r'--wheel-dir "([^"]+)"', build)
    assert found, build
    return Path(found.group(1))


def test_the_wheel_is_kept_outside_the_clone_where_a_fresh_clone_finds_it(
        recipe: str, home: Path) -> None:
    folder = wheel_folder(recipe)
    assert folder.is_relative_to(home / ".cache" / "outlive" / "wheels"), folder
    assert not folder.is_relative_to(ROOT)
    # every install of llama-cpp-python and of the test tools looks there
    installs = commands(recipe, r"pip install .*(llama-cpp-python|\.\[test\])")
    assert len(installs) >= 2
    for install in installs:
        assert f'--find-links "{folder}"' in install, install


def test_the_build_shows_pips_own_output_and_is_portable(recipe: str) -> None:
    (build,) = commands(recipe, r"pip wheel")
    assert "--verbose" in build.split()
    assert "--quiet" not in build and " -q" not in build
    assert "--no-cache-dir" in build  # pip's cache ignores CMAKE_ARGS: never a native build
    assert "-DGGML_NATIVE=OFF" in build and build.startswith("CMAKE_ARGS=")
    assert f'"{pinned_llama()}"' in build


def test_the_wheel_built_before_is_tried_first(recipe: str) -> None:
    first = recipe.index("--no-index")
    assert first < recipe.index("pip wheel")
    (cached, *_) = commands(recipe, r"--no-index")
    assert f'"{pinned_llama()}"' in cached and "--no-deps" in cached


def test_it_says_once_how_long_the_build_takes_and_why(recipe: str) -> None:
    notices = commands(recipe, r"echo .*compiles llama\.cpp")
    assert len(notices) == 1
    assert re.search(r"about \d+ minutes", notices[0])
    assert str(wheel_folder(recipe)) in notices[0]
    assert recipe.index(notices[0]) < recipe.index("pip wheel")
