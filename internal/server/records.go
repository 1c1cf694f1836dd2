package server

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podrequest"
	"github.com/podbay/podbay/internal/sandbox"
	"github.com/podbay/podbay/internal/store"
)

// The records of pods and containers, one bucket each, keyed by ID.
const (
	sandboxBucket   = "sandboxes"
	containerBucket = "containers"
)

// save persists a sandbox record.
func (s *Server) save(rec sandbox.Record) error {
	if err := s.db.Put(sandboxBucket, rec.ID, sandbox.RecordVersion, rec); err != nil {
		return fmt.Errorf("persist sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// loadRecords decodes every record of a bucket; unreadable ones (an unknown
// version, bad JSON, a key that is not the record's ID) are quarantined by
// the store and logged.
func loadRecords[R any](ctx context.Context, db *store.DB, bucket string, version int, id func(R) string) ([]R, error) {
	var recs []R
	bad, err := db.ForEach(bucket, func(r store.Record) error {
		if r.Version != version {
			return fmt.Errorf("version %d: %w", r.Version, store.ErrBadRecord)
		}
		var rec R
		if err := json.Unmarshal(r.Data, &rec); err != nil || id(rec) != r.Key {
			return fmt.Errorf("decode: %v: %w", err, store.ErrBadRecord)
		}
		recs = append(recs, rec)
		return nil
	})
	for _, k := range bad {
		log.G(ctx).Error("quarantined unreadable record", "bucket", bucket, "id", k)
	}
	return recs, err
}

// saveContainer persists a container record.
func (s *Server) saveContainer(rec container.Record) error {
	if err := s.db.Put(containerBucket, rec.ID, container.RecordVersion, rec); err != nil {
		return fmt.Errorf("persist container %s: %w", rec.ID, err)
	}
	return nil
}

// saveContainerOrLog is saveContainer where the caller cannot return the
// error.
func (s *Server) saveContainerOrLog(ctx context.Context, rec container.Record) {
	if err := s.saveContainer(rec); err != nil {
		log.G(ctx).Error("persist container", "container", rec.ID, "err", err)
	}
}

// withPodRequest gives a sandbox record written before records held the
// pod's request (Record.Request) the request converted from its stored
// CRI config, without validating it again: the pod was accepted when it
// ran. Its network order is the one it ran with.
func withPodRequest(ctx context.Context, rec sandbox.Record) sandbox.Record {
	if rec.Request != nil || len(rec.Config) == 0 {
		return rec
	}
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := protojson.Unmarshal(rec.Config, cfg); err != nil {
		log.G(ctx).Error("sandbox record: decode its config", "pod", rec.ID, "err", err)
		return rec
	}
	rec.Request = podrequest.FromStoredConfig(cfg, podrequest.Options{RuntimeHandler: rec.RuntimeHandler})
	rec.Request.NetworkOrder = rec.NetworkOrder
	return rec
}

// withContainerRequest is withPodRequest for a container record.
func withContainerRequest(ctx context.Context, rec container.Record) container.Record {
	if rec.Request != nil || len(rec.Config) == 0 {
		return rec
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := protojson.Unmarshal(rec.Config, cfg); err != nil {
		log.G(ctx).Error("container record: decode its config", "container", rec.ID, "err", err)
		return rec
	}
	rec.Request = podrequest.ContainerOf(cfg)
	return rec
}
