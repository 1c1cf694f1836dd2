package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/testimage"
)

// TestSecurityPolicyPerNamespace: with [image] signature_policy_dir, the
// kubelet's PullImage for a pod of a namespace that has a policy there is
// held to it: a policy that refuses the image gets PermissionDenied naming
// the file and stores nothing, while the same image pulls for a namespace
// without a file (the node's policy, which accepts).
func TestSecurityPolicyPerNamespace(t *testing.T) {
	r := startRegistry(t, testimage.Options{})
	spec := defaultSpec(t, "test", "busybox")
	push(t, r, spec)
	dir := t.TempDir()
	locked := filepath.Join(dir, "locked.json")
	if err := os.WriteFile(locked, []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{registries: insecureRegistry(r.Addr()), imageConfig: fmt.Sprintf("signature_policy_dir = %q", dir)})
	e.start("")
	ref := r.Reference("test/busybox:latest")
	pull := func(namespace string) (string, error) {
		resp, err := e.img.PullImage(rpcCtx(t), &runtimeapi.PullImageRequest{
			Image:         &runtimeapi.ImageSpec{Image: ref},
			SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: namespace, Uid: "u"}},
		})
		return resp.GetImageRef(), err
	}
	_, err := pull("locked")
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), locked) {
		t.Fatalf("PullImage for namespace locked: %v; want PermissionDenied naming %s", err, locked)
	}
	// The daemon may be making its pause image meanwhile; the refused
	// image must not be there.
	refusedID := criID(t, hostImage(t, spec))
	for _, name := range imageNames(t, e) {
		if strings.Contains(name, ref) || strings.HasPrefix(name, refusedID+" ") {
			t.Fatalf("after the refused pull the daemon holds %s", name)
		}
	}
	if _, err := pull("../" + filepath.Base(dir)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("PullImage for a namespace that is a path: %v; want InvalidArgument", err)
	}
	id, err := pull("open")
	if err != nil {
		t.Fatalf("PullImage for namespace open (no policy there): %v", err)
	}
	if id != refusedID {
		t.Errorf("PullImage: %s, want %s", id, refusedID)
	}
	e.removeImage(t, id)
	e.assertNoLeaks(t)
}

// imageNames lists the daemon's images by ID and tags, sorted.
func imageNames(t *testing.T, e *env) []string {
	t.Helper()
	resp, err := e.img.ListImages(rpcCtx(t), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, img := range resp.Images {
		names = append(names, img.Id+" "+strings.Join(img.RepoTags, ","))
	}
	slices.Sort(names)
	return names
}
