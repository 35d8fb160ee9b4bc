#!/usr/bin/python
"""Ansible module (runs on the controller): check an offline bundle and get it ready for the nodes.

Checks the manifest's bytes against a pinned sha256 or an OpenSSH signature where one is given; that the folder holds
exactly the files the manifest lists (a file it does not list, or a symlink anywhere, fails naming it: the same rule
and words as `hvdcluster up --bundle`, module_utils/hvd_bundle.py); and every listed file by its sha256 (a missing or
altered one fails at once, naming the file and the role that needs it): pypi/, wheelhouse/, conda/ and openmpi/ in
the bundle, apt/ and cache/ through the controller cache's copies the nodes get. Puts the bundle's cache entries (the
packed env, the Horovod wheel) in the controller cache, each hashed against the manifest (an entry already there is
hashed again, never trusted by its own .sha256 file); and makes the apt repository's archive (one tar, the same bytes
for the same bundle, its files checked by sha256 as they go in) in the controller cache, or reads the one there again
and uses it only when it holds exactly the manifest's files.

`hvdcluster up` has checked every file of the bundle before this runs, and written what the controller cache lacked
from that same read: the controller cache's copies are read here, not the bundle's apt/ and cache/ files.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_bundle
short_description: Check an offline bundle and make its apt repository archive in the controller cache
description:
  - Checks an offline bundle against its manifest (pin and signers) on the controller - exactly the files it lists,
    each by its sha256, no symlink - and makes the archive of its apt repository in the controller cache.
options:
  path: {description: The bundle folder (holds manifest.yaml)., type: path, required: true}
  cache_dir: {description: The controller cache., type: path, required: true}
  manifest_sha256:
    description: The sha256 manifest.yaml must have (network.bundle_sha256); unchecked when empty.
    type: str
    default: ""
  signers:
    description: >-
      An OpenSSH allowed-signers file one of whose keys must have signed manifest.yaml (manifest.yaml.sig, namespace
      hvdcluster-bundle; network.bundle_signers); unchecked when empty.
    type: str
    default: ""
requirements:
  - PyYAML (on the controller, where it runs)
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Check the bundle and pack its apt repository (controller; a missing, altered or unlisted file fails here, naming it)
  hvd.cluster.hvd_bundle:
    path: /srv/hvdcluster-bundle
    cache_dir: ~/.cache/hvdcluster
    manifest_sha256: "{{ bundle_sha256 }}"
    signers: /etc/hvdcluster/allowed_signers
  delegate_to: localhost
  run_once: true
  become: false
  register: bundle
"""

RETURN = r"""
apt_archive: {description: The apt repository's tar in the controller cache., type: str, returned: success}
apt_sha256: {description: Its sha256., type: str, returned: success}
apt_digest: {description: The digest of the repository's files (names and sha256)., type: str, returned: success}
seeded: {description: Cache entries copied from the bundle., type: list, returned: success}
"""

import os

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_bundle import (
    HAS_YAML,
    MANIFEST,
    YAML_IMPORT_ERROR,
    BundleError,
    authenticate,
    parse,
    read_manifest,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_bundle_cache import apt_digest, ready


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule, missing_required_lib

    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "cache_dir": {"type": "path", "required": True},
                       "manifest_sha256": {"type": "str", "default": ""}, "signers": {"type": "str", "default": ""}},
        supports_check_mode=True,
    )
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    folder, cache_dir = module.params["path"], module.params["cache_dir"]
    try:
        data = read_manifest(folder)
        if module.params["manifest_sha256"] or module.params["signers"]:
            authenticate(folder, data, module.params["manifest_sha256"] or None, module.params["signers"] or None)
        manifest = parse(data, os.path.join(folder, MANIFEST))
        # The controller cache only: check mode (no node changes) prepares it too, so later tasks can be judged.
        seeded, (archive, sha256, _made) = ready(folder, manifest, cache_dir)
    except (BundleError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, apt_archive=archive, apt_sha256=sha256, apt_digest=apt_digest(manifest),
                     seeded=seeded)


if __name__ == "__main__":
    main()
