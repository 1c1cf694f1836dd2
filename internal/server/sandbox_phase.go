package server

import "github.com/podbay/podbay/internal/sandbox"

// advance moves sb's record through one lifecycle transition (a method of
// sandbox.Record) and persists the result; a published pod that leaves
// ready has its STOPPED event published (container_events.go). A refused
// transition changes nothing and is returned as an error.
func (s *Server) advance(sb *sandbox.Sandbox, step func(*sandbox.Record) error) (sandbox.Record, error) {
	before := sb.Phase()
	applied := false
	rec, err := sb.Advance(step, func(rec sandbox.Record) error {
		applied = true
		return s.save(rec)
	})
	if applied {
		s.sandboxAdvanced(sb, before, rec)
	}
	return rec, err
}
