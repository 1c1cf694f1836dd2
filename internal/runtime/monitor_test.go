package runtime

import (
	"context"
	"errors"
	"os/exec"
	"testing"
)

func TestStartMonitor(t *testing.T) {
	spawnedBy := func(err error) (func(*exec.Cmd) error, *int) {
		calls := new(int)
		return func(cmd *exec.Cmd) error {
			*calls++
			if err != nil {
				return err
			}
			return cmd.Start()
		}, calls
	}
	place := func(context.Context, int) error { return nil }
	boom := errors.New("boom")
	for _, tt := range []struct {
		name        string
		spawnErr    error
		place       bool
		wantSpawned bool
		wantCalls   int
		wantErr     error
	}{
		{name: "spawned", wantSpawned: true, wantCalls: 1},
		{name: "no spawner: started, to be moved", spawnErr: ErrMonitorNotSpawned, wantCalls: 1},
		{name: "spawn failed", spawnErr: boom, wantCalls: 1, wantErr: boom},
		{name: "placed: no spawner asked", place: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spawn, calls := spawnedBy(tt.spawnErr)
			o := CreateOptions{SpawnMonitor: spawn}
			if tt.place {
				o.PlaceMonitor = place
			}
			cmd := exec.Command("true")
			spawned, err := o.StartMonitor(cmd)
			if !errors.Is(err, tt.wantErr) || spawned != tt.wantSpawned || *calls != tt.wantCalls {
				t.Fatalf("StartMonitor = %v, %v after %d spawner calls; want %v, %v after %d",
					spawned, err, *calls, tt.wantSpawned, tt.wantErr, tt.wantCalls)
			}
			if tt.wantErr == nil {
				if cmd.Process == nil {
					t.Fatal("the command was not started")
				}
				cmd.Wait()
			}
		})
	}
}
