package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/shim"
	"github.com/podbay/podbay/internal/store"
)

func id(c byte) string { return strings.Repeat(string(c), 64) }

var (
	ownedPod   = id('a')
	ownedCtr   = id('b')
	orphanPod  = id('c')
	orphanCtr  = id('d')
	foreignPod = id('e') // another engine's: never marked as podbay's
)

func TestClassify(t *testing.T) {
	root, state := "/var/lib/podbay", "/run/podbay"
	inv := &Inventory{
		Self:  999,
		Marks: []string{root, state, state + "/runtimes/runc"},
		Namespaces: []Namespace{
			{ID: ownedPod, Path: "/var/run/netns/podbay-" + ownedPod, Mounted: true, InUse: true},
			{ID: orphanPod, Path: "/var/run/netns/podbay-" + orphanPod, Mounted: true},
			{ID: orphanCtr, Path: "/var/run/netns/podbay-" + orphanCtr},
		},
		Rootfses: []Rootfs{
			{ID: ownedPod, Layer: id('1'), MountPoint: "/m/1"},
			{ID: orphanPod, Layer: id('2'), MountPoint: "/var/lib/podbay/storage/overlay/" + id('2') + "/merged"},
		},
		Mounts: []Mount{
			{Point: "/var/lib/podbay/storage/overlay/" + id('3') + "/merged", FSType: "overlay", Layer: id('3')},
			{Point: "/run/podbay/x/podbay-" + ownedCtr, FSType: "nsfs", ID: ownedCtr},
		},
		Reservations: []Reservation{
			{IP: "10.88.0.2", Owner: ownedPod, Path: "/var/lib/cni/networks/podbay/10.88.0.2"},
			{IP: "10.88.0.3", Owner: orphanPod, Path: "/var/lib/cni/networks/podbay/10.88.0.3"},
		},
		Cached: []Cached{
			{ID: ownedPod, Networks: []string{"podbay"}},
			{ID: orphanPod, NetNS: "/var/run/netns/podbay-" + orphanPod, Networks: []string{"cni-loopback", "podbay"}, Files: []string{"/var/lib/podbay/cni/results/podbay-" + orphanPod + "-eth0"}},
		},
		Veths: []Veth{
			{Name: "veth1", PeerID: ownedPod, PeerNSID: 0},
			{Name: "veth2", PeerID: orphanPod, PeerNSID: 1},
			{Name: "veth3", PeerNSID: 5},
			{Name: "veth4", PeerNSID: -1},
		},
		Rules: []Rule{
			{Tool: "iptables", Table: "nat", Line: `-A POSTROUTING -s 10.88.0.2/32 -m comment --comment "name: \"podbay\" id: \"` + ownedPod + `\"" -j CNI-1`, ID: ownedPod},
			{Tool: "iptables", Table: "nat", Line: `-A POSTROUTING -s 10.88.0.3/32 -m comment --comment "name: \"podbay\" id: \"` + orphanPod + `\"" -j CNI-2`, ID: orphanPod},
			{Tool: "iptables", Table: "nat", Line: `-A CNI-2 -d 10.88.0.0/16 -m comment --comment "name: \"podbay\" id: \"` + orphanPod + `\"" -j ACCEPT`, ID: orphanPod, Chain: "CNI-2"},
		},
		Processes: []Process{
			{PID: 1, Args: []string{"/sbin/init"}},
			{PID: 100, PPID: 1, Args: []string{"/usr/bin/podbayd", "--config", "/etc/podbay/podbay.toml"}},
			// An owned pod's conmon and pause.
			{PID: 200, PPID: 1, Args: []string{"/usr/bin/conmon", "--api-version", "1", "--cid", ownedPod, "--bundle", root + "/sandboxes/" + ownedPod + "/bundle"}},
			{PID: 201, PPID: 200, Args: []string{"/pause"}},
			// An orphan's conmon, its pause and a process under it.
			{PID: 300, PPID: 1, Args: []string{"/usr/bin/conmon", "--api-version", "1", "--cid", orphanPod, "--runtime-arg", "--root=" + state + "/runtimes/runc", "--bundle", root + "/sandboxes/" + orphanPod + "/bundle"}},
			{PID: 301, PPID: 300, Args: []string{"/pause"}},
			{PID: 302, PPID: 301, Args: []string{"sleep", "1000"}},
			// A shim of an unowned container, marked by its address.
			{PID: 400, PPID: 1, Args: []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "podbay", "-address", state + "/runtimes/vm/events.sock", "-id", orphanCtr}},
			// The runtime, called with podbay's root and the ID last.
			{PID: 500, PPID: 100, Args: []string{"runc", "--root", state + "/runtimes/runc", "kill", orphanCtr, "KILL"}},
			// Another engine's conmon: the same shape, not podbay's dirs.
			{PID: 600, PPID: 1, Args: []string{"/usr/bin/conmon", "--cid", foreignPod, "--bundle", "/var/lib/containers/storage/overlay-containers/" + foreignPod + "/userdata"}},
			{PID: 601, PPID: 600, Args: []string{"/pause"}},
			// doctor itself never counts.
			{PID: 999, PPID: 1, Args: []string{"podbay", "doctor", "--config", root + "/x/" + orphanPod}},
		},
		Dirs: []Dir{
			{ID: ownedPod, Path: root + "/sandboxes/" + ownedPod, What: "sandbox dir"},
			{ID: orphanPod, Path: root + "/sandboxes/" + orphanPod, What: "sandbox dir"},
			{ID: ownedCtr, Path: root + "/containers/" + ownedCtr, What: "container dir"},
			{ID: orphanCtr, Path: state + "/exits/runc/" + orphanCtr, What: "exit file (runc)"},
		},
	}
	owned := Records{Sandboxes: []string{ownedPod}, Containers: []string{ownedCtr}}.Owned()
	leaks := Classify(inv, owned)

	var got []string
	for _, l := range leaks {
		if l.ID == ownedPod || l.ID == ownedCtr || l.ID == foreignPod {
			t.Errorf("owned or foreign ID reported: %+v", l)
		}
		if l.Cleanup == "" {
			t.Errorf("no cleanup: %+v", l)
		}
		got = append(got, l.Kind+" "+shortID(l.ID)+" "+l.What+" => "+l.Cleanup)
	}
	want := []string{
		"netns " + orphanPod[:13] + " /var/run/netns/podbay-" + orphanPod + " (mounted namespace) => umount /var/run/netns/podbay-" + orphanPod + " && rm /var/run/netns/podbay-" + orphanPod,
		"netns " + orphanCtr[:13] + " /var/run/netns/podbay-" + orphanCtr + " (file, no namespace mounted) => rm /var/run/netns/podbay-" + orphanCtr,
		"rootfs " + orphanPod[:13] + " root filesystem",
		"mount " + orphanPod[:13] + " /var/lib/podbay/storage/overlay/" + id('2') + "/merged (the layer of root filesystem " + orphanPod[:13] + ") => umount",
		"mount  /var/lib/podbay/storage/overlay/" + id('3') + "/merged (overlay of layer 3333333333333, which no root filesystem uses) => umount",
		"ip " + orphanPod[:13] + " IP 10.88.0.3 reserved in /var/lib/cni/networks/podbay/10.88.0.3 => rm /var/lib/cni/networks/podbay/10.88.0.3",
		"cni-cache " + orphanPod[:13] + " CNI attachment to cni-loopback, podbay",
		"veth " + orphanPod[:13] + " veth2: its peer is in the namespace of " + orphanPod + ", which no record owns => ip link del veth2",
		"veth  veth3: its peer is in no namespace pinned in netns_dir => ip link del veth3",
		"veth  veth4: it has no peer in another namespace => ip link del veth4",
		"iptables " + orphanPod[:13] + ` iptables -t nat: -A POSTROUTING -s 10.88.0.3/32 -m comment --comment "name: \"podbay\" id: \"` + orphanPod + `\"" -j CNI-2 => iptables -t nat -D POSTROUTING -s 10.88.0.3/32`,
		"iptables " + orphanPod[:13] + " iptables -t nat: -A CNI-2",
		"iptables " + orphanPod[:13] + " iptables -t nat: chain CNI-2 => iptables -t nat -F CNI-2 && iptables -t nat -X CNI-2",
		"process " + orphanPod[:13] + " pid 300: /usr/bin/conmon --api-version 1 --cid " + orphanPod,
		"process " + orphanPod[:13] + " pid 301: /pause (under pid 300) => kill -KILL 301",
		"process " + orphanPod[:13] + " pid 302: sleep 1000 (under pid 300) => kill -KILL 302",
		"process " + orphanCtr[:13] + " pid 400: /usr/bin/containerd-shim-runc-v2",
		"process " + orphanCtr[:13] + " pid 500: runc --root /run/podbay/runtimes/runc kill " + orphanCtr + " KILL => kill -KILL 500",
		"dir " + orphanPod[:13] + " sandbox dir /var/lib/podbay/sandboxes/" + orphanPod + " => rm -rf /var/lib/podbay/sandboxes/" + orphanPod,
		"dir " + orphanCtr[:13] + " exit file (runc) /run/podbay/exits/runc/" + orphanCtr,
	}
	if len(got) != len(want) {
		t.Errorf("got %d leaks, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range min(len(got), len(want)) {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("leak %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}

	// Owning everything: nothing is a leak but what names no ID.
	owned[orphanPod], owned[orphanCtr] = true, true
	for _, l := range Classify(inv, owned) {
		if l.ID != "" {
			t.Errorf("owned reported: %+v", l)
		}
	}
}

