#!/usr/bin/python
"""Ansible module (runs on the controller): check an offline bundle and get it ready for the nodes.

Checks that every file the bundle's manifest lists is there with its size (a missing one fails at once, naming the
file and the role that needs it), copies the bundle's cache entries (the packed env, the Horovod wheel) into the
controller cache where absent, and makes the apt repository's archive (one tar, the same bytes for the same bundle,
its files checked by sha256 as they go in) in the controller cache.
"""

from __future__ import annotations

from ansible.module_utils.hvd_bundle import BundleError, apt_archive, apt_digest, load, missing, seed_cache

DOCUMENTATION = r"""
module: hvd_bundle
short_description: Check an offline bundle and make its apt repository archive in the controller cache
options:
  path: {description: The bundle folder (holds manifest.yaml)., type: path, required: true}
  cache_dir: {description: The controller cache., type: path, required: true}
author: hvdcluster
"""

RETURN = r"""
apt_archive: {description: The apt repository's tar in the controller cache., type: str, returned: success}
apt_sha256: {description: Its sha256., type: str, returned: success}
apt_digest: {description: The digest of the repository's files (names and sha256)., type: str, returned: success}
seeded: {description: Cache entries copied from the bundle., type: list, returned: success}
"""


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "cache_dir": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    folder, cache_dir = module.params["path"], module.params["cache_dir"]
    try:
        manifest = load(folder)
        problems = missing(folder, manifest)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            module.fail_json(msg=problems[0] + more, problems=problems)
        # The controller cache only: check mode (no node changes) prepares it too, so later tasks can be judged.
        seeded = seed_cache(folder, manifest, cache_dir)
        archive, sha256, _made = apt_archive(folder, manifest, cache_dir)
    except (BundleError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, apt_archive=archive, apt_sha256=sha256, apt_digest=apt_digest(manifest),
                     seeded=seeded)


if __name__ == "__main__":
    main()
