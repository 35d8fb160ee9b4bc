#!/bin/sh
# First start: unique host keys for this container. Every start: authorize the
# controller's key given in SSH_AUTHORIZED_KEY (how a cloud image gets its key).
set -eu
ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A >/dev/null
mkdir -p /run/sshd /root/.ssh
chmod 0700 /root/.ssh
if [ -n "${SSH_AUTHORIZED_KEY:-}" ] && ! grep -qxF "$SSH_AUTHORIZED_KEY" /root/.ssh/authorized_keys 2>/dev/null; then
    printf '%s\n' "$SSH_AUTHORIZED_KEY" >> /root/.ssh/authorized_keys
    chmod 0600 /root/.ssh/authorized_keys
fi
exec "$@"
