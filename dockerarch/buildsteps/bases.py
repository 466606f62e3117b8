"""The steps that give a job its target's base: found, imported or bootstrapped (beside the
native toolchain when the base must be made), and its date as the build's SOURCE_DATE_EPOCH.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from dockerarch.errors import EngineError, UsageError

if TYPE_CHECKING:
    from dockerarch.base import BaseRequest
from dockerarch.buildsteps.images import pulled, pushed
from dockerarch.buildsteps.state import JobState, disk_full, in_background, out_of_space


def ensure_base(job: JobState) -> None:
    """The target's base image (bootstrapped when missing and dockerarch can), on the node that
    builds; in a hybrid build the amd64 base of the native toolchain too. A hybrid build on this
    machine whose target base is missing bootstraps it in the background: the toolchain image
    needs only the amd64 base, so it is made meanwhile, and "base ready" waits for the target's."""
    request, route = job.request, job.route
    if route.note:
        job.say(route.note)
    job.say(f"building on {route.builder} ({job.decision.accel}, {route.endpoint})")
    tag = request.target.base_image
    if (request.toolchain is not None and route.context is None
            and job.engine.image_labels(tag) is None):  # fmt: skip
        name = request.target.name
        made_from = _bootstrap_request(name, tag)  # one it cannot make is said now, not later
        job.base_pending = in_background(lambda: _local_base(job, name, tag, made_from))
    else:
        _take_base(job, *_local_base(job, request.target.name, tag))
    if request.toolchain is not None:
        job.toolchain_base_id, _ = _local_base(
            job, request.toolchain.base_target, request.toolchain.base_image
        )


def base_ready(job: JobState) -> None:
    """The target's base, when ensure_base left it bootstrapping: waited for here, before the
    first step that starts from it."""
    pending, job.base_pending = job.base_pending, None
    if pending is None:
        return
    if not pending.done():
        job.step(f"waiting for the base {job.request.target.base_image} (bootstrapping)")
    _take_base(job, *pending.result())


def _take_base(job: JobState, base_id: str, labels: dict[str, str]) -> None:
    """The target's base found: its id, the artifacts' date, and a remote node's copy of it."""
    job.base_id = base_id
    job.source_date_epoch = source_date_epoch(labels)
    route, tag = job.route, job.request.target.base_image
    if route.context is not None:
        remote = job.engine.image_labels(tag, route.context)
        if remote is None or remote[0] != base_id:
            job.say(f"copying the base {tag} to node {route.builder}")
            try:
                job.engine.copy_image(tag, route.context)
            except EngineError as exc:
                if out_of_space(str(exc)):
                    raise disk_full(job, f"copying the base {tag}") from exc
                raise


def source_date_epoch(base_labels: dict[str, str]) -> int | None:
    """SOURCE_DATE_EPOCH for the build's artifacts (wheels' file dates, __DATE__, .debs): the one
    dockerarch runs with, else the base's own (its archive's Release date), so that the same
    sources on the same base build to the same bytes. None: neither is known (a base imported
    from an SD card without SOURCE_DATE_EPOCH), and the tools write today's date."""
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given is not None:
        if not given.isdigit() or int(given) < 315532800:
            raise UsageError(
                f"SOURCE_DATE_EPOCH={given!r} is not a time dockerarch can build with",
                fix="Give seconds since 1970 from 1980 on (zip files cannot hold earlier "
                "dates): SOURCE_DATE_EPOCH=$(git log -1 --format=%ct), or unset it to use the "
                "base's date.",
            )
        return int(given)
    from dockerarch.base import LABEL_PREFIX

    label = base_labels.get(f"{LABEL_PREFIX}.source-date-epoch", "")
    return int(label) if label.isdigit() else None


_BASE_LOCKS: dict[str, threading.Lock] = {}  # one bootstrap per base image at a time


def _local_base(job: JobState, name: str, tag: str,
                request: BaseRequest | None = None) -> tuple[str, dict[str, str]]:  # fmt: skip
    """The id and labels of the local engine's base image ``tag`` of target ``name``,
    bootstrapped first when missing and dockerarch can (from ``request`` when given)."""
    with _BASE_LOCKS.setdefault(tag, threading.Lock()):  # concurrent jobs share the amd64 base
        local = job.engine.image_labels(tag)
        if local is not None:
            return local
        from dockerarch import base

        request = request or _bootstrap_request(name, tag)
        if pulled(job, tag, f"{base.LABEL_PREFIX}.inputs", request.inputs_hash(),
                  request.target.platform, "base"):  # fmt: skip
            return job.engine.image_labels(tag) or ("", {})
        job.say(f"no base {tag} yet: bootstrapping it (a few minutes, once)")
        made = base.bootstrap(request, progress=job.say)
        job.say(f"base {tag} made in {made.seconds:.0f} s ({made.image_id[:19]})"
                + (f"; {made.note}" if made.note else ""))  # fmt: skip
        pushed(job, tag, "base")
        return made.image_id, (job.engine.image_labels(tag) or (made.image_id, {}))[1]


def _bootstrap_request(name: str, tag: str) -> BaseRequest:
    """How dockerarch would bootstrap target ``name``'s base ``tag``, or a UsageError saying
    why it cannot unaided (a base from an SD card, a base_image of the user's own)."""
    from dockerarch import base
    from dockerarch.targets import load_targets

    try:
        request = base.make_request(load_targets()[name])
        if request.tag != tag:
            raise UsageError(f"its base_image is {tag}, not a base dockerarch makes")
    except UsageError as exc:
        raise UsageError(
            f"Target '{name}' has no base image {tag} yet, and dockerarch cannot bootstrap "
            f"one unaided: {exc.problem}",
            fix=f"Make it first: dockerarch base bootstrap --target {name} --mirror URI, "
            f"or base import-img SDCARD --target {name}.",
        ) from exc
    return request
