"""The last step: manifest.json, what was built, from what, how, and each step's time."""

from __future__ import annotations

import json
import time

from dockerarch import __version__, builders
from dockerarch.buildsteps.state import JobState


def write_manifest(job: JobState) -> None:
    """manifest.json: what was built, from what, where, how, and how long each step took."""
    request = job.request
    manifest = {
        "recipe": request.recipe.name,
        "version": request.version,
        "package": request.package.spec if request.package else None,
        "source": request.source.record() if request.source else None,
        "uses": {**{k: v for k, v in job.contexts.items() if k != "source"}, **job.used} or None,
        "toolchain_image": job.toolchain_image,
        "runtime_base_image": job.runtime_base_image,
        "options": job.built_options or request.built_options,
        "target": job.target,
        "platform": request.target.platform,
        "base": {"image": request.target.base_image, "id": job.base_id},
        "source_date_epoch": job.source_date_epoch,
        "image": {"tag": job.image_tag, "id": job.image_id},
        "artifacts": [r.as_dict() for r in job.reports],
        # a wheel set's other wheels its runtime image installed, and its checks covered
        "installed_with": [r.name for r in request.installed_with] or None,
        # the target's packages its runtime image installed for the set's wheels it installs
        # with (their builds found them): on a board, they come with those wheels' needs_apt
        "runtime_needs": list(request.runtime_needs) or None,
        "builder": {
            "name": job.route.builder,
            "endpoint": job.route.endpoint,
            "machine": builders.machine(
                job.engine.machine_info(job.route.context), request.target.arch.name
            ),
        },
        "accel": job.decision.accel,
        "hybrid": job.hybrid,
        "emulated_starters": job.emulated_starters,
        "farm": job.farm.as_dict() if job.farm else None,
        "drivers": job.drivers.as_dict() if job.drivers else None,
        "needs_apt": job.needs_apt,
        "smoke": job.smoke_output,
        "steps": [{"step": name, "seconds": round(s, 1)} for name, s in job.timings],
        "seconds": round(time.monotonic() - job.started, 1),
        "dockerarch": __version__,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (job.landing / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
