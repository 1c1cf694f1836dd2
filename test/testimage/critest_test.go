package testimage

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// critestRefs are the references critest v1.37 pulls on amd64 (cri-tools
// pkg/framework, pkg/validate/consts.go, pkg/validate/security_context_linux.go,
// pkg/validate/multi_container_linux.go, pkg/benchmark/image.go), less the digest one,
// plus the pause image podbayd runs and docker.io's busybox.
var critestRefs = []string{
	"registry.k8s.io/e2e-test-images/busybox:1.29-2",
	"registry.k8s.io/e2e-test-images/nginx:1.14-2",
	"registry.k8s.io/e2e-test-images/httpd:2.4.39-4",
	"registry.k8s.io/e2e-test-images/nonewprivs:1.3",
	"registry.k8s.io/pause:3.10",
	"registry.k8s.io/pause:3.9",
	"k8s.gcr.io/pause:3.9",
	"gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-latest:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-tag:test",
	"gcr.io/k8s-staging-cri-tools/test-image-tag:all",
	"gcr.io/k8s-staging-cri-tools/test-image-1:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-2:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-3:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-tags:1",
	"gcr.io/k8s-staging-cri-tools/test-image-tags:2",
	"gcr.io/k8s-staging-cri-tools/test-image-tags:3",
	"gcr.io/k8s-staging-cri-tools/test-image-user-uid:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-user-username:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-user-uid-group:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-user-username-group:latest",
	"gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest",
	"public.ecr.aws/docker/library/busybox:1.35.0-glibc",
	"public.ecr.aws/docker/library/busybox:1-uclibc",
	"public.ecr.aws/docker/library/busybox:1",
	"public.ecr.aws/docker/library/busybox:1-glibc",
	"public.ecr.aws/docker/library/busybox:1-musl",
	"public.ecr.aws/docker/library/busybox:latest",
	"docker.io/library/busybox:latest",
}

// upstreamRef turns a served reference ("gcr/x:1") back into its upstream
// name ("gcr.io/x:1").
func upstreamRef(t *testing.T, served string) string {
	t.Helper()
	for _, m := range CritestMirrors() {
		if rest, ok := strings.CutPrefix(served, m.Prefix+"/"); ok {
			return m.Registry + "/" + rest
		}
	}
	t.Fatalf("%s is under no mirror prefix", served)
	return ""
}

