package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/events"
	"github.com/podbay/podbay/internal/metrics"
)

// The container events (GetContainerEvents) on the fakes.

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	evDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

// wantEvent is an expected event: its type and subject, the pod's state,
// and the state of each container of the pod (by ID) it reports.
type wantEvent struct {
	typ        runtimeapi.ContainerEventType
	id         string
	pod        runtimeapi.PodSandboxState
	containers map[string]runtimeapi.ContainerState
}

// subscribe subscribes to the server's events for the rest of the test.
func (e *testEnv) subscribe(t *testing.T) *events.Subscription[*runtimeapi.ContainerEventResponse] {
	t.Helper()
	sub, err := e.srv.events.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Cancel)
	return sub
}

// expectEvents checks that sub's next events are want, in order, each for
// pod podID, and that no other event follows at once.
func expectEvents(t *testing.T, sub *events.Subscription[*runtimeapi.ContainerEventResponse], podID string, want ...wantEvent) {
	t.Helper()
	for i, w := range want {
		var ev *runtimeapi.ContainerEventResponse
		select {
		case ev = <-sub.Events():
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d: none came, want %v %s", i, w.typ, w.id)
		}
		if ev == nil {
			t.Fatalf("event %d: subscription ended (%v), want %v %s", i, sub.Err(), w.typ, w.id)
		}
		checkEvent(t, i, ev, podID, w)
	}
	select {
	case ev := <-sub.Events():
		t.Fatalf("unexpected event %v %s", ev.GetContainerEventType(), ev.GetContainerId())
	case <-time.After(50 * time.Millisecond):
	}
}

func checkEvent(t *testing.T, i int, ev *runtimeapi.ContainerEventResponse, podID string, w wantEvent) {
	t.Helper()
	if ev.ContainerEventType != w.typ || ev.ContainerId != w.id {
		t.Fatalf("event %d is %v %s, want %v %s", i, ev.ContainerEventType, ev.ContainerId, w.typ, w.id)
	}
	if d := time.Since(time.Unix(0, ev.CreatedAt)); d < 0 || d > time.Minute {
		t.Errorf("event %d: created_at %d is %v ago", i, ev.CreatedAt, d)
	}
	ps := ev.PodSandboxStatus
	if ps.GetId() != podID || ps.GetMetadata().GetUid() == "" || ps.GetState() != w.pod {
		t.Errorf("event %d (%v %s): pod status %v, want pod %s %v with its metadata", i, w.typ, w.id, ps, podID, w.pod)
	}
	got := map[string]runtimeapi.ContainerState{}
	for _, cs := range ev.ContainersStatuses {
		got[cs.Id] = cs.State
		if cs.Metadata.GetName() == "" || cs.CreatedAt == 0 {
			t.Errorf("event %d: container status %v lacks metadata or creation time", i, cs)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(w.containers) {
		t.Errorf("event %d (%v %s): container states %v, want %v", i, w.typ, w.id, got, w.containers)
	}
}

type cstates = map[string]runtimeapi.ContainerState

const (
	ready    = runtimeapi.PodSandboxState_SANDBOX_READY
	notReady = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	cCreated = runtimeapi.ContainerState_CONTAINER_CREATED
	cRunning = runtimeapi.ContainerState_CONTAINER_RUNNING
	cExited  = runtimeapi.ContainerState_CONTAINER_EXITED
)

// The kubelet's order: run, create, start, stop, remove the container,
// then stop and remove the pod.
func TestContainerEventsLifecycle(t *testing.T) {
	e := newTestEnv(t, "")
	sub := e.subscribe(t)
	other := e.subscribe(t)
	pod := e.podWithImage(t, "web")
	expectEvents(t, sub, pod,
		wantEvent{evCreated, pod, ready, cstates{}},
		wantEvent{evStarted, pod, ready, cstates{}})
	id := e.mustCreate(t, pod, containerConfig("app"))
	expectEvents(t, sub, pod, wantEvent{evCreated, id, ready, cstates{id: cCreated}})
	e.startFakeContainer(t, id)
	expectEvents(t, sub, pod, wantEvent{evStarted, id, ready, cstates{id: cRunning}})
	if err := e.stopContainer(id); err != nil {
		t.Fatal(err)
	}
	// One STOPPED, though both StopContainer and the exit watcher see the
	// exit.
	expectEvents(t, sub, pod, wantEvent{evStopped, id, ready, cstates{id: cExited}})
	if err := e.removeContainer(id); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, sub, pod, wantEvent{evDeleted, id, ready, cstates{}})
	if err := e.stopPod(pod); err != nil {
		t.Fatal(err)
	}
	if err := e.stopPod(pod); err != nil { // a repeated Stop changes nothing
		t.Fatal(err)
	}
	expectEvents(t, sub, pod, wantEvent{evStopped, pod, notReady, cstates{}})
	if err := e.removePod(pod); err != nil {
		t.Fatal(err)
	}
	// The pod's status as it was when it went: the kubelet drops an event
	// without one, and drops the pod from its cache on this one.
	expectEvents(t, sub, pod, wantEvent{evDeleted, pod, notReady, cstates{}})

	// The second subscriber got the same.
	var types []string
	for range 8 {
		select {
		case ev := <-other.Events():
			types = append(types, ev.ContainerEventType.String())
		case <-time.After(time.Second):
			t.Fatalf("second subscriber got only %v", types)
		}
	}
	want := "[CONTAINER_CREATED_EVENT CONTAINER_STARTED_EVENT CONTAINER_CREATED_EVENT CONTAINER_STARTED_EVENT CONTAINER_STOPPED_EVENT CONTAINER_DELETED_EVENT CONTAINER_STOPPED_EVENT CONTAINER_DELETED_EVENT]"
	if fmt.Sprint(types) != want {
		t.Fatalf("second subscriber got %v", types)
	}
}

// Removing a running pod: the pod stops being ready first, then its
// container stops and is deleted, then the pod is.
func TestContainerEventsRemoveRunningPod(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("app"))
	e.startFakeContainer(t, id)
	sub := e.subscribe(t)
	if err := e.removePod(pod); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, sub, pod,
		wantEvent{evStopped, pod, notReady, cstates{id: cRunning}},
		wantEvent{evStopped, id, notReady, cstates{id: cExited}},
		wantEvent{evDeleted, id, notReady, cstates{}},
		wantEvent{evDeleted, pod, notReady, cstates{}})
}

