package grpcserver

import (
	"bytes"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestExecSyncCodec: the codec writes an ExecSyncResponse byte for byte
// as proto.Marshal does, without copying its output, and other messages
// as the proto codec does.
func TestExecSyncCodec(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, 300<<10)
	for _, tc := range []struct {
		name string
		resp *runtimeapi.ExecSyncResponse
	}{
		{"empty", &runtimeapi.ExecSyncResponse{}},
		{"stdout", &runtimeapi.ExecSyncResponse{Stdout: []byte("ok\n")}},
		{"stderr and exit code", &runtimeapi.ExecSyncResponse{Stderr: []byte("no\n"), ExitCode: 2}},
		{"empty, not nil", &runtimeapi.ExecSyncResponse{Stdout: []byte{}, Stderr: []byte{}}},
		{"timed out", &runtimeapi.ExecSyncResponse{Stdout: []byte("a"), Stderr: []byte("command timed out after 1s\n"), ExitCode: -1}},
		{"int32 bounds", &runtimeapi.ExecSyncResponse{ExitCode: math.MinInt32}},
		{"max int32", &runtimeapi.ExecSyncResponse{ExitCode: math.MaxInt32}},
		{"large", &runtimeapi.ExecSyncResponse{Stdout: big, Stderr: big[:200], ExitCode: 137}},
		{"length of 127 and 128", &runtimeapi.ExecSyncResponse{Stdout: big[:127], Stderr: big[:128]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := proto.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			data, err := ExecSyncCodec{}.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			if got := data.Materialize(); !bytes.Equal(got, want) {
				t.Errorf("Marshal = %x, want %x", got, want)
			}
			if len(tc.resp.Stdout) > 0 {
				handed := false
				for _, buf := range data {
					if b := buf.ReadOnlyData(); len(b) > 0 && &b[0] == &tc.resp.Stdout[0] {
						handed = true
					}
				}
				if !handed {
					t.Error("stdout was copied")
				}
			}
			var back runtimeapi.ExecSyncResponse
			if err := (ExecSyncCodec{}).Unmarshal(data, &back); err != nil || !proto.Equal(&back, tc.resp) {
				t.Errorf("Unmarshal = %v, %v", &back, err)
			}
		})
	}

	other := &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "podbay"}
	data, err := ExecSyncCodec{}.Marshal(other)
	want, _ := proto.Marshal(other)
	if err != nil || !bytes.Equal(data.Materialize(), want) {
		t.Errorf("Marshal(%v) = %x, %v; want %x", other, data.Materialize(), err, want)
	}
}