func TestParseIptablesSave(t *testing.T) {
	comment := func(prefix, net, id string) string {
		return `-m comment --comment "` + prefix + `name: \"` + net + `\" id: \"` + id + `\""`
	}
	data := strings.Join([]string{
		"# Generated by iptables-save",
		"*filter",
		":FORWARD ACCEPT [0:0]",
		"-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD",
		"COMMIT",
		"*nat",
		":CNI-1111111111111111111111aa - [0:0]",
		":CNI-DN-22222222222222222222b - [0:0]",
		"-A POSTROUTING -s 10.88.0.3/32 " + comment("", "podbay", orphanPod) + " -j CNI-1111111111111111111111aa",
		"-A CNI-1111111111111111111111aa -d 10.88.0.0/16 " + comment("", "podbay", orphanPod) + " -j ACCEPT",
		"-A CNI-1111111111111111111111aa ! -d 224.0.0.0/4 " + comment("", "podbay", orphanPod) + " -j MASQUERADE",
		"-A CNI-HOSTPORT-DNAT -p tcp " + comment("dnat ", "podbay", orphanPod) + " -m multiport --dports 8080 -j CNI-DN-22222222222222222222b",
		"-A CNI-DN-22222222222222222222b -s 10.88.0.3/32 -p tcp -m tcp --dport 8080 -j CNI-HOSTPORT-SETMARK",
		"-A CNI-DN-22222222222222222222b -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.88.0.3:80",
		// Another network's rule (another runtime, or a test env): not ours.
		"-A POSTROUTING -s 10.99.0.3/32 " + comment("", "other", foreignPod) + " -j CNI-3333333333333333333333cc",
		"-A CNI-3333333333333333333333cc ! -d 224.0.0.0/4 " + comment("", "other", foreignPod) + " -j MASQUERADE",
		"-A CNI-HOSTPORT-SETMARK -m comment --comment \"CNI portfwd masquerade mark\" -j MARK --set-xmark 0x2000/0x2000",
		"COMMIT",
	}, "\n")
	rules := parseIptablesSave("iptables", []byte(data), "podbay", nil)
	var got []string
	for _, r := range rules {
		if r.ID != orphanPod || r.Table != "nat" || r.Tool != "iptables" {
			t.Errorf("rule %+v", r)
		}
		got = append(got, r.Chain+" | "+strings.Join(strings.Fields(r.Line)[:2], " "))
	}
	want := []string{
		" | -A POSTROUTING",
		"CNI-1111111111111111111111aa | -A CNI-1111111111111111111111aa",
		"CNI-1111111111111111111111aa | -A CNI-1111111111111111111111aa",
		" | -A CNI-HOSTPORT-DNAT",
		"CNI-DN-22222222222222222222b | -A CNI-DN-22222222222222222222b",
		"CNI-DN-22222222222222222222b | -A CNI-DN-22222222222222222222b",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestClassifyMounts(t *testing.T) {
	mountinfo := strings.Join([]string{
		"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
		"100 22 8:1 /var/lib/podbay/storage/overlay /var/lib/podbay/storage/overlay rw,relatime - ext4 /dev/sda1 rw",
		"101 100 0:50 / /var/lib/podbay/storage/overlay/" + id('1') + "/merged rw - overlay overlay rw,lowerdir=x",
		"102 100 0:51 / /var/lib/podbay/storage/overlay/" + id('2') + "/merged rw - overlay overlay rw,lowerdir=y",
		"103 22 0:4 net:[4026532000] /var/run/netns/podbay-" + orphanPod + " rw - nsfs nsfs rw",
		"104 22 0:4 net:[4026532001] /run/podbay/pins/podbay-" + orphanCtr + " rw - nsfs nsfs rw",
		"105 22 0:52 / /var/lib/other/" + orphanCtr + " rw - tmpfs tmpfs rw",
		"106 22 0:53 / /var/lib/podbay/with\\040space rw - tmpfs tmpfs rw",
		// A pinned pod's IPC namespace (podns), left by a pod no record owns.
		"107 22 0:4 ipc:[4026532002] /run/podbay/pinns/" + orphanPod + "/ipc rw - nsfs nsfs rw",
		// A pod's shared /dev/shm (podshm), left by a pod no record owns.
		"108 22 0:54 / /run/podbay/shm/" + orphanPod + " rw,nosuid,nodev,noexec - tmpfs shm rw,size=65536k",
	}, "\n")
	s := mountScopeT{
		dirs:   []string{"/var/lib/podbay", "/run/podbay", "/var/lib/podbay/storage", "/run/podbay/storage"},
		layers: "/var/lib/podbay/storage/overlay",
		netns:  "/var/run/netns",
	}
	containers := []storageContainer{{ID: ownedPod, Layer: id('1')}, {ID: orphanPod, Layer: id('9')}}
	parsed, err := procfs.ParseMountinfo(strings.NewReader(mountinfo))
	if err != nil {
		t.Fatal(err)
	}
	rootfses, mounts := classifyMounts(parsed, containers, s)
	if len(rootfses) != 2 || rootfses[0].MountPoint != "/var/lib/podbay/storage/overlay/"+id('1')+"/merged" || rootfses[1].MountPoint != "" {
		t.Errorf("rootfses: %+v", rootfses)
	}
	if len(mounts) != 4 ||
		mounts[0].Layer != id('2') || mounts[0].ID != "" || mounts[0].FSType != "overlay" ||
		mounts[1].ID != orphanCtr || mounts[1].FSType != "nsfs" ||
		mounts[2].ID != orphanPod || mounts[2].FSType != "nsfs" || mounts[2].Point != "/run/podbay/pinns/"+orphanPod+"/ipc" ||
		mounts[3].ID != orphanPod || mounts[3].FSType != "tmpfs" || mounts[3].Point != "/run/podbay/shm/"+orphanPod {
		t.Errorf("mounts: %+v", mounts)
	}
}

func TestProcessID(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"conmon", "--cid", orphanPod, "--name", orphanPod}, orphanPod},
		{[]string{"conmon", "-c", orphanPod}, orphanPod},
		{[]string{"shim", "-namespace", "podbay", "-id", orphanPod, "-address", "/x"}, orphanPod},
		{[]string{"runc", "--root=/x", "delete", "--force", orphanPod}, orphanPod},
		{[]string{"sh", "-c", "echo " + orphanPod}, ""},
		{[]string{"pause"}, ""},
		{nil, ""},
	} {
		if got := processID(c.args); got != c.want {
			t.Errorf("processID(%q) = %q, want %q", c.args, got, c.want)
		}
	}
	dirs := []string{"/var/lib/podbay", "/run/podbay"}
	if !marked([]string{"conmon", "--runtime-arg", "--root=/run/podbay/runtimes/runc"}, dirs) ||
		!marked([]string{"conmon", "--bundle", "/var/lib/podbay/sandboxes/x/bundle"}, dirs) ||
		marked([]string{"conmon", "--bundle", "/var/lib/podbay-other/x"}, dirs) ||
		marked([]string{"conmon", "--bundle", "relative/var/lib/podbay"}, dirs) {
		t.Error("marked")
	}
}

