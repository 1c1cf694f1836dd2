// Package integration runs podbayd for real — real network namespaces, CNI
// plugins, conmon and runc — and checks the CRI contract, failure rollback,
// crash recovery and that nothing is leaked on the host.
//
// The tests need root and are skipped otherwise. They change host state that
// is shared with any other podbayd on the machine (/var/run/netns, iptables)
// and a restarted podbayd garbage-collects every podbay-<id> namespace it has
// no record of, so they run one at a time and must not run on a node that
// serves real pods.
//
//	sudo go test -race -count=1 -v ./test/integration/
//
// PODBAY_ITEST_RACE=1 builds podbayd itself with the race detector;
// PODBAY_ITEST_KEEP=1 keeps each test's directory for inspection;
// PODBAY_ITEST_BINDIR=DIR uses the daemon, CLI, pause program and test tools
// built beforehand into DIR (as TestMain builds them) instead of building
// them: for a test binary (go test -c) run where there is no Go.
package integration
