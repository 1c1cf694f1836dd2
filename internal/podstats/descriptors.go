package podstats

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The metrics ListPodSandboxMetrics reports, with the names, help texts
// and types cAdvisor gives them, so that the kubelet's /metrics/cadvisor
// endpoint reads the same with PodAndContainerStatsFromCRI on as off.
// Label keys follow containerd 2 (pod, namespace, container, id, image,
// then the metric's own); pod-level metrics have container and image "".
//
// The CRI carries values as unsigned integers: the *_seconds_total
// counters are whole seconds, as containerd and CRI-O report them.

// metricKey names one metric.
type metricKey int

// A metric's variable labels, after the base ones.
var (
	metricBaseLabels = []string{"pod", "namespace", "container", "id", "image"}
)

const (
	mCPUUsage metricKey = iota
	mCPUUser
	mCPUSystem
	mCPUCFSPeriods
	mCPUCFSThrottledPeriods
	mCPUCFSThrottledSeconds

	mMemoryCache
	mMemoryRSS
	mMemoryKernel
	mMemoryMappedFile
	mMemorySwap
	mMemoryFailcnt
	mMemoryUsage
	mMemoryMaxUsage
	mMemoryWorkingSet
	mMemoryActiveFile
	mMemoryInactiveFile
	mMemoryFailures
	mOOMEvents

	mNetRxBytes
	mNetRxPackets
	mNetRxDropped
	mNetRxErrors
	mNetTxBytes
	mNetTxPackets
	mNetTxDropped
	mNetTxErrors

	mFsUsage
	mFsLimit
	mFsInodesTotal
	mFsInodesFree

	mBlkioDeviceUsage
	mFsReadsBytes
	mFsReads
	mFsWritesBytes
	mFsWrites

	mProcesses
	mThreads
	mThreadsMax
	mFileDescriptors
	mSockets
	mUlimitsSoft

	mLastSeen
	mStartTime

	mSpecCPUPeriod
	mSpecCPUQuota
	mSpecCPUShares
	mSpecMemoryLimit
	mSpecMemoryReservation
	mSpecMemorySwapLimit

	mPressureCPUStalled
	mPressureCPUWaiting
	mPressureMemoryStalled
	mPressureMemoryWaiting
	mPressureIOStalled
	mPressureIOWaiting

	numMetrics
)

// metricDef is one metric: its name, help, own labels and type.
type metricDef struct {
	name   string
	help   string
	labels []string // after metricBaseLabels
	typ    runtimeapi.MetricType
}

const (
	counter = runtimeapi.MetricType_COUNTER
	gauge   = runtimeapi.MetricType_GAUGE
)