func TestParseLinks(t *testing.T) {
	links, err := parseLinks([]byte(`[{"ifindex":7,"link_index":2,"ifname":"veth1","flags":["UP"],"master":"podbay0","link_netnsid":3},{"ifindex":8,"ifname":"veth2","master":"podbay0"}]`))
	if err != nil || len(links) != 2 || links[0].IfName != "veth1" || links[0].LinkNetnsID == nil || *links[0].LinkNetnsID != 3 || links[1].LinkNetnsID != nil {
		t.Fatalf("links = %+v, %v", links, err)
	}
	if links, err := parseLinks([]byte("\n")); err != nil || links != nil {
		t.Fatalf("empty: %v %v", links, err)
	}
}

func TestShimNamespace(t *testing.T) {
	if shimNamespace != shim.DefaultNamespace {
		t.Fatalf("shimNamespace %q, internal/shim gives %q", shimNamespace, shim.DefaultNamespace)
	}
	if got := shimRuncState(config.Runtime{Type: config.TypeVM}); got != "/run/containerd/runc/podbay" {
		t.Errorf("default shim runc state %q", got)
	}
	if got := shimRuncState(config.Runtime{Type: config.TypeVM, ConfigPath: "/etc/kata.toml"}); got != "" {
		t.Errorf("kata: %q", got)
	}
}

func TestScanFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root, cfg.State = filepath.Join(dir, "root"), filepath.Join(dir, "state")
	cfg.Runtimes = map[string]config.Runtime{"runc": {}, "vm": {Type: config.TypeVM, RuntimeRoot: filepath.Join(dir, "shimrunc")}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("root/sandboxes/" + orphanPod)
	mk("root/sandboxes/not-an-id")  // podbayd removes every unowned entry here
	mk("root/containers/not-an-id") // but only IDs here
	mk("root/containers/" + orphanCtr)
	mk("state/runtimes/runc/" + orphanPod)
	mk("state/exits/runc/" + orphanPod)
	mk("state/runtimes/vm/pods/" + orphanPod)
	mk("state/runtimes/vm/containers/" + orphanCtr)
	mk("shimrunc/podbay/" + orphanPod)
	mk("state/shm/" + orphanPod)
	mk("state/bundles/" + orphanPod)
	mk("state/bundles/not-an-id")
	var got []string
	for _, d := range scanDirs(cfg) {
		rel, _ := filepath.Rel(dir, d.Path)
		got = append(got, d.What+" "+strings.ReplaceAll(rel, orphanPod, "POD"))
	}
	slices.Sort(got)
	want := []string{
		"bundle dir state/bundles/POD",
		"container dir root/containers/" + orphanCtr,
		"exit file (runc) state/exits/runc/POD",
		"pod shm dir state/shm/POD",
		"runtime state (runc) state/runtimes/runc/POD",
		"sandbox dir root/sandboxes/POD",
		"sandbox dir root/sandboxes/not-an-id",
		"shim container state (vm) state/runtimes/vm/containers/" + orphanCtr,
		"shim pod state (vm) state/runtimes/vm/pods/POD",
		"shim runc state (vm) shimrunc/podbay/POD",
	}
	if !slices.Equal(got, want) {
		t.Errorf("dirs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	ipam := filepath.Join(dir, "ipam", "podbay")
	mk("ipam/podbay")
	for name, data := range map[string]string{"lock": "", "last_reserved_ip.0": "10.88.0.3", "10.88.0.3": orphanPod + "\r\neth0", "10.88.0.2": ownedPod} {
		if err := os.WriteFile(filepath.Join(ipam, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := scanReservations(ipam)
	if err != nil || len(res) != 2 || res[0].IP != "10.88.0.2" || res[0].Owner != ownedPod || res[1].Owner != orphanPod {
		t.Fatalf("reservations = %+v, %v", res, err)
	}
	if res, err := scanReservations(filepath.Join(dir, "nothing")); err != nil || res != nil {
		t.Fatalf("missing dir: %v %v", res, err)
	}
}

func TestRecordsFromDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "podbay.db")
	r, err := RecordsFromDatabase(path, 100*time.Millisecond)
	if err != nil || r.Source != SourceDatabase || len(r.Owned()) != 0 || !strings.Contains(r.Detail, "absent") {
		t.Fatalf("no database: %+v, %v", r, err)
	}
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []struct{ bucket, key string }{{sandboxBucket, ownedPod}, {containerBucket, ownedCtr}, {"other", orphanPod}} {
		if err := db.Put(kv.bucket, kv.key, 1, map[string]string{"id": kv.key}); err != nil {
			t.Fatal(err)
		}
	}
	// The daemon holds it: the read waits for the timeout and says so.
	if _, err := RecordsFromDatabase(path, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "held by another process") {
		t.Fatalf("held: %v", err)
	}
	db.Close()
	r, err = RecordsFromDatabase(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	owned := r.Owned()
	if len(owned) != 2 || !owned[ownedPod] || !owned[ownedCtr] {
		t.Fatalf("owned = %v", owned)
	}
}

func TestReportExitAndOutput(t *testing.T) {
	r := &Report{Config: "/etc/podbay/podbay.toml", Checks: []Result{ok("conmon", "fine"), warn("capabilities", "grant it", "lacks CAP_SYS_RESOURCE")},
		Records: &Records{Source: SourceCRI, Detail: "/run/podbay/podbay.sock"}}
	if r.ExitCode() != ExitOK {
		t.Errorf("warnings only: exit %d", r.ExitCode())
	}
	r.Leaks = []Leak{{Kind: KindNetns, ID: orphanPod, What: "/var/run/netns/podbay-" + orphanPod, Cleanup: "rm it"}}
	if r.ExitCode() != ExitLeaks {
		t.Errorf("leaks: exit %d", r.ExitCode())
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"WARN  capabilities  lacks CAP_SYS_RESOURCE", "fix: grant it", "records from cri, /run/podbay/podbay.sock",
		"netns     " + orphanPod[:13] + "  /var/run/netns/podbay-", "cleanup: rm it", "1 OK, 1 WARN, 0 FAIL", "1 leaks"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Leaks) != 1 || back.Leaks[0].ID != orphanPod || back.Records.Source != "cri" || back.Checks[1].Verdict != Warn {
		t.Fatalf("json round trip: %+v, %v\n%s", back, err, js.String())
	}

	r.Checks = append(r.Checks, fail("cni", "install", "missing"))
	if r.ExitCode() != ExitFailed {
		t.Errorf("a failed check with leaks: exit %d", r.ExitCode())
	}
	r = &Report{LeakError: "database held"}
	if r.ExitCode() != ExitFailed {
		t.Errorf("no leak report: exit %d", r.ExitCode())
	}
}
