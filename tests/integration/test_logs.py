"""A step that prints more than BuildKit's default step log limit (2 MiB) keeps reaching the
build's log and progress: scripts/setup-host starts dockerd without the limit, as a torch
compile step passes 2 MiB within minutes (its [N/M] counts and any error come after)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import dockerarch

TEMPLATE = """\
{% extends "_partials/layout.Dockerfile.j2" %}
{% block build %}
RUN i=0; while [ $i -lt 30000 ]; do echo "chatter $i: a compiler line as long as torch prints them, with its flags -DA -DB -I/src/include"; i=$((i+1)); done; \\
    for n in 1 2 3 4; do echo "[$n/4] Building C object after-the-limit-$n.o"; sleep 0.2; done; \\
    mkdir -p /stage && echo ok > /stage/ok && tar -C /stage -czf /out/chatty-1.0.tar.gz .
{% endblock %}
"""


def test_a_step_past_two_mebibytes_of_output_keeps_its_log_and_progress(tmp_path: Path) -> None:
    context = tmp_path / "contexts" / "chatty"
    context.mkdir(parents=True)
    (context / "recipe.yaml").write_text(
        "description: a step that prints 3 MiB, for the tests\n"
        'versions: {known: ["1.0"], default: "1.0"}\nartifacts: [tarball]\n'
    )
    (tmp_path / "dockerfiles").mkdir()
    (tmp_path / "dockerfiles" / "chatty.Dockerfile.j2").write_text(TEMPLATE)
    done = dockerarch("build", "chatty", "--arch", "armv7", "--accel", "none", "--no-cache", "--no-smoke",
                      "--out", str(tmp_path / "dist"), cwd=tmp_path, timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    log = (tmp_path / "dist" / "debian-armv7" / "chatty-1.0" / "build.log").read_text()
    assert "output clipped" not in log and "the engine clipped" not in done.stderr
    assert log.count("chatter ") >= 30000 and len(log) > 3 * 2**20
    assert "[4/4] Building C object after-the-limit-4.o" in log
    assert "[4/4]" in done.stderr  # the progress saw the count


def test_forty_megabytes_of_progress_stream_through_in_one_pass() -> None:
    """buildx's progress reaches dockerarch through engine.stream_stdout_and_stderr (installed
    over python-on-whales' own, whose `full_stderr += line` copies the whole log for every line:
    a 40 MB log took it tens of minutes after buildx had ended). Every line arrives, in order,
    and a failure still raises python-on-whales' exception with the whole stderr."""
    from python_on_whales.components.buildx import cli_wrapper
    from python_on_whales.exceptions import DockerException

    from dockerarch import engine

    engine._linear_streams()
    assert cli_wrapper.stream_stdout_and_stderr is engine.stream_stdout_and_stderr
    lines = 400_000  # 100 bytes each, on stderr as buildx's plain progress is
    script = (f"i=0; while [ $i -lt {lines} ]; do "
              'printf "#12 1.0 %091d\\n" $i >&2; i=$((i+1)); done; echo done; exit 3')  # fmt: skip
    seen, count, last = 0, 0, b""
    with pytest.raises(DockerException) as err:
        for name, line in cli_wrapper.stream_stdout_and_stderr(["sh", "-c", script]):
            if name == "stderr":
                count += 1
                seen += len(line)
                last = line
    assert count == lines and seen == lines * 100 and last.strip().endswith(b"%d" % (lines - 1))
    assert err.value.return_code == 3 and len(err.value.stderr) == lines * 100
