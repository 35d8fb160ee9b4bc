# Reach each target given as an argument, in turn, as mpirun and horovodrun will: ssh in BatchMode with strict host
# key checking. A connection reset before the key exchange (kex_exchange_identification: an sshd refusing a burst of
# connections, MaxStartups) is tried again up to three times, two seconds apart. Each target that cannot be reached
# is named on stderr with ssh's last line; the exit status is 1 if any could not be.
failed=0
for target do
    tries=0
    while :; do
        err=$(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 "$target" true 2>&1 >/dev/null) \
            && break
        case $err in
            *kex_exchange_identification*)
                if [ "$tries" -lt 3 ]; then tries=$((tries + 1)); sleep 2; continue; fi ;;
        esac
        printf '%s: %s\n' "$target" "$(printf '%s\n' "$err" | sed '/^[[:space:]]*$/d' | tail -n 1)" >&2
        failed=1
        break
    done
done
exit "$failed"
