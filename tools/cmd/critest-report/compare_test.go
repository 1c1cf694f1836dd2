package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

func TestCompare(t *testing.T) {
	a := writeReport(t,
		spec(types.SpecStatePassed, "both pass", ""),
		spec(types.SpecStateFailed, "only a fails", "a broke\nsecond line"),
		spec(types.SpecStateFailed, "both fail", "no dummy link"),
		spec(types.SpecStatePassed, "only b fails", ""),
		spec(types.SpecStateSkipped, "a skips", ""),
	)
	b := writeReport(t,
		spec(types.SpecStatePassed, "both pass", ""),
		spec(types.SpecStatePassed, "only a fails", ""),
		spec(types.SpecStateFailed, "both fail", "no dummy link either"),
		spec(types.SpecStateFailed, "only b fails", "b broke"),
		spec(types.SpecStatePassed, "a skips", ""),
	)
	var out bytes.Buffer
	err := run([]string{"compare", "podbay=" + a, "containerd=" + b}, &out)
	var fe failedError
	if !errors.As(err, &fe) || fe.n != 1 {
		t.Fatalf("err %v, want one spec podbay failed that containerd passed\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"| passed | 2 | 3 |",
		"| failed | 2 | 2 |",
		"Specs whose outcome differs (3):",
		"podbay: failed, containerd: passed  [k8s.io] Image Manager only a fails\n    podbay: a broke (",
		"podbay: passed, containerd: failed  [k8s.io] Image Manager only b fails\n    containerd: b broke (",
		"podbay: skipped, containerd: passed  [k8s.io] Image Manager a skips",
		"Specs that failed in both (1):\n[k8s.io] Image Manager both fail\n    podbay: no dummy link (",
		"1 specs podbay failed that containerd passed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "second line") {
		t.Errorf("a failure's later lines are in the table:\n%s", got)
	}

	// The other way round nothing is worse.
	out.Reset()
	if err := run([]string{"compare", "containerd=" + b, "podbay=" + b}, &out); err != nil {
		t.Errorf("same report twice: %v", err)
	}
	if err := run([]string{"compare", a}, &out); err == nil {
		t.Error("one report: no error")
	}
	if err := run([]string{"compare", a, b}, &out); err == nil {
		t.Error("reports without names: no error")
	}
}
