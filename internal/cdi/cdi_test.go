package cdi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestRequested(t *testing.T) {
	tests := []struct {
		name        string
		field       []string
		annotations map[string]string
		want        []string
		wantErr     string
	}{
		{name: "none", annotations: map[string]string{"other": "x"}},
		{name: "field", field: []string{"vendor.com/gpu=1", "vendor.com/gpu=0"}, want: []string{"vendor.com/gpu=1", "vendor.com/gpu=0"}},
		{
			name:  "annotations by key after the field, duplicates once",
			field: []string{"vendor.com/gpu=0"},
			annotations: map[string]string{
				"cdi.k8s.io/z_claim": "vendor.com/nic=eth1",
				"cdi.k8s.io/a_claim": "vendor.com/gpu=0,vendor.com/gpu=all",
				"example.com/cdi":    "not=a device",
			},
			want: []string{"vendor.com/gpu=0", "vendor.com/gpu=all", "vendor.com/nic=eth1"},
		},
		{name: "bad field name", field: []string{"gpu0"}, wantErr: `"gpu0" (CDI_devices)`},
		{name: "bad vendor", field: []string{"-vendor/gpu=0"}, wantErr: "CDI_devices"},
		{name: "bad annotation", annotations: map[string]string{"cdi.k8s.io/x": "vendor.com/gpu=0,"}, wantErr: `annotation cdi.k8s.io/x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Requested(tt.field, tt.annotations)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Requested() error = %v, want InvalidArgument containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Requested() = %q, want %q", got, tt.want)
			}
		})
	}
}

const testSpec = `cdiVersion: "0.6.0"
kind: podbay.test/dev
containerEdits:
  env: ["VENDOR_WIDE=1"]
devices:
- name: "null"
  containerEdits:
    deviceNodes:
    - path: /dev/pbnull
      hostPath: /dev/null
    env: ["PB_DEVICE=null"]
    mounts:
    - hostPath: %s
      containerPath: /pb-data
      options: [ro, bind]
- name: zero
  containerEdits:
    deviceNodes:
    - path: /dev/zero
`

func writeSpec(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func baseSpec() *specs.Spec {
	return &specs.Spec{
		Process: &specs.Process{Args: []string{"sh"}, Env: []string{"PATH=/bin"}},
		Linux:   &specs.Linux{Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}},
	}
}

func TestInject(t *testing.T) {
	base := t.TempDir()
	etc, run := filepath.Join(base, "etc"), filepath.Join(base, "run")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, etc, "test.yaml", strings.Replace(testSpec, "%s", base, 1))
	writeSpec(t, etc, "broken.json", `{"cdiVersion": "0.6.0", "kind": `)
	r, err := New(context.Background(), []string{etc, run})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()

	spec := baseSpec()
	if err := r.Inject(ctx, spec, []string{"podbay.test/dev=null"}); err != nil {
		t.Fatalf("Inject: %v", err)
	}
	if len(spec.Linux.Devices) != 1 || spec.Linux.Devices[0].Path != "/dev/pbnull" || spec.Linux.Devices[0].Major != 1 || spec.Linux.Devices[0].Minor != 3 || spec.Linux.Devices[0].Type != "c" {
		t.Fatalf("devices = %+v", spec.Linux.Devices)
	}
	rules := spec.Linux.Resources.Devices
	if last := rules[len(rules)-1]; !last.Allow || *last.Major != 1 || *last.Minor != 3 {
		t.Fatalf("device cgroup rules = %+v", rules)
	}
	for _, want := range []string{"PATH=/bin", "VENDOR_WIDE=1", "PB_DEVICE=null"} {
		if !slices.Contains(spec.Process.Env, want) {
			t.Errorf("env %q missing: %q", want, spec.Process.Env)
		}
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Destination != "/pb-data" || spec.Mounts[0].Source != base {
		t.Fatalf("mounts = %+v", spec.Mounts)
	}

	// Unknown: NotFound naming it, and the spec untouched.
	spec = baseSpec()
	err = r.Inject(ctx, spec, []string{"podbay.test/dev=zero", "podbay.test/dev=nope"})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `"podbay.test/dev=nope"`) || strings.Contains(err.Error(), "=zero") {
		t.Fatalf("unknown device: err = %v", err)
	}
	if len(spec.Linux.Devices) != 0 || len(spec.Process.Env) != 1 {
		t.Fatalf("spec changed by a failed Inject: %+v", spec)
	}

	// A later directory takes precedence; it appears after New.
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, run, "override.json", `{"cdiVersion":"0.6.0","kind":"podbay.test/dev","devices":[{"name":"null","containerEdits":{"env":["PB_DEVICE=override"]}}]}`)
	spec = baseSpec()
	if err := r.Inject(ctx, spec, []string{"podbay.test/dev=null"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Process.Env, "PB_DEVICE=override") || len(spec.Linux.Devices) != 0 {
		t.Fatalf("the later directory's device was not used: %+v %+v", spec.Process.Env, spec.Linux.Devices)
	}

	// Changed in place: the next Inject sees the new content.
	writeSpec(t, run, "override.json", `{"cdiVersion":"0.6.0","kind":"podbay.test/dev","devices":[{"name":"null","containerEdits":{"env":["PB_DEVICE=changed"]}}]}`)
	spec = baseSpec()
	if err := r.Inject(ctx, spec, []string{"podbay.test/dev=null"}); err != nil || !slices.Contains(spec.Process.Env, "PB_DEVICE=changed") {
		t.Fatalf("changed spec: %v, env %q", err, spec.Process.Env)
	}
	// Removed: the earlier directory's definition is back.
	if err := os.Remove(filepath.Join(run, "override.json")); err != nil {
		t.Fatal(err)
	}
	spec = baseSpec()
	if err := r.Inject(ctx, spec, []string{"podbay.test/dev=null"}); err != nil || !slices.Contains(spec.Process.Env, "PB_DEVICE=null") {
		t.Fatalf("after removing the override: %v, env %q", err, spec.Process.Env)
	}

	// A spec renamed in from elsewhere is seen at once.
	tmp := filepath.Join(base, "new.json.tmp")
	if err := os.WriteFile(tmp, []byte(`{"cdiVersion":"0.6.0","kind":"podbay.test/new","devices":[{"name":"a","containerEdits":{"env":["NEW=1"]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(etc, "new.json")); err != nil {
		t.Fatal(err)
	}
	if err := r.Inject(ctx, baseSpec(), []string{"podbay.test/new=a"}); err != nil {
		t.Fatalf("renamed-in spec: %v", err)
	}
	if got := r.Devices(ctx); !slices.Equal(got, []string{"podbay.test/dev=null", "podbay.test/dev=zero", "podbay.test/new=a"}) {
		t.Fatalf("Devices() = %q", got)
	}

	// Defined twice in one directory: neither is used, and the error
	// names both files.
	writeSpec(t, etc, "twice-1.json", `{"cdiVersion":"0.6.0","kind":"podbay.test/twice","devices":[{"name":"a","containerEdits":{"env":["T=1"]}}]}`)
	writeSpec(t, etc, "twice-2.json", `{"cdiVersion":"0.6.0","kind":"podbay.test/twice","devices":[{"name":"a","containerEdits":{"env":["T=2"]}}]}`)
	err = r.Inject(ctx, baseSpec(), []string{"podbay.test/twice=a"})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "twice-1.json") || !strings.Contains(err.Error(), "twice-2.json") {
		t.Fatalf("device defined twice: err = %v", err)
	}

	// A device node missing on the host: FailedPrecondition.
	writeSpec(t, etc, "missing.json", `{"cdiVersion":"0.6.0","kind":"podbay.test/missing","devices":[{"name":"a","containerEdits":{"deviceNodes":[{"path":"/dev/pb-no-such-device"}]}}]}`)
	if err := r.Inject(ctx, baseSpec(), []string{"podbay.test/missing=a"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("missing device node: err = %v", err)
	}
}