// critestSpecs returns the critest specs for amd64 with a stand-in program
// that is any file (the busybox binary).
func critestSpecs(t *testing.T) []Spec {
	t.Helper()
	needBusybox(t)
	specs, err := CritestImages(CritestOptions{StandIn: DefaultBusybox, Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func TestCritestImagesNames(t *testing.T) {
	specs := critestSpecs(t)
	var got []string
	for _, s := range specs {
		for _, tag := range s.Tags {
			got = append(got, upstreamRef(t, s.Repository+":"+tag))
		}
	}
	slices.Sort(got)
	want := slices.Clone(critestRefs)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("served\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := CritestImages(CritestOptions{}); err == nil {
		t.Error("no stand-in program: no error")
	}
}

// builtCritest builds every critest spec once, keyed by upstream reference.
func builtCritest(t *testing.T) (map[string]Spec, map[string]Artifact) {
	t.Helper()
	specs := critestSpecs(t)
	byRef, built := map[string]Spec{}, map[string]Artifact{}
	for _, s := range specs {
		a := mustBuild(t, sharedBuilder(), s)
		for _, tag := range s.Tags {
			ref := upstreamRef(t, s.Repository+":"+tag)
			byRef[ref], built[ref] = s, a
		}
	}
	return byRef, built
}

// hostImage returns the amd64 image of a, an image or an index.
func hostImage(t *testing.T, a Artifact) v1.Image {
	t.Helper()
	if a.Index == nil {
		return a.Image
	}
	im, err := a.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Architecture == "amd64" {
			img, err := a.Index.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatal("no amd64 image in the index")
	return nil
}

// topFiles returns the entries of the image's last layer, by name.
func topFiles(t *testing.T, img v1.Image) map[string]tarEntry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) == 0 {
		t.Fatalf("layers: %v", err)
	}
	return byName(readLayer(t, layers[len(layers)-1]))
}

func TestCritestImagesContent(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds every critest image")
	}
	specs, built := builtCritest(t)
	digest := func(ref string) v1.Hash { return mustDigest(t, built[ref]) }
	const gcr = "gcr.io/k8s-staging-cri-tools/"

	// One image under several tags; different images under different names.
	if digest(gcr+"test-image-tags:1") != digest(gcr+"test-image-tags:3") {
		t.Error("test-image-tags:1 and :3 differ")
	}
	// One image from two registries (v1.37's image ID consistency specs).
	// Not the sandbox image 3.10, whose name would be a third tag.
	if digest("registry.k8s.io/pause:3.9") != digest("k8s.gcr.io/pause:3.9") || digest("registry.k8s.io/pause:3.9") == digest("registry.k8s.io/pause:3.10") {
		t.Error("want registry.k8s.io/pause:3.9 and k8s.gcr.io/pause:3.9 one image, not pause:3.10")
	}
	ids := map[v1.Hash]string{}
	for _, ref := range []string{gcr + "test-image-1:latest", gcr + "test-image-2:latest", gcr + "test-image-3:latest",
		gcr + "test-image-tag:test", gcr + "test-image-tag:all", gcr + "test-image-latest:latest"} {
		if other, dup := ids[digest(ref)]; dup {
			t.Errorf("%s is the same image as %s", ref, other)
		}
		ids[digest(ref)] = ref
	}
	// Multi-arch like upstream's, except the per-arch hostnet-nginx.
	if built[gcr+"test-image-1:latest"].Index == nil || built[gcr+"hostnet-nginx-amd64:latest"].Index != nil {
		t.Error("want an index for test-image-1 and a plain image for hostnet-nginx-amd64")
	}

	for ref, user := range map[string]string{
		gcr + "test-image-user-uid:latest":            "1002",
		gcr + "test-image-user-username:latest":       "www-data",
		gcr + "test-image-user-uid-group:latest":      "1003:1004",
		gcr + "test-image-user-username-group:latest": "www-data:1004",
		gcr + "test-image-predefined-group:latest":    "1000",
	} {
		if got := specs[ref].Config.User; got != user {
			t.Errorf("%s: user %q, want %q", ref, got, user)
		}
	}

	files := topFiles(t, hostImage(t, built[gcr+"test-image-predefined-group:latest"]))
	grp := string(files["etc/group"].data)
	if !strings.Contains(grp, "\ngroup-defined-in-image:x:50000:default-user\n") || strings.Contains(grp, "testextra") {
		t.Errorf("predefined-group /etc/group:\n%s", grp)
	}
	if pw := string(files["etc/passwd"].data); !strings.Contains(pw, "\ndefault-user:x:1000:1000:") || strings.Contains(pw, "\ntest:") {
		t.Errorf("predefined-group /etc/passwd:\n%s", pw)
	}

	files = topFiles(t, hostImage(t, built["registry.k8s.io/e2e-test-images/nonewprivs:1.3"]))
	nnp := files["usr/local/bin/nnp"]
	if nnp.hdr == nil || nnp.hdr.Typeflag != tar.TypeReg || nnp.hdr.Mode != 0o4755 || nnp.hdr.Uid != 0 {
		t.Errorf("nnp: %+v", nnp.hdr)
	}

	files = topFiles(t, hostImage(t, built["registry.k8s.io/e2e-test-images/busybox:1.29-2"]))
	for _, name := range []string{"bin/pgrep", "bin/ipcs"} {
		if e := files[name]; e.hdr == nil || e.hdr.Typeflag != tar.TypeLink || e.hdr.Linkname != "bin/podbay-standin" {
			t.Errorf("%s: want a hard link to bin/podbay-standin, got %+v", name, e.hdr)
		}
	}

	for ref, port := range map[string]string{
		"registry.k8s.io/e2e-test-images/nginx:1.14-2": "listen       80;",
		gcr + "hostnet-nginx-amd64:latest":             "listen       12003;",
	} {
		files := topFiles(t, hostImage(t, built[ref]))
		if conf := string(files["etc/nginx/conf.d/default.conf"].data); !strings.Contains(conf, port) {
			t.Errorf("%s: default.conf\n%s", ref, conf)
		}
		if e := files["usr/sbin/nginx"]; e.hdr == nil || e.hdr.Mode != 0o755 {
			t.Errorf("%s: no /usr/sbin/nginx", ref)
		}
		if e := files["var/run"]; e.hdr == nil || e.hdr.Typeflag != tar.TypeDir {
			t.Errorf("%s: no /var/run", ref)
		}
	}
	httpd := specs["registry.k8s.io/e2e-test-images/httpd:2.4.39-4"]
	if httpd.Config.StopSignal != "SIGWINCH" || !slices.Equal(httpd.Config.Cmd, []string{"httpd-foreground"}) {
		t.Errorf("httpd config %+v", httpd.Config)
	}
}

func TestCritestImagesHostArch(t *testing.T) {
	needBusybox(t)
	specs, err := CritestImages(CritestOptions{StandIn: DefaultBusybox, Arch: "riscv64"})
	if err != nil {
		t.Fatal(err)
	}
	var hostnet bool
	for _, s := range specs {
		hostnet = hostnet || s.Repository == "gcr/k8s-staging-cri-tools/hostnet-nginx-riscv64"
		if len(s.Platforms) > 1 && !slices.Contains(s.Platforms, "linux/riscv64") {
			t.Errorf("%s: platforms %v lack the host's", s.Repository, s.Platforms)
		}
	}
	if !hostnet {
		t.Error("no hostnet-nginx-riscv64")
	}
}

func TestWithoutTestAccounts(t *testing.T) {
	for _, s := range []string{passwd, group} {
		out := withoutTestAccounts(s)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if name, _, _ := strings.Cut(line, ":"); strings.HasPrefix(name, "test") {
				t.Errorf("line %q left", line)
			}
		}
		if !strings.HasPrefix(out, "root:x:0:") || !strings.HasSuffix(out, "\n") || !strings.Contains(out, "\nnobody:x:65534:") && !strings.Contains(out, "\nnogroup:x:65534:") {
			t.Errorf("accounts:\n%s", out)
		}
	}
}