var metricDefs = [numMetrics]metricDef{
	mCPUUsage:               {"container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", []string{"cpu"}, counter},
	mCPUUser:                {"container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", nil, counter},
	mCPUSystem:              {"container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", nil, counter},
	mCPUCFSPeriods:          {"container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", nil, counter},
	mCPUCFSThrottledPeriods: {"container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", nil, counter},
	mCPUCFSThrottledSeconds: {"container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", nil, counter},

	mMemoryCache:        {"container_memory_cache", "Number of bytes of page cache memory.", nil, gauge},
	mMemoryRSS:          {"container_memory_rss", "Size of RSS in bytes.", nil, gauge},
	mMemoryKernel:       {"container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", nil, gauge},
	mMemoryMappedFile:   {"container_memory_mapped_file", "Size of memory mapped files in bytes.", nil, gauge},
	mMemorySwap:         {"container_memory_swap", "Container swap usage in bytes.", nil, gauge},
	mMemoryFailcnt:      {"container_memory_failcnt", "Number of memory usage hits limits", nil, counter},
	mMemoryUsage:        {"container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", nil, gauge},
	mMemoryMaxUsage:     {"container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", nil, gauge},
	mMemoryWorkingSet:   {"container_memory_working_set_bytes", "Current working set in bytes.", nil, gauge},
	mMemoryActiveFile:   {"container_memory_total_active_file_bytes", "Current total active file in bytes.", nil, gauge},
	mMemoryInactiveFile: {"container_memory_total_inactive_file_bytes", "Current total inactive file in bytes.", nil, gauge},
	mMemoryFailures:     {"container_memory_failures_total", "Cumulative count of memory allocation failures.", []string{"failure_type", "scope"}, counter},
	mOOMEvents:          {"container_oom_events_total", "Count of out of memory events observed for the container", nil, counter},

	mNetRxBytes:   {"container_network_receive_bytes_total", "Cumulative count of bytes received", []string{"interface"}, counter},
	mNetRxPackets: {"container_network_receive_packets_total", "Cumulative count of packets received", []string{"interface"}, counter},
	mNetRxDropped: {"container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", []string{"interface"}, counter},
	mNetRxErrors:  {"container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", []string{"interface"}, counter},
	mNetTxBytes:   {"container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", []string{"interface"}, counter},
	mNetTxPackets: {"container_network_transmit_packets_total", "Cumulative count of packets transmitted", []string{"interface"}, counter},
	mNetTxDropped: {"container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", []string{"interface"}, counter},
	mNetTxErrors:  {"container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", []string{"interface"}, counter},

	mFsUsage:       {"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", []string{"device"}, gauge},
	mFsLimit:       {"container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", []string{"device"}, gauge},
	mFsInodesTotal: {"container_fs_inodes_total", "Number of Inodes", []string{"device"}, gauge},
	mFsInodesFree:  {"container_fs_inodes_free", "Number of available Inodes", []string{"device"}, gauge},

	mBlkioDeviceUsage: {"container_blkio_device_usage_total", "Blkio Device bytes usage", []string{"device", "major", "minor", "operation"}, counter},
	mFsReadsBytes:     {"container_fs_reads_bytes_total", "Cumulative count of bytes read", []string{"device"}, counter},
	mFsReads:          {"container_fs_reads_total", "Cumulative count of reads completed", []string{"device"}, counter},
	mFsWritesBytes:    {"container_fs_writes_bytes_total", "Cumulative count of bytes written", []string{"device"}, counter},
	mFsWrites:         {"container_fs_writes_total", "Cumulative count of writes completed", []string{"device"}, counter},

	mProcesses:       {"container_processes", "Number of processes running inside the container.", nil, gauge},
	mThreads:         {"container_threads", "Number of threads running inside the container", nil, gauge},
	mThreadsMax:      {"container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", nil, gauge},
	mFileDescriptors: {"container_file_descriptors", "Number of open file descriptors for the container.", nil, gauge},
	mSockets:         {"container_sockets", "Number of open sockets for the container.", nil, gauge},
	mUlimitsSoft:     {"container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice", []string{"ulimit"}, gauge},

	mLastSeen:  {"container_last_seen", "Last time a container was seen by the exporter", nil, gauge},
	mStartTime: {"container_start_time_seconds", "Start time of the container since unix epoch in seconds.", nil, gauge},

	mSpecCPUPeriod:         {"container_spec_cpu_period", "CPU period of the container.", nil, gauge},
	mSpecCPUQuota:          {"container_spec_cpu_quota", "CPU quota of the container.", nil, gauge},
	mSpecCPUShares:         {"container_spec_cpu_shares", "CPU share of the container.", nil, gauge},
	mSpecMemoryLimit:       {"container_spec_memory_limit_bytes", "Memory limit for the container.", nil, gauge},
	mSpecMemoryReservation: {"container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", nil, gauge},
	mSpecMemorySwapLimit:   {"container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", nil, gauge},

	mPressureCPUStalled:    {"container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", nil, counter},
	mPressureCPUWaiting:    {"container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", nil, counter},
	mPressureMemoryStalled: {"container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", nil, counter},
	mPressureMemoryWaiting: {"container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", nil, counter},
	mPressureIOStalled:     {"container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", nil, counter},
	mPressureIOWaiting:     {"container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", nil, counter},
}

// Descriptors returns the descriptor of every metric PodMetrics may
// report, in a fixed order whatever the host can measure. Fresh messages
// each call: gRPC marshals them, callers may keep them.
func Descriptors() []*runtimeapi.MetricDescriptor {
	out := make([]*runtimeapi.MetricDescriptor, 0, numMetrics)
	for _, d := range metricDefs {
		keys := make([]string, 0, len(metricBaseLabels)+len(d.labels))
		keys = append(append(keys, metricBaseLabels...), d.labels...)
		out = append(out, &runtimeapi.MetricDescriptor{Name: d.name, Help: d.help, LabelKeys: keys})
	}
	return out
}
