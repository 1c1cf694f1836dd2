package sandbox

import "github.com/podbay/podbay/internal/nameindex"

// Index is the in-memory set of published sandboxes and the reservation
// of their names.
type Index = nameindex.Index[*Sandbox]

// NewIndex returns an empty index.
func NewIndex() *Index { return nameindex.New("sandbox", func(sb *Sandbox) string { return sb.ID }) }

// ErrNameReserved is wrapped when a name is taken by a published sandbox.
var ErrNameReserved = nameindex.ErrNameReserved
