// Package quantity parses Kubernetes resource quantities ("10M", "1.5Gi",
// "1e6") into exact values, with k8s.io/apimachinery's grammar and
// rounding but without that dependency.
package quantity

import (
	"errors"
	"math"
	"math/big"
	"strings"
)

// Parse parses a Kubernetes resource quantity (the bandwidth
// annotations' "10M", "1.5Gi", "1e6") into its exact value, rounded up to
// a nano-unit as k8s.io/apimachinery's resource.ParseQuantity rounds it.
// The grammar is apimachinery's:
//
//	quantity ::= sign? number suffix
//	number   ::= digits | digits "." digits? | "." digits
//	suffix   ::= "" | "m" | "k" | "M" | "G" | "T" | "P" | "E"   (decimal SI)
//	           | "n" | "u"
//	           | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"         (binary SI)
//	           | ("e" | "E") sign? digits                        (exponent)
//
// It is podbay's own rather than apimachinery's: that package brought a
// CBOR codec and a JSON fork into podbayd (0.6 MB of binary) for this one
// parse.
func Parse(s string) (*big.Rat, error) {
	const maxExponent = 1024
	errFormat := errors.New("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
	if s == "" {
		return nil, errFormat
	}
	rest := s
	neg := false
	switch rest[0] {
	case '-':
		neg, rest = true, rest[1:]
	case '+':
		rest = rest[1:]
	}
	i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(rest)
	}
	number, suffix := rest[:i], rest[i:]
	intPart, frac, _ := strings.Cut(number, ".")
	if strings.Contains(frac, ".") {
		return nil, errFormat
	}
	v := new(big.Rat)
	if digits := intPart + frac; digits != "" {
		n, ok := new(big.Int).SetString(digits, 10)
		if !ok {
			return nil, errFormat
		}
		v.SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil))
	}

	pow := func(base, exp int64) *big.Rat {
		if exp >= 0 {
			return new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(base), big.NewInt(exp), nil))
		}
		return new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Exp(big.NewInt(base), big.NewInt(-exp), nil))
	}
	decimal := map[string]int64{"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
	binary := map[string]int64{"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
	// A number without digits ("", ".", "-") is zero, except where
	// apimachinery parses the number text as a decimal (a scale below
	// nano, a binary suffix from Pi): there it is an error.
	noDigits := intPart+frac == ""
	isBinary := false
	errNumeric := errors.New("unable to parse numeric part of quantity")
	if e, ok := decimal[suffix]; ok {
		if noDigits && e < -9 {
			return nil, errNumeric
		}
		v.Mul(v, pow(10, e))
	} else if e, ok := binary[suffix]; ok {
		isBinary = true
		if noDigits && e >= 50 {
			return nil, errNumeric
		}
		v.Mul(v, pow(2, e))
	} else if suffix[0] == 'e' || suffix[0] == 'E' {
		exp := suffix[1:]
		digits := strings.TrimLeft(exp, "+-")
		if len(exp)-len(digits) > 1 || digits == "" || strings.Trim(digits, "0123456789") != "" {
			return nil, errFormat
		}
		e, ok := new(big.Int).SetString(exp, 10)
		// apimachinery takes any int32 exponent; past ±maxExponent the
		// value is far outside any range podbay checks, and 10^e would
		// cost a request its time.
		if !ok || !e.IsInt64() || e.Int64() > maxExponent || e.Int64() < -maxExponent {
			return nil, errors.New("quantity's exponent out of range")
		}
		if noDigits && e.Int64() < -9 {
			return nil, errNumeric
		}
		v.Mul(v, pow(10, e.Int64()))
	} else {
		return nil, errors.New("unable to parse quantity's suffix")
	}
	// Round up to a nano-unit, away from zero as apimachinery does.
	nano := big.NewInt(1_000_000_000)
	scaled := new(big.Rat).Mul(v, new(big.Rat).SetInt(nano))
	q, r := new(big.Int).QuoRem(scaled.Num(), scaled.Denom(), new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	v.SetFrac(q, nano)
	// A binary-suffixed quantity is capped at the largest int64.
	if isBinary {
		if limit := new(big.Rat).SetInt64(math.MaxInt64); v.Cmp(limit) > 0 {
			v = limit
		}
	}
	if neg {
		v.Neg(v)
	}
	return v, nil
}

// Ceil is v rounded up to an integer (a Quantity's Value()).
func Ceil(v *big.Rat) *big.Int {
	q, r := new(big.Int).QuoRem(v.Num(), v.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}
