"""A step that prints more than BuildKit's default step log limit (2 MiB) keeps reaching the
build's log and progress: scripts/setup-host starts dockerd without the limit, as a torch
compile step passes 2 MiB within minutes (its [N/M] counts and any error come after)."""

from __future__ import annotations

from pathlib import Path

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
