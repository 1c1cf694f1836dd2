package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The container events of the kubelet's evented PLEG (GetContainerEvents),
// through a real podbayd with runc and conmon.

// eventStream is a GetContainerEvents stream read in the background.
type eventStream struct {
	events chan *runtimeapi.ContainerEventResponse
	done   chan struct{}
	err    error // why the stream ended; set before done is closed
}

// subscribeEvents opens a GetContainerEvents stream on the env's daemon.
func (e *env) subscribeEvents(t *testing.T, ctx context.Context) *eventStream {
	t.Helper()
	stream, err := e.rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatalf("GetContainerEvents: %v", err)
	}
	s := &eventStream{events: make(chan *runtimeapi.ContainerEventResponse, 1000), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				s.err = err
				return
			}
			s.events <- ev
		}
	}()
	return s
}

// waitSubscribers waits until the daemon counts n event subscribers (a
// stream is subscribed once its RPC reaches the daemon).
func (e *env) waitSubscribers(t *testing.T, n int) {
	t.Helper()
	want := fmt.Sprintf("podbay_container_events_subscribers %d\n", n)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(fetchMetrics(t, e.metricsAddr), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never had %d event subscribers", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventWant is an expected event: type and subject, the pod's state, and
// the state of each of the pod's containers by ID.
type eventWant struct {
	typ        runtimeapi.ContainerEventType
	id         string
	pod        runtimeapi.PodSandboxState
	containers map[string]runtimeapi.ContainerState
}

func (w eventWant) String() string { return fmt.Sprintf("%v %.12s", w.typ, w.id) }

// next returns the stream's next event, failing the test if none comes.
func (s *eventStream) next(t *testing.T, what string) *runtimeapi.ContainerEventResponse {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-s.done:
		t.Fatalf("event stream ended (%v) while waiting for %s", s.err, what)
	case <-time.After(containerExitTimeout):
		t.Fatalf("no event within %v; want %s", containerExitTimeout, what)
	}
	return nil
}

// expectEvents reads len(want) events from s and checks each against
// want, in order, for pod podUID.
func expectEvents(t *testing.T, s *eventStream, podID string, want ...eventWant) []*runtimeapi.ContainerEventResponse {
	t.Helper()
	var got []*runtimeapi.ContainerEventResponse
	for i, w := range want {
		ev := s.next(t, w.String())
		got = append(got, ev)
		if ev.ContainerEventType != w.typ || ev.ContainerId != w.id {
			t.Fatalf("event %d is %v %.12s, want %s", i, ev.ContainerEventType, ev.ContainerId, w)
		}
		if d := time.Since(time.Unix(0, ev.CreatedAt)); d < 0 || d > 5*time.Minute {
			t.Errorf("event %d (%s): created_at is %v ago", i, w, d)
		}
		ps := ev.PodSandboxStatus
		if ps.GetId() != podID || ps.GetState() != w.pod || ps.GetMetadata().GetUid() == "" || ps.GetCreatedAt() == 0 {
			t.Errorf("event %d (%s): pod status %v; want pod %.12s %v with metadata", i, w, ps, podID, w.pod)
		}
		states := map[string]runtimeapi.ContainerState{}
		for _, cs := range ev.ContainersStatuses {
			states[cs.Id] = cs.State
		}
		if fmt.Sprint(states) != fmt.Sprint(w.containers) {
			t.Errorf("event %d (%s): container states %v, want %v", i, w, states, w.containers)
		}
	}
	return got
}

// containerStatusIn is the status of container id an event carries.
func containerStatusIn(ev *runtimeapi.ContainerEventResponse, id string) *runtimeapi.ContainerStatus {
	for _, cs := range ev.ContainersStatuses {
		if cs.Id == id {
			return cs
		}
	}
	return nil
}

// TestContainerEvents runs a pod through its life with two gRPC
// subscribers and `crictl events` listening: each sees every event, in
// order, with the statuses of that moment, including the STOPPED of a
// container that exits by itself; daemon shutdown ends the streams
// cleanly.
func TestContainerEvents(t *testing.T) {
	e, ti := newContainerEnv(t, "busybox")
	crictlBin := crictlForEvents(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	first := e.subscribeEvents(t, ctx)
	second := e.subscribeEvents(t, ctx)
	var crictlOut, crictlErr bytes.Buffer
	crictl := exec.CommandContext(ctx, crictlBin, "--runtime-endpoint", "unix://"+e.sock, "events", "--output", "json")
	crictl.Stdout, crictl.Stderr = &crictlOut, &crictlErr
	if err := crictl.Start(); err != nil {
		t.Fatal(err)
	}
	crictlDone := make(chan error, 1)
	go func() { crictlDone <- crictl.Wait() }()
	crictlWaited := false
	defer func() {
		if !crictlWaited {
			crictl.Process.Kill() //nolint:errcheck // our own child, by PID
			<-crictlDone
		}
	}()
	e.waitSubscribers(t, 3)

	const (
		created = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
		started = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
		stopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
		deleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
		ready   = runtimeapi.PodSandboxState_SANDBOX_READY
		dead    = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		cCr     = runtimeapi.ContainerState_CONTAINER_CREATED
		cRun    = runtimeapi.ContainerState_CONTAINER_RUNNING
		cExit   = runtimeapi.ContainerState_CONTAINER_EXITED
	)
	type states = map[string]runtimeapi.ContainerState
	var all []eventWant
	expect := func(pod string, want ...eventWant) []*runtimeapi.ContainerEventResponse {
		t.Helper()
		all = append(all, want...)
		return expectEvents(t, first, pod, want...)
	}

	pod := e.runTestPod(t, "events")
	expect(pod.id, eventWant{created, pod.id, ready, states{}}, eventWant{started, pod.id, ready, states{}})

	app := e.createContainer(t, pod, containerConfig("app", ti.ref("busybox"), ctrCommand("sleep", "3600")))
	expect(pod.id, eventWant{created, app, ready, states{app: cCr}})
	e.startContainer(t, app)
	ev := expect(pod.id, eventWant{started, app, ready, states{app: cRun}})
	if st := containerStatusIn(ev[0], app); st.StartedAt == 0 || st.Image.GetImage() == "" || st.LogPath == "" {
		t.Errorf("STARTED event's status of the container is incomplete: %v", st)
	}

	// A container that exits by itself: its exit watcher reports it.
	quick := e.createContainer(t, pod, containerConfig("quick", ti.ref("busybox"), ctrShell("exit 3")))
	expect(pod.id, eventWant{created, quick, ready, states{app: cRun, quick: cCr}})
	e.startContainer(t, quick)
	expect(pod.id, eventWant{started, quick, ready, states{app: cRun, quick: cRun}})
	ev = expect(pod.id, eventWant{stopped, quick, ready, states{app: cRun, quick: cExit}})
	if st := containerStatusIn(ev[0], quick); st.ExitCode != 3 || st.Reason != "Error" || st.FinishedAt == 0 {
		t.Errorf("STOPPED event of a container that exited 3: status %v", st)
	}

	e.stopContainer(t, app, 0)
	ev = expect(pod.id, eventWant{stopped, app, ready, states{app: cExit, quick: cExit}})
	if st := containerStatusIn(ev[0], app); st.FinishedAt == 0 {
		t.Errorf("STOPPED event: status %v has no finish time", st)
	}
	e.removeContainer(t, app)
	expect(pod.id, eventWant{deleted, app, ready, states{quick: cExit}})
	e.removeContainer(t, quick)
	expect(pod.id, eventWant{deleted, quick, ready, states{}})
	e.stopPod(t, pod.id)
	ev = expect(pod.id, eventWant{stopped, pod.id, dead, states{}})
	if ev[0].PodSandboxStatus.GetNetwork().GetIp() != "" {
		t.Errorf("STOPPED pod still reports IP %s", ev[0].PodSandboxStatus.Network.Ip)
	}
	e.removePod(t, pod.id)
	expect(pod.id, eventWant{deleted, pod.id, dead, states{}})

	// The second subscriber got the same events.
	for i, w := range all {
		ev := second.next(t, w.String())
		if ev.ContainerEventType != w.typ || ev.ContainerId != w.id {
			t.Fatalf("second subscriber: event %d is %v %.12s, want %s", i, ev.ContainerEventType, ev.ContainerId, w)
		}
	}
	if body := fetchMetrics(t, e.metricsAddr); !strings.Contains(body, "podbay_container_events_dropped_subscribers_total 0\n") {
		t.Errorf("a subscriber was dropped:\n%s", grepLines(body, "podbay_container_events"))
	}

	// Shutdown ends every stream with OK: io.EOF for a client, and crictl
	// exits 0.
	e.stop()
	for _, s := range []*eventStream{first, second} {
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Fatal("event stream still open after podbayd stopped")
		}
		if !errors.Is(s.err, io.EOF) {
			t.Errorf("event stream ended with %v, want EOF", s.err)
		}
		if len(s.events) != 0 {
			t.Errorf("%d unexpected events", len(s.events))
		}
	}
	select {
	case err := <-crictlDone:
		crictlWaited = true
		if err != nil {
			t.Errorf("crictl events: %v\n%s", err, crictlErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("crictl events still running after podbayd stopped")
	}

	// crictl printed the same events, as JSON.
	dec := json.NewDecoder(&crictlOut)
	var printed []string
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("crictl events output: %v", err)
		}
		// Only the fields this test checks: crictl prints enums as its
		// own cri-api names them (v1.34 printed stopSignal "SIGTERM",
		// where v0.37 says "SIGNAL_SIGTERM"), which the daemon's API
		// need not parse whole.
		var ev struct {
			ContainerID        string `json:"containerId"`
			ContainerEventType string `json:"containerEventType"`
			PodSandboxStatus   struct {
				ID string `json:"id"`
			} `json:"podSandboxStatus"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("crictl events output %s: %v", raw, err)
		}
		if ev.PodSandboxStatus.ID != pod.id {
			t.Errorf("crictl printed an event without its pod's status: %s", raw)
		}
		typ, ok := runtimeapi.ContainerEventType_value[ev.ContainerEventType]
		if !ok {
			t.Fatalf("crictl printed event type %q", ev.ContainerEventType)
		}
		printed = append(printed, eventWant{typ: runtimeapi.ContainerEventType(typ), id: ev.ContainerID}.String())
	}
	var wantPrinted []string
	for _, w := range all {
		wantPrinted = append(wantPrinted, w.String())
	}
	if fmt.Sprint(printed) != fmt.Sprint(wantPrinted) {
		t.Errorf("crictl events printed\n%v\nwant\n%v", printed, wantPrinted)
	}
}

func grepLines(body, substr string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var (
	eventsCrictlOnce sync.Once
	eventsCrictlErr  error
)

// crictlForEvents builds crictl from the tools module (the pinned cri-tools)
// into binDir, once per test binary.
func crictlForEvents(t *testing.T) string {
	t.Helper()
	out := filepath.Join(binDir, "crictl-events")
	eventsCrictlOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			eventsCrictlErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", out, "sigs.k8s.io/cri-tools/cmd/crictl")
		cmd.Dir = filepath.Join(root, "tools")
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			eventsCrictlErr = fmt.Errorf("build crictl: %v\n%s", err, b)
		}
	})
	if eventsCrictlErr != nil {
		t.Fatal(eventsCrictlErr)
	}
	return out
}
