package runtime

import "io"

// MaxTerminalSize is the largest width and height passed on: conmon
// rejects bigger ones, and no screen has them.
const MaxTerminalSize = 1000

// Size is a terminal's size in character cells.
type Size struct {
	Width, Height uint16
}

// Clamp limits s to MaxTerminalSize.
func (s Size) Clamp() Size {
	return Size{Width: min(s.Width, MaxTerminalSize), Height: min(s.Height, MaxTerminalSize)}
}

// ApplyResizes calls apply with every size received from sizes until
// sizes is closed or stop is; run it in a goroutine of its own. apply is
// best effort, as a terminal's resize is.
func ApplyResizes(sizes <-chan Size, stop <-chan struct{}, apply func(Size)) {
	for {
		select {
		case size, ok := <-sizes:
			if !ok {
				return
			}
			apply(size)
		case <-stop:
			return
		}
	}
}

// WriterOrDiscard returns w, or io.Discard when w is nil.
func WriterOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
