"""Reading and writing a registry's manifests: the one module that speaks the registry's HTTP API.

It goes through oras-py (the maintained Python OCI client): its session, TLS settings and
credentials, which it reads from docker's own store (``docker login``: the config file and its
credential helpers). dockerarch never takes a password itself. oras-py's own retry (five tries,
3 to 83 s apart, on any error) is replaced by one small, named policy, ``RETRIES``, used for
every registry call here and for the engine's pushes (see ``publish``): transient failures —
connection reset, EOF, 5xx, 408, 429 — are tried again after 1 s, 3 s and 9 s, as
go-containerregistry does; anything else fails at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dockerarch.config import RegistryConfig
from dockerarch.errors import DockerarchError

if TYPE_CHECKING:
    import requests
    from oras.provider import Registry

T = TypeVar("T")

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = (OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# How a transient failure reads in docker's own messages (docker push).
_TRANSIENT_TEXT = re.compile(
    r"connection reset|broken pipe|\bEOF\b|unexpected EOF|i/o timeout|TLS handshake timeout|"
    r"server closed|connection was closed|\b(408|429|500|502|503|504)\b|Service Unavailable|"
    r"Bad Gateway|Too Many Requests|Internal Server Error",
    re.IGNORECASE,
)


class RegistryError(DockerarchError):
    """A registry refused, failed or did not answer."""

    exit_code = 9


class RegistryAuthError(RegistryError):
    """The registry wants credentials docker's store does not have (or has wrong)."""


def login_hint(address: str) -> str:
    return (
        f'Log in first with docker\'s own store: echo "$PASSWORD" | docker login {address} '
        "--username USER --password-stdin (dockerarch never takes a password)."
    )


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Try once, then once more after each delay, for failures that ``transient`` accepts."""

    delays: tuple[float, ...] = (1.0, 3.0, 9.0)

    @property
    def tries(self) -> int:
        return len(self.delays) + 1

    def run(
        self,
        what: str,
        attempt: Callable[[], T],
        *,
        transient: Callable[[Exception], bool],
        on_retry: Callable[[str], None] | None = None,
    ) -> T:
        for delay in (*self.delays, None):
            try:
                return attempt()
            except Exception as exc:
                if delay is None or not transient(exc):
                    raise
                if on_retry is not None:
                    on_retry(f"{what}: {describe(exc)}; trying again in {delay:g} s")
                time.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises


RETRIES = RetryPolicy()


class TransientStatus(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status} {reason}")
        self.status = status


def describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


def transient_text(text: str) -> bool:
    """Whether docker's message for a failed push reads as a transient failure."""
    return bool(_TRANSIENT_TEXT.search(text)) and "connection refused" not in text.lower()


def is_transient(exc: Exception) -> bool:
    import requests

    if isinstance(exc, TransientStatus):
        return True
    if isinstance(exc, requests.exceptions.SSLError):
        return False
    if isinstance(exc, requests.ConnectionError):
        return "refused" not in str(exc).lower()  # nothing listens: not a passing fault
    return isinstance(exc, (requests.Timeout, requests.exceptions.ChunkedEncodingError))


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    media_type: str
    digest: str
    size: int


@dataclass(frozen=True, kw_only=True)
class Manifest:
    media_type: str
    digest: str
    data: bytes

    def json(self) -> dict[str, Any]:
        parsed = json.loads(self.data)
        if not isinstance(parsed, dict):
            raise RegistryError(f"manifest {self.digest} is not a JSON object")
        return parsed

    def platforms(self) -> list[str]:
        """os/arch[/variant] of each child of an index."""
        found = []
        for child in self.json().get("manifests", []):
            p = child.get("platform", {})
            found.append(
                "/".join(x for x in (p.get("os"), p.get("architecture"), p.get("variant")) if x)
            )
        return found


@dataclass(frozen=True, kw_only=True)
class RemoteImage:
    """An image in a registry as its manifest and config say: what a pull by ``digest`` gets."""

    digest: str  # of its manifest (for one platform)
    labels: dict[str, str]
    platform: str  # os/arch[/variant]


def docker_config_files() -> list[str]:
    """docker's client configuration, where `docker login` stores credentials ($DOCKER_CONFIG)."""
    folder = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    path = Path(folder) / "config.json"
    return [str(path)] if path.is_file() else []


