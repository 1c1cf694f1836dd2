package image

import (
	"github.com/sirupsen/logrus"

	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The test binary is containers/storage's chrooted unpacker too.
	if ReexecInit() {
		return
	}
	// Under -race, each unpacker child would otherwise sleep a second at
	// exit (the race runtime's atexit_sleep_ms).
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	// containers/image's info-level notes (platform mismatch of the
	// random test images) would interleave with benchmark results.
	logrus.SetLevel(logrus.WarnLevel)
	os.Exit(m.Run())
}
