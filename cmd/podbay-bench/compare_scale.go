package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The moments memory is sampled at.
const (
	memStart = "start" // the daemon fresh, before the warm-up
	memIdle  = "idle"  // after the rounds, no pods
	memScale = "scale" // with the scale phase's pods
)

// memSample is the memory of a daemon process and of its per-pod
// processes (conmon, or containerd-shim-*), in bytes. RSS counts a page
// shared by several processes once in each; PSS splits it among them.
type memSample struct {
	ok               bool
	rss, pss         int64
	procs            int
	procRSS, procPSS int64
}

// memory samples the daemon (by PID) and the per-pod processes: every
// conmon or containerd-shim* process whose command line holds t.procs.
func (t *target) memory() memSample {
	var m memSample
	if t.pid <= 0 {
		return m
	}
	var err error
	if m.rss, m.pss, err = procMemory(t.pid); err != nil {
		return m
	}
	m.ok = true
	if t.procs == "" {
		return m
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		c := strings.TrimSpace(string(comm))
		if c != "conmon" && !strings.HasPrefix(c, "containerd-shim") {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(t.procs)) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		rss, pss, err := procMemory(pid)
		if err != nil {
			continue // exited meanwhile
		}
		m.procs++
		m.procRSS += rss
		m.procPSS += pss
	}
	return m
}

// procMemory reads a process's RSS (status VmRSS) and PSS (smaps_rollup).
func procMemory(pid int) (rss, pss int64, err error) {
	rss, err = kBField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
	if err != nil {
		return 0, 0, err
	}
	pss, err = kBField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	return rss, pss, err
}

// kBField returns the first "<name> <n> kB" line's value in bytes.
func kBField(path, name string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == name {
			v, err := strconv.ParseInt(fields[1], 10, 64)
			return v * 1024, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s", path, name)
}

// scalePhase runs pods pods, each with a running container, c at a time;
// samples memory; times samples of ListPodSandbox, ListContainers,
// PodSandboxStatus (a different pod each time) and ListContainerStats,
// interleaved; and removes the pods, c at a time.
func (t *target) scalePhase(ctx context.Context, pods, samples, c int) (retErr error) {
	start := time.Now()
	up, errs := t.scaleUpPods(ctx, pods, c)
	t.scaleUp = time.Since(start)
	// Teardown, also after a failure: the run's cleanup would remove the
	// pods one at a time.
	defer func() {
		retErr = errors.Join(retErr, t.scaleDownPods(up, c))
	}()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d pods up, %d errors, the first: %w", len(up), pods, len(errs), errs[0])
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	t.mem[memScale] = t.memory()
	rpcs := t.scaleRPCs(pods, up)
	for i := range samples {
		if err := ctx.Err(); err != nil {
			return err
		}
		for j := range rpcs {
			// Rotate the order, so that no RPC always follows the same one.
			r := rpcs[(i+j)%len(rpcs)]
			d, err := t.call(r.row, func(ctx context.Context) error { return r.fn(ctx, i*7919) })
			if err != nil {
				return err
			}
			t.scale[r.row] = append(t.scale[r.row], d)
		}
	}
	return nil
}

// scalePod is a pod the scale phase ran.
type scalePod struct {
	id  string
	cfg *runtimeapi.PodSandboxConfig
}

// scaleUpPods runs pods pods, c at a time, each with a started container,
// until one fails or ctx ends; up are the pods that ran (with their
// container or not), errs what failed.
func (t *target) scaleUpPods(ctx context.Context, pods, c int) (up []scalePod, errs []error) {
	var mu sync.Mutex
	cfgs := make(chan *runtimeapi.PodSandboxConfig)
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cfg := range cfgs {
				id, _, err := t.runPod(cfg)
				if err == nil {
					mu.Lock()
					up = append(up, scalePod{id, cfg})
					mu.Unlock()
					var cid string
					if cid, _, err = t.createContainer(id, cfg, 0, t.b.opts.image); err == nil {
						_, err = t.startContainer(cid)
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for range pods {
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		cfgs <- t.pod("scale")
	}
	close(cfgs)
	wg.Wait()
	return up, errs
}

// scaleDownPods removes the pods up, c at a time, also after a failure:
// the run's cleanup would remove them one at a time.
func (t *target) scaleDownPods(up []scalePod, c int) error {
	start := time.Now()
	work := make(chan scalePod)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var derrs []error
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if err := t.removePod(p.id, p.cfg); err != nil {
					mu.Lock()
					derrs = append(derrs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range up {
		work <- p
	}
	close(work)
	wg.Wait()
	t.scaleDown = time.Since(start)
	return errors.Join(derrs...)
}

// scaleRPC is one RPC the scale phase samples: fn's i picks a pod.
type scaleRPC struct {
	row string
	fn  func(ctx context.Context, i int) error
}

// scaleRPCs are the RPCs sampled with pods pods up.
func (t *target) scaleRPCs(pods int, up []scalePod) []scaleRPC {
	return []scaleRPC{
		{rpcListPods, func(ctx context.Context, _ int) error {
			resp, err := t.b.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err == nil && len(resp.GetItems()) < pods {
				err = fmt.Errorf("lists %d pods, want %d", len(resp.GetItems()), pods)
			}
			return err
		}},
		{rpcListCtrs, func(ctx context.Context, _ int) error {
			resp, err := t.b.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err == nil && len(resp.GetContainers()) < pods {
				err = fmt.Errorf("lists %d containers, want %d", len(resp.GetContainers()), pods)
			}
			return err
		}},
		{rpcPodStatus, func(ctx context.Context, i int) error {
			_, err := t.b.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: up[i%len(up)].id})
			return err
		}},
		{rpcListStats, func(ctx context.Context, _ int) error {
			resp, err := t.b.client.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			if err == nil && len(resp.GetStats()) < pods {
				err = fmt.Errorf("stats of %d containers, want %d", len(resp.GetStats()), pods)
			}
			return err
		}},
	}
}
