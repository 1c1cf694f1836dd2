package testimage

import (
	"archive/tar"
	"slices"
	"strings"
	"testing"
)

// nodeE2ERefs are the references NodeE2EImages serves (upstream names),
// which Kubernetes v1.37's test/utils/image/manifest.go gives the images
// the node e2e conformance specs run.
var nodeE2ERefs = []string{
	"registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
	"registry.k8s.io/e2e-test-images/agnhost:2.66.1",
	"registry.k8s.io/e2e-test-images/agnhost:2.55",
	"registry.k8s.io/e2e-test-images/kitten:1.8",
	"registry.k8s.io/e2e-test-images/nautilus:1.8",
	"registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
	"registry.k8s.io/e2e-test-images/nginx:1.28.0-2",
	"registry.k8s.io/e2e-test-images/nonewprivs:1.4",
	"registry.k8s.io/e2e-test-images/nonroot:1.5",
	"registry.k8s.io/e2e-test-images/ipc-utils:1.4",
	"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1",
	"registry.k8s.io/pause:3.10.2",
}

func TestNodeE2EImages(t *testing.T) {
	needBusybox(t)
	if _, err := NodeE2EImages(NodeE2EOptions{StandIn: DefaultBusybox}); err == nil {
		t.Error("no agnhost: no error")
	}
	if _, err := NodeE2EImages(NodeE2EOptions{Agnhost: DefaultBusybox}); err == nil {
		t.Error("no stand-in program: no error")
	}
	// Any file does as the programs.
	specs, err := NodeE2EImages(NodeE2EOptions{StandIn: DefaultBusybox, Agnhost: DefaultBusybox})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	built := map[string]Artifact{}
	bySpec := map[string]Spec{}
	for _, s := range specs {
		a := mustBuild(t, sharedBuilder(), s)
		for _, tag := range s.Tags {
			ref := upstreamRef(t, s.Repository+":"+tag)
			got = append(got, ref)
			built[ref], bySpec[ref] = a, s
		}
	}
	slices.Sort(got)
	want := slices.Clone(nodeE2ERefs)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("served\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	const e2e = "registry.k8s.io/e2e-test-images/"
	agn := bySpec[e2e+"agnhost:2.66.1"].Config
	if !slices.Equal(agn.Entrypoint, []string{"/agnhost"}) || !slices.Equal(agn.Cmd, []string{"pause"}) {
		t.Errorf("agnhost: entrypoint %q cmd %q, want [/agnhost] [pause]", agn.Entrypoint, agn.Cmd)
	}
	files := topFiles(t, hostImage(t, built[e2e+"agnhost:2.66.1"]))
	if e := files["agnhost"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeReg || e.hdr.Mode&0o111 == 0 {
		t.Errorf("agnhost /agnhost: %+v", e.hdr)
	}
	if e := files["usr/bin/curl"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeLink || e.hdr.Linkname != "usr/bin/podbay-standin" {
		t.Errorf("agnhost /usr/bin/curl: want a hard link to the stand-in, got %+v", e.hdr)
	}
	if b := string(files["bin/bash"].data); b != "#!/bin/sh\nexec /bin/sh \"$@\"\n" {
		t.Errorf("agnhost /bin/bash: %q", b)
	}
	if g := string(files["etc/group"].data); !strings.Contains(g, "\ngroup-defined-in-image:x:50000:user-defined-in-image\n") {
		t.Errorf("agnhost /etc/group:\n%s", g)
	}
	// The ImageVolume specs read kitten's os-release through a volume.
	if r := string(topFiles(t, hostImage(t, built[e2e+"kitten:1.8"]))["etc/os-release"].data); !strings.Contains(r, "Alpine Linux") {
		t.Errorf("kitten /etc/os-release: %q", r)
	}
	if c := bySpec[e2e+"kitten:1.8"].Config.Cmd; !slices.Equal(c, []string{"test-webserver"}) {
		t.Errorf("kitten cmd %q", c)
	}
	if u := bySpec[e2e+"nonroot:1.5"].Config.User; u != "1234" {
		t.Errorf("nonroot user %q, want 1234", u)
	}
	files = topFiles(t, hostImage(t, built[e2e+"nonewprivs:1.4"]))
	if nnp := files["usr/local/bin/nnp"]; nnp.hdr == nil || nnp.hdr.Mode != 0o4755 || nnp.hdr.Uid != 0 {
		t.Errorf("nnp: %+v", nnp.hdr)
	}
}
