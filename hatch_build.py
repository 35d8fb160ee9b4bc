"""Wheel build hook: the wheel carries the hvd.cluster collection at ``ansible_collections/hvd/cluster``.

There Ansible finds it as an installed collection (it scans the import path for ``ansible_collections``) and the
command imports its shared code as ordinary Python. An editable install carries no copy: its import path holds the
checkout's ``collections/`` folder, whose ``ansible_collections/hvd/cluster`` is the checkout itself, so edits take
effect without a rebuild and no stale copy shadows them.
"""

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# What `ansible-galaxy collection build` puts in the collection (galaxy.yml's build_ignore leaves out the rest), but
# tests/sanity (ansible-test's ignore files, of no use to the command), plus ansible.cfg, which the command hands to
# Ansible.
COLLECTION = ("galaxy.yml", "meta", "plugins", "roles", "playbooks", "ansible.cfg", "README.md")


class CollectionHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        for part in COLLECTION:
            build_data["force_include"][part] = f"ansible_collections/hvd/cluster/{part}"
