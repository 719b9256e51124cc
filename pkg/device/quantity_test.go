package device

import (
	"encoding/json"
	"math/big"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// hugeExponent matches decimal exponents of five digits or more.
var hugeExponent = regexp.MustCompile(`[eE][+-]?0*[0-9]{5,}`)

const memField = "spec.containers[gpu].resources.limits[nvidia.com/gpumem]"

// case C07: one quantity rule, on value and format, never on spelling.
func TestParseMemoryMiB(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		// errParts must all appear in the error (empty: no error expected).
		errParts []string
	}{
		{in: "16Gi", want: 16384},
		{in: "1536Ki", want: 2}, // 1.5 MiB rounds up
		{in: "1Ki", want: 1},    // never rounded down to 0
		{in: "1Mi", want: 1},
		{in: "24576Mi", want: 24576},
		{in: "4Ti", want: MaxGPUMemoryMiB},
		{in: "3000", want: 3000},
		{in: "3k", want: 3000}, // what "3000" looks like after the API server normalized it
		{in: "3e3", want: 3000},
		{in: "1", want: 1},
		{in: "4194304", want: MaxGPUMemoryMiB},
		{in: "0.5", errParts: []string{memField + ": 500m (Kubernetes' canonical form; = 0.5) is not a whole number of MiB"}},
		{in: "500m", errParts: []string{memField, "500m", "not a whole number of MiB"}},
		{in: "1500m", errParts: []string{memField, "1500m", "not a whole number"}},
		{in: "0", errParts: []string{memField, ": 0 is not a positive amount"}},
		{in: "-1", errParts: []string{memField, "-1", "not a positive amount"}},
		{in: "-1Gi", errParts: []string{memField, "-1Gi", "not a positive amount"}},
		{in: "0Mi", errParts: []string{memField, "not a positive amount"}},
		// 3000M arrives as 3G = 3,000,000,000 MiB: rejected, suggesting the binary suffix.
		// The message quotes both the canonical form and the user's likely spelling (issue 18).
		{in: "3000M", errParts: []string{memField + ": 3G (Kubernetes' canonical form; = 3000M = 3000000000) is 3000000000 MiB", "did you mean 3000Mi"}},
		{in: "16G", errParts: []string{memField, "did you mean 16000Mi or 16Gi?"}},
		{in: "5000000", errParts: []string{"5M (Kubernetes' canonical form; = 5000000) is 5000000 MiB", "did you mean 5Mi?"}},
		{in: "4194305", errParts: []string{": 4194305 is 4194305 MiB", "more than any GPU has (at most 4194304 MiB)"}},
		{in: "9223372036854775807", errParts: []string{"is 9223372036854775807 MiB"}},
		{in: "1e30", errParts: []string{"1e30", "more than any GPU has"}},
		{in: "5Ti", errParts: []string{memField, "5Ti is more GPU memory than any GPU has"}},
		{in: "1Ei", errParts: []string{"1Ei is more GPU memory than any GPU has"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMemoryMiB(memField, resource.MustParse(tc.in))
			if len(tc.errParts) == 0 {
				if err != nil || got != tc.want {
					t.Fatalf("ParseMemoryMiB(%s) = %d, %v; want %d, nil", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseMemoryMiB(%s) = %d, nil; want an error", tc.in, got)
			}
			if got != 0 {
				t.Errorf("ParseMemoryMiB(%s) returned %d with its error; want 0", tc.in, got)
			}
			for _, part := range tc.errParts {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not contain %q", err, part)
				}
			}
		})
	}
}

// case C08: 0 is rejected for gpumem-percentage (lo = 1), never booked as 0 MiB; gpucores accepts
// 0 (lo = 0: no compute share booked). Fractions and values above 100 are rejected.
func TestParsePercent(t *testing.T) {
	const f = "spec.containers[gpu].resources.limits[nvidia.com/gpumem-percentage]"
	for _, tc := range []struct {
		in      string
		lo      int
		want    int
		errPart string
	}{
		{in: "20", lo: 1, want: 20},
		{in: "1", lo: 1, want: 1},
		{in: "100", lo: 1, want: 100},
		{in: "0", lo: 1, errPart: f + ": 0 is outside 1..100 (percent)"}, // case C08: rejected, documented
		{in: "0", lo: 0, want: 0},                                        // gpucores: 0 = no limit
		{in: "101", lo: 0, errPart: f + ": 101 is outside 0..100"},
		{in: "-1", lo: 0, errPart: f + ": -1 is outside 0..100"},
		{in: "0.5", lo: 0, errPart: f + ": 500m (Kubernetes' canonical form; = 0.5) is not a whole percentage"},
		{in: "50500m", lo: 1, errPart: "50500m (Kubernetes' canonical form; = 50.5) is not a whole percentage"},
		{in: "1e30", lo: 1, errPart: "1e30 is outside 1..100"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParsePercent(f, resource.MustParse(tc.in), tc.lo)
			if tc.errPart == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParsePercent(%s, lo %d) = %d, %v; want %d", tc.in, tc.lo, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Fatalf("ParsePercent(%s, lo %d) = %d, %v; want error containing %q", tc.in, tc.lo, got, err, tc.errPart)
			}
		})
	}
}

