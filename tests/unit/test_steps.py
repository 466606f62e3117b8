from __future__ import annotations

import re

import pytest

from dockerarch import paths, steps
from dockerarch.recipes import load_recipes
from dockerarch.render import for_generate, plan, render
from dockerarch.targets import load_targets
from tests.unit.trees import source_for

RECIPES = load_recipes()
TARGETS = load_targets()


def _titles(dockerfile: str) -> list[str]:
    """Every step as buildx titles it: ``[stage n/m] COMMAND`` with continuations joined."""
    joined = re.sub(r"\\\n", "", dockerfile)
    stages: dict[str, list[str]] = {}
    stage = ""
    for line in joined.splitlines():
        found = re.match(r"^FROM \S+(?: \S+)* AS (\S+)$", line) or re.match(r"^FROM (\S+)$", line)
        if found:
            stage = found.group(1)
            stages[stage] = [line]
        elif re.match(r"^(RUN|COPY) ", line):
            stages[stage].append(line)
    return [
        f"[{name} {i + 1}/{len(lines)}] {line}"
        for name, lines in stages.items()
        for i, line in enumerate(lines)
    ]


def _dockerfile(recipe: str, target: str, mode: str) -> str:
    package = "zstandard==0.23.0" if recipe == "wheel" else None
    if not RECIPES[recipe].supports(TARGETS[target]):  # an amd64-only recipe (glow)
        target = RECIPES[recipe].targets[0]
    (request,) = plan(recipe, arch=None, target=target, version=None, package=package, settings={},
                      source=source_for(RECIPES[recipe]))  # fmt: skip
    return render(for_generate(request, mode), paths.template_dirs())


@pytest.mark.parametrize("mode", ["hybrid", "none"])
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_step_of_every_recipe_reads_as_words(recipe: str, mode: str) -> None:
    titles = _titles(_dockerfile(recipe, "debian-armv7", mode))
    assert titles
    for title in titles:
        words = steps.describe(title, subject=recipe)
        assert len(words) <= 60, (title, words)
        # No shell or buildx noise reaches the progress line.
        for noise in ("--mount", "/run/secrets", "if [", "&&", "\\"):
            assert noise not in words, (title, words)


def test_the_wheel_recipes_steps_say_what_they_do() -> None:
    said = [
        steps.describe(t, subject="zstandard")
        for t in _titles(_dockerfile("wheel", "debian-armv7", "hybrid"))
    ]
    # every native driver (make, cmake, ninja-build) and python3-yaml: one toolchain per target
    assert "native toolchain: apt: 12 packages" in said
    assert "native toolchain: apt: 1 package" in said  # pip, beside them, for uv and the wheels
    assert "native toolchain: installing uv" in said
    assert "native toolchain: collecting gcc 12 for arm-linux-gnueabihf" in said
    # the image's own stage: the collected tree on the native Python, not the packages
    assert "native toolchain: taking the collected tree" in said
    assert "native toolchain: linking uv" in said
    assert "fetching zstandard==0.23.0 from the index" in said
    assert "grafting the native cross compiler" in said
    assert "checking the grafted compiler, the native build driver" in said
    assert "compiling zstandard with uv" in said
    assert "runtime image: installing the artifacts" in said
    assert any(re.fullmatch(r"apt: \d+ packages", s) for s in said)
    # python3 and python3-pip, installed by apt-install (its two paths are not packages)
    assert "runtime packages: apt: 2 packages" in said
    assert "native Python: apt: 3 packages" in said  # python3, pyelftools, packaging
    assert "native apt: package lists for armhf" in said


@pytest.mark.parametrize(
    ("title", "words"),
    [
        (
            "[internal] load metadata for docker.io/dockerarch/base/debian-amd64:bookworm",
            "reading the build context",
        ),
        ("[context source] load from client", "reading the build context"),
        (
            "[build 6/9] RUN --mount=type=cache,id=x,target=/c     cmake -B build -G Ninja",
            "compiling vaccel with cmake",
        ),
        (
            "[build 6/9] RUN --mount=type=cache,id=x,target=/c     meson setup build",
            "compiling vaccel with meson",
        ),
        ("[build 5/9] COPY --from=source . /src/vaccel", "copying the --source tree"),
        (
            "[build 4/9] RUN git clone --depth 1 https://example.invalid/x.git /src/x",
            "cloning https://example.invalid/x.git",
        ),
        ("[build 3/9] RUN echo one two three", "echo one two three"),
        (
            "[toolchain-stage 3/4] RUN --mount=type=bind,source=x,target=/dockerarch     python3"
            " /dockerarch/native-wheels /toolchain/usr/lib/dockerarch/wheels cmake ninja",
            "native toolchain: fetching the native cmake, ninja wheels",
        ),
        (  # a plain build fetches, unpacks and builds in one step: it is the compile
            "[build 3/3] RUN python3 -m pip download --dest /src/sdist x && tar -xzf"
            " /src/sdist/*.tar.gz -C /src/x && python3 -m pip wheel -v --wheel-dir /out /src/x",
            "compiling vaccel with pip",
        ),
        (
            "[runtime 2/3] RUN apt-get install -y --no-install-recommends  python3",
            "runtime packages: apt: 1 package",
        ),
    ],
)
def test_titles_to_words(title: str, words: str) -> None:
    assert steps.describe(title, subject="vaccel") == words


def test_an_unknown_long_command_is_cut_to_one_short_line() -> None:
    words = steps.describe("[build 3/9] RUN " + "x" * 200)
    assert len(words) == 60 and words.endswith("...")


@pytest.mark.parametrize("mode", ["hybrid", "none"])
def test_a_debian_source_package_step_says_what_it_fetches(mode: str) -> None:
    (request,) = plan(
        "torch",
        arch=None,
        target="trixie-armv7",
        version=None,
        package=None,
        settings={"SOURCE": "debian"},
    )
    dockerfile = render(for_generate(request, mode), paths.template_dirs())
    said = [steps.describe(t, subject="torch") for t in _titles(dockerfile)]
    assert "fetching Debian's source package pytorch" in said
    # hybrid: fetched natively, then handed to the emulated build stage
    assert ("copying the natively fetched sources" in said) == (mode == "hybrid")
    assert "compiling torch with setup.py" in said
    assert said.index("applying the recipe's patches") < said.index("compiling torch with setup.py")
