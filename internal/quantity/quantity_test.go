package quantity

import (
	"math/big"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// quantityCases are valid and invalid quantities, apimachinery's grammar
// corners among them.
var quantityCases = []string{
	"0", "1", "999", "1000", "1k", "1.5k", "0.5", ".5", "1.", ".", "+", "-", "-1k", "+1k", "10M", "1G",
	"1T", "1P", "2P", "1E", "1Ki", "1Mi", "1.5Gi", "1Ti", "1Pi", "1Ei", "1m", "1500m", "1n", "1u",
	"1e3", "1E3", "1e+3", "1e-3", "1.5e3", "12e15", "1e", "1e--3", "1ee3", "1k5", "1K", "10X", "fast",
	"", " 1", "1 ", "10 M", "1.2.3", "k", "Ki", "e3", "0001k", "1000.0000000001", "999.9999999999",
	"0.9999999999999k", "1000000000000000.000000001", "123456789012345678901234567890",
	"1e999", "1e-999", "-0", "1.0Ki", "0.1Ki", "1i", "1mi", "1Mii",
	"8Ei", "-9Ei", "e-10", ".e-10", "-e-10", "1.e-10", ".5e-10", "e-9", "Pi", "Ei", ".Ti", "-Pi", "n", ".u", "0.5n",
}

// TestParseQuantityMatchesApimachinery: Parse accepts what
// resource.ParseQuantity accepts, with the same value at nano precision
// and the same Value() (rounded up).
func TestParseQuantityMatchesApimachinery(t *testing.T) {
	for _, s := range quantityCases {
		want, werr := resource.ParseQuantity(s)
		got, gerr := Parse(s)
		if (werr == nil) != (gerr == nil) {
			t.Errorf("%q: apimachinery err %v, podbay err %v", s, werr, gerr)
			continue
		}
		if werr != nil {
			continue
		}
		wantNano, ok := new(big.Rat).SetString(want.AsDec().String())
		if !ok {
			t.Fatalf("%q: apimachinery's value %s", s, want.AsDec().String())
		}
		if got.Cmp(wantNano) != 0 {
			t.Errorf("%q = %s, apimachinery %s", s, got.FloatString(9), wantNano.FloatString(9))
		}
		if want.Cmp(resource.MustParse("1P")) <= 0 && want.Sign() >= 0 {
			if g := Ceil(got); g.Int64() != want.Value() {
				t.Errorf("%q: Value %d, apimachinery %d", s, g.Int64(), want.Value())
			}
		}
	}
}

func FuzzParseQuantity(f *testing.F) {
	for _, s := range quantityCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 64 {
			return
		}
		want, werr := resource.ParseQuantity(s)
		got, gerr := Parse(s)
		if werr != nil || gerr != nil {
			if (werr == nil) != (gerr == nil) && (werr == nil || gerr == nil) {
				// An exponent past ±1024 is refused here, accepted there.
				if werr == nil && gerr != nil && gerr.Error() == "quantity's exponent out of range" {
					return
				}
				t.Fatalf("%q: apimachinery err %v, podbay err %v", s, werr, gerr)
			}
			return
		}
		wantNano, _ := new(big.Rat).SetString(want.AsDec().String())
		if got.Cmp(wantNano) != 0 {
			t.Fatalf("%q = %s, apimachinery %s", s, got.FloatString(9), wantNano.FloatString(9))
		}
	})
}