// MirrorsConf parses as containers/image reads it, and sends every critest
// registry to the local registry, mirror and location alike.
func TestMirrorsConf(t *testing.T) {
	const addr = "127.0.0.1:5000"
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, []byte(MirrorsConf(addr, CritestMirrors())), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := &types.SystemContext{SystemRegistriesConfPath: conf, SystemRegistriesConfDirPath: filepath.Join(t.TempDir(), "none")}
	for _, m := range CritestMirrors() {
		reg, err := sysregistriesv2.FindRegistry(sys, m.Registry+"/some/image:tag")
		if err != nil {
			t.Fatal(err)
		}
		want := addr + "/" + m.Prefix
		if reg == nil || reg.Location != want || !reg.Insecure || len(reg.Mirrors) != 1 ||
			reg.Mirrors[0].Location != want || !reg.Mirrors[0].Insecure {
			t.Errorf("%s: %+v", m.Registry, reg)
		}
	}
	search, err := sysregistriesv2.UnqualifiedSearchRegistries(sys)
	if err != nil || !slices.Equal(search, []string{"docker.io"}) {
		t.Errorf("unqualified search registries %v, %v", search, err)
	}
}

// The critest images pull through the registry under their served names.
func TestCritestPush(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("pushes every critest image")
	}
	specs := critestSpecs(t)
	r := StartTest(t, Options{Builder: sharedBuilder()})
	for _, s := range specs {
		if _, err := r.Push(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	sys := sysContext(t, nil)
	for _, s := range specs {
		for _, ref := range s.References(r.Addr()) {
			if err := pullManifest(t, sys, ref); err != nil {
				t.Errorf("%s: %v", ref, err)
			}
		}
	}
}