// Exits nobody asked for: a container's process, the pod's pause process,
// and a container that fails to start.
func TestContainerEventsUnaskedExits(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("app"))
	e.startFakeContainer(t, id)
	failing := e.mustCreate(t, pod, containerConfig("failing"))
	sub := e.subscribe(t)

	e.rt.exit(id)
	expectEvents(t, sub, pod, wantEvent{evStopped, id, ready, cstates{id: cExited, failing: cCreated}})

	e.rt.failOn("start", errors.New("no such program"))
	if _, err := call(e.srv, "StartContainer", e.srv.StartContainer, &runtimeapi.StartContainerRequest{ContainerId: failing}); err == nil {
		t.Fatal("StartContainer succeeded with a failing runtime")
	}
	e.rt.failOn("start", nil)
	expectEvents(t, sub, pod, wantEvent{evStopped, failing, ready, cstates{id: cExited, failing: cExited}})

	e.rt.exit(pod)
	expectEvents(t, sub, pod, wantEvent{evStopped, pod, notReady, cstates{id: cExited, failing: cExited}})
	// Stopping the dead pod does not report it stopped again.
	if err := e.stopPod(pod); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, sub, pod)
}

// A container (and a pod) that exited while podbayd was down is reported
// stopped when recovery finds it.
func TestContainerEventsRecovery(t *testing.T) {
	e := newTestEnv(t, "")
	pod := e.podWithImage(t, "web")
	id := e.mustCreate(t, pod, containerConfig("app"))
	e.startFakeContainer(t, id)
	e.srv.Shutdown(context.Background())
	e.rt.exit(id)
	e.rt.exit(pod)

	// Subscribed before recovery runs, as a kubelet connected at once is.
	srv, err := New(Options{
		Config: e.cfg, DB: e.db, Network: e.net, NetNS: e.ns, Runtimes: e.runtimes,
		Cgroups: e.cg, Images: e.img, PauseBinary: "/nonexistent/podbay-pause",
	})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	sub := e.subscribe(t)
	if err := srv.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-srv.Recovered()
	// Recovery reconciles a pod's containers, then the pod.
	expectEvents(t, sub, pod,
		wantEvent{evStopped, id, ready, cstates{id: cExited}},
		wantEvent{evStopped, pod, notReady, cstates{id: cExited}})
}