class RegistryClient:
    """One registry of registry.yaml, spoken to through oras-py with ``RETRIES``."""

    def __init__(
        self,
        config: RegistryConfig,
        *,
        policy: RetryPolicy = RETRIES,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.policy = policy
        self.say = say
        self._oras: Registry | None = None
        self._scheme = "http" if config.insecure else "https"
        self._verify: bool | str = str(config.ca) if config.ca else True

    @property
    def base_url(self) -> str:
        return f"{self._scheme}://{self.config.address}/v2"

    def _retrying(self, what: str, attempt: Callable[[], T]) -> T:
        import requests

        try:
            return self.policy.run(what, attempt, transient=is_transient, on_retry=self.say)
        except requests.exceptions.SSLError as exc:
            raise RegistryError(
                f"{what}: the TLS certificate of {self.config.address} is not trusted "
                f"({describe(exc)})",
                fix="Name the CA that signed it as registry.ca in registry.yaml (with insecure: "
                "false), or use a certificate the system trusts.",
            ) from exc
        except (requests.RequestException, TransientStatus) as exc:
            tries = self.policy.tries if is_transient(exc) else 1
            raise RegistryError(
                f"{what} at {self.config.address} failed after {tries} "
                f"{'try' if tries == 1 else 'tries'}: {describe(exc)}",
                fix=f"Check that the registry answers (dockerarch doctor; curl {self.base_url}/), "
                "then run the same command again: what was pushed is kept and not sent twice.",
            ) from exc

    def ping(self) -> str | None:
        """Check the registry answers; the auth scheme it asks for ("basic", "bearer"), if any."""
        import requests

        session = requests.Session()
        session.trust_env = False  # the user's own registry is reached directly, never by proxy

        def attempt() -> requests.Response:
            response = session.get(f"{self.base_url}/", timeout=15, verify=self._verify)
            if response.status_code in TRANSIENT_STATUS:
                raise TransientStatus(response.status_code, response.reason)
            return response

        response = self._retrying(f"reaching {self.config.address}", attempt)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            return challenge.split(" ", 1)[0].lower() or "basic"
        if response.status_code != 200:
            raise RegistryError(
                f"{self.base_url}/ answered HTTP {response.status_code}, not a registry's API",
                fix="Check registry.address in registry.yaml.",
            )
        return None

    def _client(self) -> Registry:
        if self._oras is None:
            from oras.container import Container
            from oras.provider import Registry

            scheme = self.ping()
            registry = Registry(
                hostname=self.config.address,
                insecure=self.config.insecure,
                tls_verify=self._verify,
                auth_backend="basic" if scheme in (None, "basic") else "token",
            )
            registry.session.trust_env = False
            container = Container(f"{self.config.address}/{self.config.namespace}/x")
            registry.auth.load_configs(container, configs=docker_config_files())
            # oras' basic backend keeps what it found in docker's store as _basic_auth; nothing
            # there for a registry that asks for basic auth means nobody logged in.
            if scheme == "basic" and not getattr(registry.auth, "_basic_auth", None):
                raise self._auth_error(f"reaching {self.config.address}")
            self._oras = registry
        return self._oras

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> requests.Response:
        from oras.provider import Registry

        registry = self._client()
        # One try of oras' request (its auth handling included): the retries are this module's.
        single = Registry.do_request.__wrapped__

        def attempt() -> requests.Response:
            try:
                response: requests.Response = single(
                    registry, f"{self.base_url}/{path}", method, data=data,
                    headers=dict(headers or {}),
                )  # fmt: skip
            except ValueError as exc:  # oras: "Cannot respond to request for authentication."
                raise self._auth_error(what) from exc
            if response.status_code in TRANSIENT_STATUS:
                raise TransientStatus(response.status_code, response.reason)
            return response

        response = self._retrying(what, attempt)
        if response.status_code in (401, 403):
            raise self._auth_error(what)
        return response

    def _auth_error(self, what: str) -> RegistryAuthError:
        return RegistryAuthError(
            f"{what}: {self.config.address} refused the request: it needs credentials and "
            "docker's store has none for it, or wrong ones",
            fix=login_hint(self.config.address),
        )

    def check_access(self, repository: str) -> None:
        """Fail now, before anything is pushed, when the registry wants a login docker lacks."""
        self._request(f"listing tags of {repository}", "GET", f"{repository}/tags/list")

    def find(self, repository: str, reference: str) -> Descriptor | None:
        """The manifest ``reference`` (a tag or digest) of ``repository``, or None."""
        response = self._request(
            f"looking up {repository}@{reference}" if reference.startswith("sha256:")
            else f"looking up {repository}:{reference}",
            "HEAD", f"{repository}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )  # fmt: skip
        if response.status_code == 404:
            return None
        self._expect(response, 200, f"looking up {repository}:{reference}")
        return Descriptor(
            media_type=response.headers.get("Content-Type", "").split(";")[0],
            digest=response.headers.get("Docker-Content-Digest", ""),
            size=int(response.headers.get("Content-Length", "0")),
        )

    def manifest(self, repository: str, reference: str) -> Manifest | None:
        """The manifest's exact bytes (its digest is theirs), or None when there is none."""
        what = f"reading {repository}:{reference}"
        response = self._request(
            what, "GET", f"{repository}/manifests/{reference}",
            headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )  # fmt: skip
        if response.status_code == 404:
            return None
        self._expect(response, 200, what)
        data = response.content
        return Manifest(
            media_type=response.headers.get("Content-Type", "").split(";")[0],
            digest=digest_of(data),
            data=data,
        )

    def put_manifest(self, repository: str, reference: str, data: bytes, media_type: str) -> str:
        """Store a manifest under ``reference``; its digest, checked against what was sent."""
        what = f"writing {repository}:{reference}"
        response = self._request(
            what, "PUT", f"{repository}/manifests/{reference}",
            headers={"Content-Type": media_type}, data=data,
        )  # fmt: skip
        self._expect(response, 201, what)
        digest = digest_of(data)
        answered = response.headers.get("Docker-Content-Digest", digest)
        if answered != digest:
            raise RegistryError(
                f"{what}: the registry stored {answered}, not the {digest} sent",
                fix="The registry changed the manifest; push to another registry.",
            )
        return digest

    def blob(self, repository: str, digest: str, *, limit: int = 1 << 20) -> bytes:
        """A small blob (an image's config), checked against its digest: a registry's answer
        is not trusted to be what was asked for."""
        what = f"reading {repository}@{digest}"
        response = self._request(what, "GET", f"{repository}/blobs/{digest}")
        self._expect(response, 200, what)
        data = response.content
        if len(data) > limit or digest_of(data) != digest:
            raise RegistryError(
                f"{what}: the registry answered {len(data)} bytes that are not {digest}",
                fix="The registry's storage is damaged or it is not the registry it claims to "
                "be; push the image again or use another registry.",
            )
        return data

    def image(self, repository: str, reference: str, platform: str) -> RemoteImage | None:
        """The image ``reference`` of ``repository`` for ``platform`` (os/arch[/variant]): the
        digest of its own manifest (an index's child for that platform), its labels and its
        platform as its config says. None when there is no such tag, or an index with no child
        for ``platform``."""
        found = self.manifest(repository, reference)
        if found is not None and found.media_type in INDEX_TYPES:
            wanted = platform.removesuffix("/v8")
            listed = zip(found.json().get("manifests", []), found.platforms(), strict=True)
            children = [
                str(child.get("digest", ""))
                for child, named in listed
                if named.removesuffix("/v8") == wanted
            ]
            found = self.manifest(repository, children[0]) if children else None
            if found is not None and found.digest != children[0]:
                raise RegistryError(
                    f"{repository}@{children[0]} in {self.config.address}: the registry "
                    f"answered a manifest whose digest is {found.digest}",
                    fix="The registry's storage is damaged or it is not the registry it claims "
                    "to be; push the image again or use another registry.",
                )
        if found is None:
            return None
        config = found.json().get("config")
        if not isinstance(config, dict) or not str(config.get("digest", "")).startswith("sha256:"):
            raise RegistryError(
                f"{repository}:{reference} in {self.config.address} is not an image (its "
                "manifest names no config)",
                fix="Push the image again with docker push.",
            )
        try:
            image = json.loads(self.blob(repository, str(config["digest"])))
            labels = (image.get("config") or {}).get("Labels") or {}
            found_platform = "/".join(
                str(image[k]) for k in ("os", "architecture", "variant") if image.get(k)
            )
        except (ValueError, AttributeError) as exc:
            raise RegistryError(
                f"{repository}:{reference} in {self.config.address}: its config is not an "
                f"image's ({exc})",
                fix="Push the image again with docker push.",
            ) from exc
        return RemoteImage(
            digest=found.digest,
            labels={str(k): str(v) for k, v in dict(labels).items()},
            platform=found_platform,
        )

    def _expect(self, response: requests.Response, status: int, what: str) -> None:
        if response.status_code == status or (status == 201 and response.status_code == 200):
            return
        detail = response.text.strip()[:300]
        raise RegistryError(
            f"{what} at {self.config.address}: HTTP {response.status_code} {response.reason}"
            + (f" ({detail})" if detail else ""),
            fix="Check the registry's log; the registry refused what a registry normally accepts.",
        )
