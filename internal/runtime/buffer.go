package runtime

// CappedBuffer is an io.Writer that keeps the first max bytes written to it
// and discards the rest, so a runaway child cannot grow the daemon. It
// never fails a write: a child blocked on a full pipe would hang.
type CappedBuffer struct {
	max       int
	buf       []byte
	truncated bool // bytes were discarded
}

// NewCappedBuffer returns a CappedBuffer that keeps max bytes.
func NewCappedBuffer(max int) *CappedBuffer { return &CappedBuffer{max: max} }

func (b *CappedBuffer) Write(p []byte) (int, error) {
	room := b.max - len(b.buf)
	if room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	if len(p) > room {
		b.truncated = true
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (b *CappedBuffer) Bytes() []byte { return b.buf }

// Truncated reports whether anything was discarded.
func (b *CappedBuffer) Truncated() bool { return b.truncated }