func TestParseCount(t *testing.T) {
	const f = "spec.containers[gpu].resources.limits[nvidia.com/gpu]"
	for _, tc := range []struct {
		in      string
		want    int
		errPart string
	}{
		{in: "1", want: 1},
		{in: "8", want: 8},
		{in: "32767", want: 32767},
		{in: "32768", errPart: f + ": 32768 is not a GPU count between 1 and 32767"},
		{in: "0", errPart: f + ": 0 is not a GPU count"},
		{in: "-2", errPart: f + ": -2 is not a GPU count"},
		{in: "1.5", errPart: f + ": 1500m (Kubernetes' canonical form; = 1.5) is not a whole number of GPUs"},
		{in: "500m", errPart: "500m (Kubernetes' canonical form; = 0.5) is not a whole number of GPUs"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCount(f, resource.MustParse(tc.in))
			if tc.errPart == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParseCount(%s) = %d, %v; want %d", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errPart) {
				t.Fatalf("ParseCount(%s) = %d, %v; want error containing %q", tc.in, got, err, tc.errPart)
			}
		})
	}
}

// case C08: percent arithmetic rounds up, never down to 0.
func TestPercentOfMiB(t *testing.T) {
	for _, tc := range []struct {
		total int64
		pct   int
		want  int64
	}{
		{24000, 20, 4800},
		{24576, 50, 12288},
		{10, 1, 1}, // 0.1 MiB rounds up to 1, never 0
		{1, 1, 1},
		{81920, 100, 81920},
		{24001, 50, 12001}, // 12000.5 rounds up
		{MaxGPUMemoryMiB, 100, MaxGPUMemoryMiB},
	} {
		if got := PercentOfMiB(tc.total, tc.pct); got != tc.want {
			t.Errorf("PercentOfMiB(%d, %d) = %d, want %d", tc.total, tc.pct, got, tc.want)
		}
	}
}

// FuzzParseMemoryMiB: any quantity string; ParseMemoryMiB never panics; an accepted value is in
// 1..MaxGPUMemoryMiB, and a binary-SI one equals ceil(bytes / MiB) computed exactly.
func FuzzParseMemoryMiB(f *testing.F) {
	for _, s := range []string{"16Gi", "1536Ki", "3000", "3k", "0.5", "500m", "0", "-1", "3000M", "1e30",
		"4Ti", "5Ti", "0.5Ki", "1.5Mi", "9223372036854775807", "1n", "1Ei", "123456789012345678901234567890Ki", "1e-3", "1e9999", "1e-9999"} {
		f.Add(s)
	}
	mibRat := big.NewRat(1<<20, 1)
	f.Fuzz(func(t *testing.T, s string) {
		if hugeExponent.MatchString(s) {
			// k8s.io/apimachinery's ParseQuantity itself can spin on some exponents of 10^17 and
			// more ("3e122222222222222200"); the API server parses before anyone sees the pod.
			// Exponents up to 9999 still reach ParseMemoryMiB (seeds "9223E72036854775807"
			// covers the huge-exponent path after parsing, which once hung in Quantity.Cmp).
			return
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return
		}
		got, err := ParseMemoryMiB("f", q)
		if err != nil {
			if got != 0 {
				t.Fatalf("%q: %d returned with error %v", s, got, err)
			}
			if !strings.HasPrefix(err.Error(), "f: ") {
				t.Fatalf("%q: error %q does not name the field", s, err)
			}
			return
		}
		if got < 1 || got > MaxGPUMemoryMiB {
			t.Fatalf("%q accepted as %d MiB, outside 1..%d", s, got, MaxGPUMemoryMiB)
		}
		exact, ok := new(big.Rat).SetString(q.AsDec().String())
		if !ok {
			t.Fatalf("%q: cannot read %s back", s, q.AsDec())
		}
		if q.Format == resource.BinarySI {
			// ceil(bytes / MiB)
			r := new(big.Rat).Quo(exact, mibRat)
			want := new(big.Int).Quo(r.Num(), r.Denom())
			if new(big.Rat).SetInt(want).Cmp(r) < 0 {
				want.Add(want, big.NewInt(1))
			}
			if !want.IsInt64() || want.Int64() != got {
				t.Fatalf("%q (binary) = %d MiB, want ceil(bytes/MiB) = %s", s, got, want)
			}
		} else if !exact.IsInt() || exact.Num().Int64() != got {
			t.Fatalf("%q (decimal) = %d MiB, want exactly %s", s, got, exact.RatString())
		}
	})
}

// Why a refusal cannot quote what the user typed: a quantity decoded from JSON keeps no spelling,
// so the object the API server re-encodes for admission (AdmissionRequest.Object) and stores has
// the canonical form. This is the decode/encode the API server does (issue 18).
func TestQuantitySpellingIsNotKept(t *testing.T) {
	var l map[string]resource.Quantity
	if err := json.Unmarshal([]byte(`{"nvidia.com/gpumem":"3000M","nvidia.com/gpucores":"0.5"}`), &l); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"nvidia.com/gpucores":"500m","nvidia.com/gpumem":"3G"}` {
		t.Fatalf("re-encoded %s", b)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"3000M": "3G (Kubernetes' canonical form; = 3000M = 3000000000)",
		"0.5":   "500m (Kubernetes' canonical form; = 0.5)",
		"3000":  "3k (Kubernetes' canonical form; = 3000)",
		"30":    "30", "0": "0", "16Gi": "16Gi", "1e30": "1e30", "-2M": "-2M (Kubernetes' canonical form; = -2000000)",
	} {
		if got := quote(resource.MustParse(in)); got != want {
			t.Errorf("quote(%s) = %q, want %q", in, got, want)
		}
	}
}
