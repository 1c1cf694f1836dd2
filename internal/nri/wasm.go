package nri

import (
	"errors"

	"github.com/containerd/nri/pkg/adaptation"
)

// wasmDisabled tells whether an NRI log line is adaptation's notice that
// WASM support was left out at build time (podbay builds with the
// nri_no_wasm tag: the wazero runtime would add 3.7 MB to podbayd's binary,
// and with it to its resident memory, for WASM plugins podbay has never
// tested). It carries the error itself as an argument.
func wasmDisabled(args []any) bool {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, adaptation.ErrWasmDisabled) {
			return true
		}
	}
	return false
}
