#!/usr/bin/python
"""Ansible module: run a read-only command (an argv) on a node, changing nothing Ansible tracks.

Its action plugin (plugins/action/hvd_run.py) runs the argv over the task's connection itself, as the login user: one
shell command, with no module file sent and no Python started on the node for it (a module run costs the node about
0.14 s of CPU for Python's start and Ansible's module imports, several times what a probe or a reach test costs). This
module is the same command for the case the action hands to it: a task that becomes a user.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_run
short_description: Run a read-only command (an argv) on the node, without a Python module run
description:
  - Runs I(argv) with the task's C(environment) and returns its exit status and output. There is no shell; each
    element is one argument, quoted for the node's shell by the action.
  - The result is never changed, and the command runs in check mode too. It is for reads, probes and proofs (an
    allreduce, a reach test), whose own exit status says whether they passed.
  - A non-zero exit status fails the task (a task's C(failed_when) decides otherwise).
  - Run by the action plugin over the connection directly where the task does not become a user; by this module
    otherwise. Not async.
options:
  argv: {description: The command and its arguments., type: list, elements: str, required: true}
attributes:
  check_mode: {description: Can run in check mode., support: full, details: It runs there too (a read).}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Look at Open MPI as the ranks find it
  hvd.cluster.hvd_run:
    argv: [python3, -I, -c, "{{ lookup('ansible.builtin.file', 'look.py') }}"]
  environment:
    PATH: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  become: false
  register: look
"""

RETURN = r"""
rc: {description: The command's exit status., type: int, returned: always}
stdout: {description: Its standard output (the trailing line ends taken off)., type: str, returned: always}
stderr: {description: Its standard error (the trailing line ends taken off)., type: str, returned: always}
stdout_lines: {description: I(stdout) split into lines., type: list, elements: str, returned: always}
stderr_lines: {description: I(stderr) split into lines., type: list, elements: str, returned: always}
cmd: {description: The argv that ran., type: list, elements: str, returned: always}
"""

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule

ARGUMENT_SPEC = {"argv": {"type": "list", "elements": "str", "required": True}}


def outcome(argv: list[str], rc: int, stdout: str, stderr: str) -> dict:
    """The task's result, the same from the action and from the module."""
    stdout, stderr = stdout.rstrip("\r\n"), stderr.rstrip("\r\n")
    result = {"changed": False, "cmd": argv, "rc": rc, "stdout": stdout, "stderr": stderr,
              "stdout_lines": stdout.splitlines(), "stderr_lines": stderr.splitlines()}
    if rc != 0:
        result.update(failed=True, msg=f"non-zero return code ({rc})")
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    argv = module.params["argv"]
    if not argv:
        module.fail_json(msg="argv is empty")
    rc, stdout, stderr = module.run_command(argv, expand_user_and_vars=False)  # the argv exactly, as the action runs it
    result = outcome(argv, rc, stdout, stderr)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