// Through gRPC: two subscribers, one of which does not read. The reader
// gets everything; the other is dropped with ResourceExhausted after a
// gap-free prefix; Publish never waits; shutdown ends the stream with OK.
func TestGetContainerEventsStream(t *testing.T) {
	e := newTestEnv(t, "")
	m := metrics.New()
	e.srv.eventMetrics = m.NewContainerEvents()
	e.srv.events = newEventBroadcaster(e.srv.eventMetrics)

	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.srv.Serve(l) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	open := func() runtimeapi.RuntimeService_GetContainerEventsClient {
		stream, err := client.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return stream
	}
	fast, slow := open(), open()
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.events.Subscribers() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers, want 2", e.srv.events.Subscribers())
		}
		time.Sleep(time.Millisecond)
	}

	var fastGot []string
	var fastErr error
	var fastN atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ev, err := fast.Recv()
			if err != nil {
				fastErr = err
				return
			}
			fastGot = append(fastGot, ev.ContainerId)
			fastN.Add(1)
		}
	}()

	// Far more than the slow one's buffer and its connection's flow
	// control window hold, each the size of a real event. The fast one
	// keeps up: it is never more than a tenth of its buffer behind.
	const n = 10 * containerEventBuffer
	pad := strings.Repeat("x", 200)
	var slowest time.Duration
	for i := range n {
		for int64(i)-fastN.Load() > containerEventBuffer/10 {
			if ctx.Err() != nil {
				t.Fatalf("the fast subscriber got only %d events", fastN.Load())
			}
			time.Sleep(100 * time.Microsecond)
		}
		start := time.Now()
		e.srv.events.Publish(&runtimeapi.ContainerEventResponse{ContainerId: fmt.Sprintf("%06d", i), PodSandboxStatus: &runtimeapi.PodSandboxStatus{Id: pad}})
		slowest = max(slowest, time.Since(start))
	}
	if slowest > time.Second {
		t.Errorf("a Publish took %v", slowest)
	}

	// The slow one: a prefix of the events, none missing, then
	// ResourceExhausted.
	var slowGot []string
	var slowErr error
	for {
		ev, err := slow.Recv()
		if err != nil {
			slowErr = err
			break
		}
		slowGot = append(slowGot, ev.ContainerId)
	}
	if status.Code(slowErr) != codes.ResourceExhausted {
		t.Fatalf("slow subscriber ended with %v, want ResourceExhausted", slowErr)
	}
	if len(slowGot) == 0 || len(slowGot) >= n {
		t.Fatalf("slow subscriber got %d events", len(slowGot))
	}
	for i, id := range slowGot {
		if id != fmt.Sprintf("%06d", i) {
			t.Fatalf("slow subscriber: event %d is %s", i, id)
		}
	}
	if got := metricValue(t, m, "podbay_container_events_dropped_subscribers_total"); got != 1 {
		t.Fatalf("dropped subscribers metric = %v, want 1", got)
	}
	if got := metricValue(t, m, "podbay_container_events_subscribers"); got != 1 {
		t.Fatalf("subscribers metric = %v, want 1", got)
	}

	// Shutdown ends the fast one's stream cleanly, after everything.
	e.srv.Shutdown(context.Background())
	wg.Wait()
	if !errors.Is(fastErr, io.EOF) {
		t.Fatalf("fast subscriber ended with %v, want EOF", fastErr)
	}
	if len(fastGot) != n || !slices.IsSorted(fastGot) || fastGot[n-1] != fmt.Sprintf("%06d", n-1) {
		t.Fatalf("fast subscriber got %d events, want all %d in order", len(fastGot), n)
	}
	e.srv = e.newServer(t, nil) // for the cleanup
}

// metricValue is the value of the unlabelled counter or gauge name in m.
func metricValue(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			if c := f.GetMetric()[0].GetCounter(); c != nil {
				return c.GetValue()
			}
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Without a subscriber no event is made; with one, each change makes one.
func TestContainerEventsOnlyWithSubscribers(t *testing.T) {
	e := newTestEnv(t, "")
	m := metrics.New()
	e.srv.eventMetrics = m.NewContainerEvents()
	e.srv.events = newEventBroadcaster(e.srv.eventMetrics)
	published := func() float64 {
		families, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, f := range families {
			if f.GetName() == "podbay_container_events_total" {
				for _, s := range f.GetMetric() {
					n += s.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	e.mustRun(t, podConfig("unwatched"))
	if n := published(); n != 0 {
		t.Fatalf("%v events made without a subscriber", n)
	}
	sub := e.subscribe(t)
	pod := e.mustRun(t, podConfig("watched"))
	expectEvents(t, sub, pod,
		wantEvent{evCreated, pod, ready, cstates{}},
		wantEvent{evStarted, pod, ready, cstates{}})
	if n := published(); n != 2 {
		t.Fatalf("%v events counted, want 2", n)
	}
}
