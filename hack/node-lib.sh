# Shared by hack/test-node-package.sh (make test-deb) and hack/test-node.sh
# (make test-node), on the host and in the testvm guest: PASS/FAIL lines
# with each step's time, the "N passed, N failed" summary, and finding the
# testvm script.
# shellcheck shell=bash

passed=0
failed=0
t0=$SECONDS
step_start=$SECONDS
# result NAME STATUS [DETAIL]: one PASS/FAIL line with the step's time.
result() {
	local name=$1 st=$2 detail=${3:-}
	if [ "$st" -eq 0 ]; then
		passed=$((passed + 1))
		printf 'PASS %-58s %4ds\n' "$name" $((SECONDS - step_start))
	else
		failed=$((failed + 1))
		printf 'FAIL %-58s %4ds %s\n' "$name" $((SECONDS - step_start)) "$detail"
	fi
	step_start=$SECONDS
}
# check NAME CMD...: runs CMD and records its exit status as NAME's result.
check() {
	local name=$1 out st
	shift
	out=$("$@" 2>&1)
	st=$?
	result "$name" "$st" "$(tail -n 5 <<<"$out" | tr '\n' ' ')"
	return "$st"
}
summary() {
	echo "$passed passed, $failed failed ($((SECONDS - t0))s)"
	[ "$failed" -eq 0 ]
}
# add_guest_results FILE: adds the "N passed, N failed" line the guest
# printed last in FILE to the totals; a missing one is a failure.
add_guest_results() {
	local gp gf
	gp=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' "$1" | tail -1)
	gf=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' "$1" | tail -1)
	step_start=$SECONDS
	if [ -z "$gp" ]; then
		result "guest run finished" 1 "no summary from the guest"
	else
		passed=$((passed + gp))
		failed=$((failed + gf))
	fi
}

# wait_for SECONDS CMD...: retries CMD every second until it succeeds.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 1
	done
}

# find_testvm sets TESTVM to the testvm script (TESTVM, or ../shared/testvm
# from the checkout) or fails.
find_testvm() {
	local t
	if [ -z "${TESTVM:-}" ]; then
		for t in ../shared/testvm/testvm ../../shared/testvm/testvm /work/shared/testvm/testvm; do
			[ -x "$t" ] && TESTVM=$(realpath "$t") && break
		done
	fi
	[ -x "${TESTVM:-}" ]
}
