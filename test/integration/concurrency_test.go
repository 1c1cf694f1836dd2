package integration

import (
	"fmt"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestConcurrentPods runs, stops and removes 20 pods at once.
func TestConcurrentPods(t *testing.T) {
	const n = 20
	e := newEnv(t, envOptions{})
	e.start("")

	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = e.tryRunPod(rpcCtx(t), e.podConfig(fmt.Sprintf("many-%02d", i)), "")
		}()
	}
	wg.Wait()
	var ok []string
	for i, err := range errs {
		if err != nil {
			t.Errorf("RunPodSandbox many-%02d: %v", i, err)
			continue
		}
		ok = append(ok, ids[i])
	}
	if len(ok) != n {
		t.FailNow()
	}

	ips := map[string]string{}
	for _, id := range ids {
		st, _ := e.status(t, id)
		if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("%s: state %v", st.GetMetadata().GetName(), st.State)
		}
		ip := e.requireIPInSubnet(t, podIP(st)).String()
		if other, dup := ips[ip]; dup {
			t.Errorf("IP %s given to both %s and %s", ip, short(other), short(id))
		}
		ips[ip] = id
	}
	if pods := e.listPods(t, nil); len(pods) != n {
		t.Errorf("List has %d pods, want %d", len(pods), n)
	}
	if ports := bridgePorts(e.bridge); len(ports) != n {
		t.Errorf("bridge has %d ports, want %d", len(ports), n)
	}
	// Nothing beyond what the 20 pods own.
	e.assertNoLeaksExcept(t, ids...)

	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := rpcCtx(t)
			if _, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				errs[i] = fmt.Errorf("stop: %w", err)
				return
			}
			if _, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				errs[i] = fmt.Errorf("remove: %w", err)
				return
			}
			errs[i] = nil
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("many-%02d: %v", i, err)
		}
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("pods left: %v", podIDs(pods))
	}
	e.assertNoLeaks(t)
}
