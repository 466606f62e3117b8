"""Compile farm pieces that need no engine: server addresses, the hosts line a build gives distcc,
the probe's verdicts, where compiles ran, the server image and the farm: section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dockerarch import farm
from dockerarch.config import (
    FarmServer,
    parse_farm_server,
    parse_farm_servers,
    parse_registry_config,
)
from dockerarch.errors import ConfigError, UsageError
from dockerarch.targets import load_targets


def test_servers_parse_as_distcc_writes_hosts() -> None:
    assert parse_farm_server("10.0.0.5") == FarmServer("10.0.0.5", 3632, None)
    assert parse_farm_server("buildbox:4000/8") == FarmServer("buildbox", 4000, 8)
    servers = parse_farm_servers(["10.0.0.5,10.0.0.6:3633", " 10.0.0.5 ", ""])
    assert [s.address for s in servers] == ["10.0.0.5:3632", "10.0.0.6:3633"]
    assert parse_farm_server("127.0.0.2").loopback and parse_farm_server("localhost").loopback
    assert not parse_farm_server("10.0.0.5").loopback


@pytest.mark.parametrize(
    ("bad", "says"),
    [("not a host!", "is not a farm server"), ("-x", "is not a farm server"),
     ("a;rm -rf /", "is not a farm server"), ("host:99999", "has a port or slot count out of range"),
     ("host:1/0", "has a port or slot count out of range")],
)  # fmt: skip
def test_a_bad_server_is_refused_with_the_form_it_takes(bad: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_farm_server(bad)
    assert caught.value.problem == f"'{bad}' {says}"
    assert "HOST[:PORT]" in caught.value.fix or "1 to 65535" in caught.value.fix


def test_the_hosts_line_randomizes_and_keeps_this_machine_as_one_more_place() -> None:
    two = [FarmServer("10.0.0.5"), FarmServer("10.0.0.6", 3633, 8)]
    line = farm.hosts_line(two, local_slots=2)
    assert line == "--randomize 10.0.0.5:3632,lzo 10.0.0.6:3633/8,lzo localhost/2"
    assert farm.hosts_line(two[:1], local_slots=0) == "10.0.0.5:3632,lzo"


def test_allow_takes_networks_and_refuses_anything_else() -> None:
    assert farm.check_allow(["10.0.0.0/24,127.0.0.1", "::1"]) == ("10.0.0.0/24", "127.0.0.1", "::1")
    with pytest.raises(UsageError, match="not an address or network"):
        farm.check_allow(["everyone"])
    with pytest.raises(UsageError, match="needs the networks it serves"):
        farm.check_allow([])


@pytest.mark.parametrize("wide", ["0.0.0.0/0", "::/0", "1.2.3.4/0", "10.0.0.0/7", "2001:db8::/32"])
def test_allow_refuses_networks_wider_than_a_user_means_unless_said(wide: str) -> None:
    # distccd has no authentication: everyone --allow lets in runs compilers on the host
    with pytest.raises(UsageError) as err:
        farm.check_allow(["10.0.0.0/24", wide])
    assert f"--allow {wide} lets" in err.value.problem and "no password" in err.value.problem
    assert "--unsafe-allow-wide-network" in err.value.fix
    assert farm.check_allow([wide], wide=True) == (wide,)
    assert farm.check_allow(["10.0.0.0/8", "2001:db8:1::/48"]) == ("10.0.0.0/8", "2001:db8:1::/48")


def test_the_server_runs_distccd_in_the_foreground_logging_each_compile() -> None:
    argv = farm.serve_command(FarmServer("127.0.0.2", 4000), ["127.0.0.0/8"], jobs=3)
    assert argv[:3] == ["distccd", "--daemon", "--no-detach"]
    assert ["--listen", "127.0.0.2"] == argv[argv.index("--listen") : argv.index("--listen") + 2]
    assert "--log-stderr" in argv and ["--allow", "127.0.0.0/8"] == argv[-2:]
    assert argv[argv.index("--port") + 1] == "4000" and argv[argv.index("--jobs") + 1] == "3"


PROBE = """\
digest 13aeb23170553672a724de1e253bfefb33f80982b340b53bc71b803694884234
server 10.0.0.5:3632 0
server 10.0.0.6:3632 110
why 10.0.0.6:3632 ERROR: compile /tmp/probe.c on 10.0.0.6:3632 failed with exit code 110
server 10.0.0.7:3632 1
why 10.0.0.7:3632 ERROR: nonblocking connect to 10.0.0.7:3632 failed: Connection refused
server 10.0.0.8:3632 124
"""


def test_the_probe_keeps_servers_with_the_toolchain_and_says_why_others_are_left_out() -> None:
    servers = [FarmServer(f"10.0.0.{n}") for n in (5, 6, 7, 8, 9)]
    probe = farm.read_probe(servers, PROBE, "debian-armv7")
    assert probe.digest.startswith("13aeb231")
    assert probe.usable == (servers[0],)
    why = {s.host: reason for s, reason in probe.refused}
    assert why["10.0.0.6"].startswith("answers, but has not got debian-armv7's toolchain")
    assert "sha256:13aeb23170553672" in why["10.0.0.6"]
    assert why["10.0.0.7"] == why["10.0.0.8"] == "does not answer"
    assert why["10.0.0.9"] == "was not probed"
    said: list[str] = []
    farm.say_refused(probe, said.append)
    assert said[0].startswith("warning: farm server 10.0.0.6:3632 left out: it answers")


def test_the_probe_names_the_compiler_by_the_toolchain_digest() -> None:
    command = farm.probe_command([FarmServer("10.0.0.5")], "arm-linux-gnueabihf")
    assert "DISTCC_FALLBACK=0" in command  # a server that fails must not pass by compiling here
    assert 'dockerarch-$(echo "$digest" | cut -c1-16)-arm-linux-gnueabihf-gcc' in command
    # the toolchain image holds the collected tree and its x86-64 libraries, not the packages
    assert "export LD_LIBRARY_PATH=/toolchain/usr/lib/x86_64-linux-gnu\n" in command
    # a native build's tree is in place at /: the system's own libraries
    native = farm.probe_command([FarmServer("10.0.0.5")], "x86_64-linux-gnu", farm.NATIVE_TREE)
    assert "LD_LIBRARY_PATH" not in native
    assert farm.compiler_name("ab" * 32, "aarch64-linux-gnu", "g++") == (
        "dockerarch-abababababababab-aarch64-linux-gnu-g++"
    )


def test_placement_counts_every_compile_and_each_server_that_failed() -> None:
    log = (
        "10.0.0.5:3632 ok\n10.0.0.5:3632 ok\nlocalhost ok\n"
        "localhost ok retried-after 10.0.0.6:3632\n10.0.0.5:3632 failed\n"
        "localhost ok retried-after 10.0.0.6:3632,10.0.0.7:3632\n\n"
    )
    placed = farm.Placement.parse(log)
    assert placed.places == {"10.0.0.5:3632": 3, "localhost": 3}
    assert placed.retried == {"10.0.0.6:3632": 2, "10.0.0.7:3632": 1}
    assert placed.failed == 1 and placed.total == 6
    lines = placed.lines()
    assert lines[0] == "farm: 6 compiles: 3 on 10.0.0.5:3632, 3 on this machine"
    assert "farm: 10.0.0.6:3632 failed 2 compiles, done again elsewhere" in lines
    assert farm.Placement.parse("").lines() == []


def test_the_server_image_installs_each_targets_cross_compiler_under_digest_names() -> None:
    targets = load_targets()
    chosen = [targets["debian-armv7"], targets["debian-aarch64"]]
    image = farm.server_image(chosen, targets["debian-amd64"])
    text = image.dockerfile
    assert text.startswith("# Generated by dockerarch: a compile farm server for debian-aarch64")
    assert f"FROM --platform=linux/amd64 {targets['debian-amd64'].base_image} AS server" in text
    for package in ("distcc", "gcc-12-arm-linux-gnueabihf", "g++-12-aarch64-linux-gnu"):
        assert f" {package}" in text
    # Only the digest names are whitelisted: distcc's own list of compilers is emptied first.
    assert "rm -f /usr/lib/distcc/*" in text
    assert "sh /dockerarch/toolchain-id arm-linux-gnueabihf armhf" in text
    assert "ln -s ../../bin/distcc /usr/lib/distcc/$name" in text
    assert image.tag.startswith("dockerarch/farm:")
    assert farm.server_image(chosen[:1], targets["debian-amd64"]).tag != image.tag


def test_the_farm_section_of_registry_yaml(tmp_path: Path) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text(
        "registry: {address: 127.0.0.1:5000}\nfarm:\n  servers: [10.0.0.5, 'b:4000/8']\n"
    )
    assert parse_registry_config(path).farm == (FarmServer("10.0.0.5"), FarmServer("b", 4000, 8))
    path.write_text("registry: {address: 127.0.0.1:5000}\nfarm: {servers: ['x y']}\n")
    with pytest.raises(ConfigError, match=r"farm\.servers"):
        parse_registry_config(path)
    path.write_text("registry: {address: 127.0.0.1:5000}\nfarm: {hosts: [a]}\n")
    with pytest.raises(ConfigError):
        parse_registry_config(path)
    path.write_text("registry: {address: 127.0.0.1:5000}\n")
    assert parse_registry_config(path).farm == ()


def test_a_farm_raises_the_recipes_jobs_unless_set() -> None:
    from dockerarch.render import plan

    (request,) = plan("qpulib", arch="armv7", target=None, version=None, package=None, settings={})
    assert request.options["MAX_JOBS"] == "2"
    servers = [FarmServer("10.0.0.5"), FarmServer("10.0.0.6", 3632, 8)]
    raised = farm.with_farm_jobs(request, servers, 2, fixed=False)
    assert raised.options["MAX_JOBS"] == str(2 + 4 + 8)
    assert raised.options["QPU"] == request.options["QPU"]  # nothing else moves
    assert farm.with_farm_jobs(request, servers, 2, fixed=True) is request  # --set MAX_JOBS=N
    assert farm.with_farm_jobs(request, [], 2, fixed=False) is request  # every server refused


def test_slots_cannot_take_jobs_past_what_the_recipe_allows() -> None:
    from dockerarch.render import plan

    requests = plan("qpulib", arch="armv7", target=None, version=None, package=None, settings={})
    farm.check_farm_jobs(requests, [FarmServer("a", 3632, 999)], 0)  # 999: what MAX_JOBS takes
    with pytest.raises(UsageError) as err:
        farm.check_farm_jobs(requests, parse_farm_servers(["a/999,b/999"]), 2)
    assert "would set MAX_JOBS=2000" in err.value.problem and "qpulib" in err.value.problem
    assert "--set MAX_JOBS=N" in err.value.fix


def test_a_native_target_is_served_its_own_suite_s_gcc_beside_the_cross_compilers() -> None:
    # an amd64 target's native builds send compiles too (native-farm): the server installs that
    # suite's gcc and g++, and names them by the digest toolchain-id takes of the native packages
    targets = load_targets()
    image = farm.server_image([targets["debian-armv7"], targets["debian-amd64"]],
                              targets["debian-amd64"])  # fmt: skip
    assert "gcc-12-arm-linux-gnueabihf" in image.dockerfile
    assert re.search(r"\n +gcc-12 \\\n +g\+\+-12 \\\n", image.dockerfile), image.dockerfile
    assert "toolchain-id x86_64-linux-gnu amd64" in image.dockerfile
    assert "/usr/bin/x86_64-linux-gnu-$tool-12" in image.dockerfile


def test_targets_of_two_suites_are_refused_before_the_engine_is_asked(tmp_path: Path) -> None:
    targets = load_targets()
    with pytest.raises(UsageError) as err:
        farm.serve([targets["debian-armv7"], targets["trixie-amd64"]], FarmServer("127.0.0.2"),
                   allow=["127.0.0.0/8"], jobs=1, work=tmp_path, say=lambda _l: None)  # fmt: skip
    assert "different Debian suites (debian-amd64, trixie-amd64)" in err.value.problem
    assert "one farm server per suite" in err.value.fix
