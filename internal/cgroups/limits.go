package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/podbay/podbay/internal/errdefs"
)

// Limits are the settings SetLimits writes to a cgroup. A zero field is
// left as it is; -1 in CPUQuota or MemoryLimit is "no limit".
type Limits struct {
	CPUShares   uint64
	CPUQuota    int64 // µs per CPUPeriod
	CPUPeriod   uint64
	MemoryLimit int64
	// Hugepages are limits in bytes by page size ("2MB", "1GB").
	Hugepages map[string]uint64
	// Unified are cgroup v2 files by name (cgroup v2 only).
	Unified map[string]string
}

// write is one file written by SetLimits, with what it held before.
type write struct {
	file string
	prev []byte
}

// SetLimits writes l to the cgroup at path, which must exist, in the
// hierarchies of the controllers l sets (v1: cpu, memory, hugetlb; v2: the
// cgroup's directory). The kernel enforces a cgroup's limits on every
// cgroup below it, so a pod's cgroup limits the whole pod.
//
// A memory limit below the cgroup's current usage is refused with an error
// wrapping errdefs.ErrFailedPrecondition before anything is written: the
// kernel would otherwise reclaim, or OOM-kill on v2, to get there. Values
// the kernel refuses fail with the file named. On any failure the files
// already written are restored, so nothing is half-applied. On success,
// restore puts back every file's previous value (for a caller whose later
// step failed).
func (r *Reader) SetLimits(path string, l Limits) (restore func() error, err error) {
	rel, err := relPath(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	var plan []planned
	if r.mode == V2 {
		plan, err = r.planV2(rel, l)
	} else {
		plan, err = r.planV1(rel, l)
	}
	if err != nil {
		return nil, fmt.Errorf("set limits of cgroup %s: %w", path, err)
	}
	var done []write
	undo := func() error {
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			if err := writeValue(done[i].file, done[i].prev); err != nil {
				errs = append(errs, fmt.Errorf("restore %s: %w", done[i].file, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, p := range plan {
		prev, err := os.ReadFile(p.file)
		if err != nil {
			_ = undo()
			return nil, fmt.Errorf("set limits of cgroup %s: %w", path, err)
		}
		if err := p.apply(); err != nil {
			if rerr := undo(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, fmt.Errorf("set limits of cgroup %s: %w", path, err)
		}
		done = append(done, write{file: p.file, prev: restoreValue(p.file, prev)})
	}
	return undo, nil
}

// planned is one write: apply writes file (and may write it twice, or
// another file first, as cpu.cfs_period_us and cfs_quota_us need).
type planned struct {
	file  string
	apply func() error
}

func plain(file, value string) planned {
	return planned{file: file, apply: func() error { return writeValue(file, []byte(value)) }}
}

// v1Dir returns the cgroup's directory in ctrl's v1 hierarchy; the cgroup
// must exist there.
func (r *Reader) v1Dir(ctrl, rel string) (string, error) {
	root, ok := r.v1[ctrl]
	if !ok {
		entries, err := os.ReadDir(r.root)
		if err != nil {
			return "", err
		}
		if root, ok = findV1Hierarchy(r.root, entries, ctrl); !ok {
			return "", fmt.Errorf("the %s controller is not mounted: %w", ctrl, errdefs.ErrFailedPrecondition)
		}
	}
	dir := filepath.Join(root, rel)
	if err := requireDir(dir); err != nil {
		return "", fmt.Errorf("cgroup %s in the %s hierarchy: %w", rel, ctrl, err)
	}
	return dir, nil
}

func (r *Reader) planV1(rel string, l Limits) ([]planned, error) {
	if len(l.Unified) > 0 {
		return nil, fmt.Errorf("cgroup v2 settings on a cgroup v1 host: %w", errdefs.ErrInvalidArgument)
	}
	var plan []planned
	if l.CPUShares != 0 || l.CPUQuota != 0 || l.CPUPeriod != 0 {
		dir, err := r.v1Dir("cpu", rel)
		if err != nil {
			return nil, err
		}
		if l.CPUShares != 0 {
			plan = append(plan, plain(filepath.Join(dir, "cpu.shares"), strconv.FormatUint(l.CPUShares, 10)))
		}
		period, quota := filepath.Join(dir, "cpu.cfs_period_us"), filepath.Join(dir, "cpu.cfs_quota_us")
		switch {
		case l.CPUPeriod != 0 && l.CPUQuota != 0:
			// The kernel checks quota against period: a new pair may
			// need the quota written first (runc's order and retry).
			p, q := []byte(strconv.FormatUint(l.CPUPeriod, 10)), []byte(strconv.FormatInt(l.CPUQuota, 10))
			plan = append(plan, planned{file: period, apply: func() error { return nil }},
				planned{file: quota, apply: func() error {
					if err := writeValue(period, p); err != nil {
						if !errors.Is(err, syscall.EINVAL) {
							return err
						}
						if err := writeValue(quota, q); err != nil {
							return err
						}
						return writeValue(period, p)
					}
					return quotaV1(writeValue(quota, q))
				}})
		case l.CPUPeriod != 0:
			plan = append(plan, plain(period, strconv.FormatUint(l.CPUPeriod, 10)))
		case l.CPUQuota != 0:
			q := []byte(strconv.FormatInt(l.CPUQuota, 10))
			plan = append(plan, planned{file: quota, apply: func() error { return quotaV1(writeValue(quota, q)) }})
		}
	}
	if l.MemoryLimit != 0 {
		dir, err := r.v1Dir("memory", rel)
		if err != nil {
			return nil, err
		}
		if err := checkUsage(dir, "memory.usage_in_bytes", l.MemoryLimit); err != nil {
			return nil, err
		}
		plan = append(plan, plain(filepath.Join(dir, "memory.limit_in_bytes"), strconv.FormatInt(l.MemoryLimit, 10)))
	}
	if len(l.Hugepages) > 0 {
		dir, err := r.v1Dir("hugetlb", rel)
		if err != nil {
			return nil, err
		}
		for _, size := range sortedKeys(l.Hugepages) {
			f, err := controlFile(dir, "hugetlb."+size+".limit_in_bytes")
			if err != nil {
				return nil, err
			}
			plan = append(plan, plain(f, strconv.FormatUint(l.Hugepages[size], 10)))
		}
	}
	return plan, nil
}

func (r *Reader) planV2(rel string, l Limits) ([]planned, error) {
	dir := filepath.Join(r.root, rel)
	if err := requireDir(dir); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", rel, err)
	}
	var plan []planned
	if l.CPUShares != 0 {
		f, err := controlFile(dir, "cpu.weight")
		if err != nil {
			return nil, err
		}
		plan = append(plan, plain(f, strconv.FormatUint(SharesToWeight(l.CPUShares), 10)))
	}
	if l.CPUQuota != 0 || l.CPUPeriod != 0 {
		f, err := controlFile(dir, "cpu.max")
		if err != nil {
			return nil, err
		}
		cur, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		// cpu.max is "$MAX $PERIOD"; the half not set is kept.
		fields := strings.Fields(string(cur))
		if len(fields) != 2 {
			return nil, fmt.Errorf("parse %s: %q", f, cur)
		}
		quota, period := fields[0], fields[1]
		if l.CPUQuota > 0 {
			quota = strconv.FormatInt(l.CPUQuota, 10)
		} else if l.CPUQuota < 0 {
			quota = "max"
		}
		if l.CPUPeriod != 0 {
			period = strconv.FormatUint(l.CPUPeriod, 10)
		}
		plan = append(plan, plain(f, quota+" "+period))
	}
	if l.MemoryLimit != 0 {
		f, err := controlFile(dir, "memory.max")
		if err != nil {
			return nil, err
		}
		if err := checkUsage(dir, "memory.current", l.MemoryLimit); err != nil {
			return nil, err
		}
		v := "max"
		if l.MemoryLimit > 0 {
			v = strconv.FormatInt(l.MemoryLimit, 10)
		}
		plan = append(plan, plain(f, v))
	}
	for _, size := range sortedKeys(l.Hugepages) {
		f, err := controlFile(dir, "hugetlb."+size+".max")
		if err != nil {
			return nil, err
		}
		plan = append(plan, plain(f, strconv.FormatUint(l.Hugepages[size], 10)))
	}
	for _, name := range sortedKeys(l.Unified) {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "cgroup.") {
			return nil, fmt.Errorf("unified key %q is not a controller file: %w", name, errdefs.ErrInvalidArgument)
		}
		f, err := controlFile(dir, name)
		if err != nil {
			return nil, err
		}
		plan = append(plan, plain(f, l.Unified[name]))
	}
	return plan, nil
}

// quotaV1 explains the EINVAL of a v1 cfs_quota_us write: the kernel keeps
// a child's quota (per period) within its parent's, so a pod's quota cannot
// go below one of its containers'; the kubelet resizes containers first.
func quotaV1(err error) error {
	if errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w (cgroup v1 refuses a quota below that of a cgroup inside: lower the containers' first): %w", err, errdefs.ErrFailedPrecondition)
	}
	return err
}

// controlFile returns dir/name, which must exist: a missing file is a
// controller that is not enabled for the cgroup (or a kernel without it).
func controlFile(dir, name string) (string, error) {
	f := filepath.Join(dir, name)
	if _, err := os.Stat(f); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: no such control file (controller not enabled?): %w", f, errdefs.ErrFailedPrecondition)
		}
		return "", err
	}
	return f, nil
}

// checkUsage refuses a memory limit below the cgroup's current usage.
func checkUsage(dir, usageFile string, limit int64) error {
	if limit < 0 {
		return nil
	}
	b, err := readFile(dir, usageFile)
	if err != nil {
		return err
	}
	usage, err := parseSingle(usageFile, b)
	if err != nil {
		return err
	}
	if uint64(limit) < usage {
		return fmt.Errorf("memory limit %d bytes is below the current usage of %d bytes: %w", limit, usage, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// restoreValue is the value that puts file back as it was read: v1 reports
// an unlimited memory limit as a large number (PAGE_COUNTER_MAX pages),
// which cannot always be written back; "-1" can.
func restoreValue(file string, prev []byte) []byte {
	v := strings.TrimSpace(string(prev))
	if strings.HasSuffix(file, ".limit_in_bytes") {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n >= 1<<62 {
			return []byte("-1")
		}
	}
	return []byte(v)
}

func writeValue(file string, v []byte) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, file, err)
	}
	return nil
}

// SharesToWeight converts cgroup v1 cpu.shares to v2 cpu.weight as runc
// and crun do: [2, 262144] onto [1, 10000].
func SharesToWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	shares = min(max(shares, 2), 262144)
	return 1 + ((shares-2)*9999)/262142
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
