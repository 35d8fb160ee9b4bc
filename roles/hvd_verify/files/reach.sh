# Reach each target given as an argument as mpirun and horovodrun will: ssh in BatchMode with strict host key
# checking. Four at a time (in the rotated order the role gives, each node's sshd then sees about four connections at
# once, from its two neighbours: well under MaxStartups' ten). A connection reset before the key exchange
# (kex_exchange_identification: an sshd refusing a burst of connections) is tried again up to three times, two seconds
# apart. Each target that cannot be reached is named on stderr with ssh's last line, in the order given; the exit
# status is 1 if any could not be.
reach() {
    tries=0
    while :; do
        err=$(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 "$2" true 2>&1 >/dev/null \
            </dev/null) && return 0
        case $err in
            *kex_exchange_identification*)
                if [ "$tries" -lt 3 ]; then tries=$((tries + 1)); sleep 2; continue; fi ;;
        esac
        printf '%s\t%s: %s\n' "$1" "$2" "$(printf '%s\n' "$err" | sed '/^[[:space:]]*$/d' | tail -n 1)"
        return 1
    done
}
unreached=$(
    i=0
    for target do
        i=$((i + 1))
        reach "$i" "$target" &
        if [ $((i % 4)) -eq 0 ]; then wait; fi
    done
    wait
)
[ -z "$unreached" ] && exit 0
printf '%s\n' "$unreached" | sort -n | cut -f2- >&2
exit 1
