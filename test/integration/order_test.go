package integration

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/test/internal/nsinfo"
)

// TestNetworkOrder proves, per pod, whether the network was set up before
// the runtime was asked to start the sandbox container and, for vm
// handlers, to create it: the runtime wrapper records what the sandbox's
// network namespace held at create and at start. It does so for both
// handler types: for "vm" the wrapper is the runc that
// containerd-shim-runc-v2 runs inside the shim's Create, the moment a VM
// runtime would boot the pod VM and mirror the namespace's interfaces. An
// oci handler's create may run alongside CNI ADD (the pause program runs
// at start), so only start is checked for it.
func TestNetworkOrder(t *testing.T) {
	e := newEnv(t, envOptions{extraRuntimes: map[string]handlerOptions{
		"runc-after": {order: "after"},
		"oci":        {typ: "oci"},
		"oci-after":  {typ: "oci", order: "after"},
		"vm":         {typ: "vm"},
		"vm-after":   {typ: "vm", order: "after"},
	}})
	e.start("")

	cases := []struct {
		name    string
		handler string
		mods    []podMod
		want    string
	}{
		{name: "default", want: "before"},
		{name: "podbay-annotation-after", mods: []podMod{withAnnotation(podbayOrderAnnotation, "after")}, want: "after"},
		{name: "handler-default-after", handler: "runc-after", want: "after"},
		{name: "isulad-annotation-overrides-handler", handler: "runc-after", mods: []podMod{withAnnotation(isuladNetworkAnnotation, "true")}, want: "before"},
		{name: "podbay-annotation-overrides-handler", handler: "runc-after", mods: []podMod{withAnnotation(podbayOrderAnnotation, "before")}, want: "before"},
		{name: "oci-before", handler: "oci", want: "before"},
		{name: "oci-after", handler: "oci-after", want: "after"},
		{name: "vm-before", handler: "vm", want: "before"},
		{name: "vm-after", handler: "vm-after", want: "after"},
		{name: "vm-isulad-annotation-overrides-handler", handler: "vm-after", mods: []podMod{withAnnotation(isuladNetworkAnnotation, "true")}, want: "before"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// With a pause process: the order is that of CNI ADD and the
			// sandbox container's create and start.
			id := e.runPod(t, e.podConfig("order-"+tc.name, append(tc.mods, withPause())...), tc.handler)
			key := e.netnsPath(id)
			st, info := e.status(t, id)
			if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("state %v, want READY", st.State)
			}
			ip := e.requireIPInSubnet(t, podIP(st)).String()
			if info.NetworkOrder != tc.want {
				t.Errorf("networkOrder %q, want %q", info.NetworkOrder, tc.want)
			}
			wantHandler := tc.handler
			if wantHandler == "" {
				wantHandler = "runc"
			}
			if info.RuntimeHandler != wantHandler || st.RuntimeHandler != wantHandler {
				t.Errorf("runtime handler %q (status %q), want %q", info.RuntimeHandler, st.RuntimeHandler, wantHandler)
			}

			rec := e.sandboxCreateRecord(t, id)
			if rec.Error != "" {
				t.Fatalf("runtime wrapper could not inspect the namespace at create: %s", rec.Error)
			}
			if rec.NetNSPath != key {
				t.Fatalf("bundle's network namespace path at create %q, want the sandbox key %q", rec.NetNSPath, key)
			}
			// The pod is really run by a shim for a vm handler, and not
			// by one otherwise.
			wantShim := strings.HasPrefix(wantHandler, "vm") || (suiteRuntimeType == "vm" && strings.HasPrefix(wantHandler, "runc"))
			if pid := shimProcess(id); (pid != 0) != wantShim {
				t.Errorf("handler %q: shim process for the pod: pid %d, want one: %v", wantHandler, pid, wantShim)
			}
			started := e.sandboxStartRecord(t, id)
			if started.Error != "" {
				t.Fatalf("runtime wrapper could not inspect the namespace at start: %s", started.Error)
			}
			eth0, hasEth0 := findIface(rec.Interfaces, "eth0")
			eth0AtStart, hasEth0AtStart := findIface(started.Interfaces, "eth0")
			switch tc.want {
			case "before":
				// The pod's first process runs in a configured namespace.
				if !hasEth0AtStart {
					t.Errorf("order before: no eth0 in the sandbox namespace when the runtime started the container; interfaces: %s", ifaceNames(started.Interfaces))
				} else if !hasAddr(eth0AtStart, ip) {
					t.Errorf("order before: eth0 had addresses %v at start, want the pod IP %s", eth0AtStart.Addrs, ip)
				}
				// A VM runtime mirrors the interfaces at create; an oci
				// handler's create may run alongside CNI ADD.
				if !wantShim {
					break
				}
				if !hasEth0 {
					t.Errorf("order before, vm: no eth0 in the sandbox namespace when the runtime created the container; interfaces: %s", ifaceNames(rec.Interfaces))
				} else if !hasAddr(eth0, ip) {
					t.Errorf("order before, vm: eth0 had addresses %v at create, want the pod IP %s", eth0.Addrs, ip)
				}
			case "after":
				if hasEth0 {
					t.Errorf("order after: eth0 (%v) already existed when the runtime created the container", eth0.Addrs)
				}
				if hasEth0AtStart {
					t.Errorf("order after: eth0 (%v) already existed when the runtime started the container", eth0AtStart.Addrs)
				}
				now, err := nsinfo.Interfaces(key)
				if err != nil {
					t.Fatal(err)
				}
				if eth0, ok := findIface(now, "eth0"); !ok || !hasAddr(eth0, ip) {
					t.Errorf("order after: the ready pod's namespace has no eth0 with %s; interfaces: %s", ip, ifaceNames(now))
				}
			}
			requirePing(t, ip)
			e.stopPod(t, id)
			e.removePod(t, id)
		})
	}
	if pods := e.listPods(t, nil); len(pods) != 0 {
		t.Errorf("pods left: %v", podIDs(pods))
	}
	e.assertNoLeaks(t)
}

func ifaceNames(ifaces []nsinfo.Interface) string {
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name+"("+strings.Join(i.Addrs, ",")+")")
	}
	return "[" + strings.Join(names, " ") + "]"
}

// shimProcess is the pid of the shim v2 process serving pod id, or 0.
func shimProcess(id string) int {
	for _, p := range readProcs() {
		if p.state != "Z" && strings.Contains(p.cmdline, "containerd-shim") && strings.Contains(p.cmdline, "-id "+id) {
			return p.pid
		}
	}
	return 0
}
